// tests/dist/test_env.cpp — world_info_from_env(): torchrun variables, SLURM and Open MPI
// fallbacks, defaults, and errors that name the missing or contradictory variable.
#include "minidl/dist/env.h"
#include "tests/common/testing.h"
#include "tests/dist/dist_test_util.h"

using minidl::dist::world_info_from_env;
using minidl::testing::EnvGuard;

TEST(WorldInfoFromEnv, NothingSetIsASingleProcess) {
  EnvGuard env;
  auto w = world_info_from_env();
  EXPECT_EQ(w.rank, 0);
  EXPECT_EQ(w.world_size, 1);
  EXPECT_EQ(w.local_rank, 0);
  EXPECT_EQ(w.local_world_size, 1);
  EXPECT_EQ(w.group_rank, 0);
  EXPECT_EQ(w.master_addr, "127.0.0.1");
  EXPECT_EQ(w.master_port, 0);
  EXPECT_EQ(w.source, "default");
}

TEST(WorldInfoFromEnv, ReadsTheLauncherVariables) {
  EnvGuard env;
  env.set("RANK", "5");
  env.set("WORLD_SIZE", "8");
  env.set("LOCAL_RANK", "1");
  env.set("LOCAL_WORLD_SIZE", "4");
  env.set("GROUP_RANK", "1");
  env.set("MASTER_ADDR", "node0");
  env.set("MASTER_PORT", "29500");
  auto w = world_info_from_env();
  EXPECT_EQ(w.rank, 5);
  EXPECT_EQ(w.world_size, 8);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_world_size, 4);
  EXPECT_EQ(w.group_rank, 1);
  EXPECT_EQ(w.master_addr, "node0");
  EXPECT_EQ(w.master_port, 29500);
  EXPECT_EQ(w.source, "env");
}

TEST(WorldInfoFromEnv, RankAndWorldSizeAloneMeanOneNode) {
  EnvGuard env;
  env.set("RANK", "2");
  env.set("WORLD_SIZE", "3");
  env.set("MASTER_ADDR", "127.0.0.1");
  env.set("MASTER_PORT", "1234");
  auto w = world_info_from_env();
  EXPECT_EQ(w.local_rank, 2);
  EXPECT_EQ(w.local_world_size, 3);
  EXPECT_EQ(w.group_rank, 0);
}

TEST(WorldInfoFromEnv, SlurmFallback) {
  EnvGuard env;
  env.set("SLURM_PROCID", "6");
  env.set("SLURM_NTASKS", "8");
  env.set("SLURM_LOCALID", "2");
  env.set("SLURM_NODEID", "1");
  env.set("SLURM_TASKS_PER_NODE", "4(x2)");
  env.set("MASTER_ADDR", "node0");
  env.set("MASTER_PORT", "29500");
  auto w = world_info_from_env();
  EXPECT_EQ(w.source, "slurm");
  EXPECT_EQ(w.rank, 6);
  EXPECT_EQ(w.world_size, 8);
  EXPECT_EQ(w.local_rank, 2);
  EXPECT_EQ(w.local_world_size, 4);
  EXPECT_EQ(w.group_rank, 1);
}

TEST(WorldInfoFromEnv, SlurmTasksPerNodeListIsIndexedByNode) {
  EnvGuard env;
  env.set("SLURM_PROCID", "8");
  env.set("SLURM_NTASKS", "9");
  env.set("SLURM_LOCALID", "0");
  env.set("SLURM_NODEID", "2");
  env.set("SLURM_TASKS_PER_NODE", "4(x2),1");
  env.set("MASTER_ADDR", "node0");
  env.set("MASTER_PORT", "29500");
  EXPECT_EQ(world_info_from_env().local_world_size, 1);
  env.set("SLURM_NTASKS_PER_NODE", "3");  // the explicit count wins
  env.set("SLURM_PROCID", "6");
  EXPECT_EQ(world_info_from_env().local_world_size, 3);
}

TEST(WorldInfoFromEnv, OpenMpiFallback) {
  EnvGuard env;
  env.set("OMPI_COMM_WORLD_RANK", "3");
  env.set("OMPI_COMM_WORLD_SIZE", "4");
  env.set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  env.set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  env.set("MASTER_ADDR", "10.0.0.1");
  env.set("MASTER_PORT", "1234");
  auto w = world_info_from_env();
  EXPECT_EQ(w.source, "ompi");
  EXPECT_EQ(w.rank, 3);
  EXPECT_EQ(w.world_size, 4);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_world_size, 2);
  EXPECT_EQ(w.group_rank, 1);
}

TEST(WorldInfoFromEnv, LauncherVariablesWinOverSlurm) {
  EnvGuard env;
  env.set("SLURM_PROCID", "0");
  env.set("SLURM_NTASKS", "2");
  env.set("RANK", "3");
  env.set("WORLD_SIZE", "4");
  env.set("MASTER_ADDR", "127.0.0.1");
  env.set("MASTER_PORT", "1234");
  auto w = world_info_from_env();
  EXPECT_EQ(w.source, "env");
  EXPECT_EQ(w.rank, 3);
}

TEST(WorldInfoFromEnv, RankWithoutWorldSizeNamesWorldSize) {
  EnvGuard env;
  env.set("RANK", "0");
  EXPECT_THROW_MSG(world_info_from_env(), std::runtime_error, "RANK is set but WORLD_SIZE is not");
}

TEST(WorldInfoFromEnv, WorldSizeWithoutRankNamesRank) {
  EnvGuard env;
  env.set("WORLD_SIZE", "2");
  EXPECT_THROW_MSG(world_info_from_env(), std::runtime_error, "WORLD_SIZE is set but RANK is not");
}

TEST(WorldInfoFromEnv, RankNotBelowWorldSizeIsAnError) {
  EnvGuard env;
  env.set("RANK", "4");
  env.set("WORLD_SIZE", "4");
  EXPECT_THROW_MSG(world_info_from_env(), std::runtime_error, "RANK=4 is not in [0, WORLD_SIZE=4)");
}

TEST(WorldInfoFromEnv, NonNumericVariableIsNamed) {
  EnvGuard env;
  env.set("RANK", "zero");
  env.set("WORLD_SIZE", "2");
  EXPECT_THROW_MSG(world_info_from_env(), std::runtime_error, "RANK='zero' is not an integer");
  env.set("RANK", "1x");
  EXPECT_THROW_MSG(world_info_from_env(), std::runtime_error, "RANK='1x' is not an integer");
}

TEST(WorldInfoFromEnv, LocalRankOutsideLocalWorldIsAnError) {
  EnvGuard env;
  env.set("RANK", "1");
  env.set("WORLD_SIZE", "4");
  env.set("LOCAL_RANK", "2");
  env.set("LOCAL_WORLD_SIZE", "2");
  EXPECT_THROW_MSG(world_info_from_env(), std::runtime_error, "LOCAL_RANK=2 is not in [0, LOCAL_WORLD_SIZE=2)");
  env.set("LOCAL_RANK", "0");
  env.set("LOCAL_WORLD_SIZE", "8");
  EXPECT_THROW_MSG(world_info_from_env(), std::runtime_error, "LOCAL_WORLD_SIZE=8 is not in [1, WORLD_SIZE=4]");
}

TEST(WorldInfoFromEnv, LocalRankWithoutLocalWorldSizeIsAnError) {
  EnvGuard env;
  env.set("RANK", "1");
  env.set("WORLD_SIZE", "4");
  env.set("LOCAL_RANK", "1");
  EXPECT_THROW_MSG(world_info_from_env(), std::runtime_error, "LOCAL_RANK is set but LOCAL_WORLD_SIZE is not");
}

TEST(WorldInfoFromEnv, LocalRankAloneIsAnError) {
  EnvGuard env;
  env.set("LOCAL_RANK", "0");
  EXPECT_THROW_MSG(world_info_from_env(), std::runtime_error, "LOCAL_RANK is set but RANK and WORLD_SIZE are not");
}

TEST(WorldInfoFromEnv, SeveralProcessesNeedMasterAddrAndPort) {
  EnvGuard env;
  env.set("RANK", "0");
  env.set("WORLD_SIZE", "2");
  EXPECT_THROW_MSG(world_info_from_env(), std::runtime_error, "MASTER_ADDR is not set");
  env.set("MASTER_ADDR", "127.0.0.1");
  EXPECT_THROW_MSG(world_info_from_env(), std::runtime_error, "MASTER_PORT is not set");
  env.set("MASTER_PORT", "70000");
  EXPECT_THROW_MSG(world_info_from_env(), std::runtime_error, "MASTER_PORT=70000 is not a port");
  env.set("MASTER_PORT", "0");
  EXPECT_THROW_MSG(world_info_from_env(), std::runtime_error, "MASTER_PORT=0 is not a port");
}

TEST(WorldInfoFromEnv, SlurmErrorsNameSlurmVariables) {
  EnvGuard env;
  env.set("SLURM_PROCID", "3");
  env.set("SLURM_NTASKS", "2");
  EXPECT_THROW_MSG(world_info_from_env(), std::runtime_error, "SLURM_PROCID=3 is not in [0, SLURM_NTASKS=2)");
  env.set("SLURM_PROCID", "1");
  env.set("SLURM_LOCALID", "1");
  EXPECT_THROW_MSG(world_info_from_env(), std::runtime_error, "SLURM_LOCALID is set but SLURM_NTASKS_PER_NODE is not");
}
