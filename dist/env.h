// dist/env.h — where this process sits in the world, read from its environment.
//
// Sources, first match wins:
//   1. minidl-run / torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
//      MASTER_ADDR, MASTER_PORT.
//   2. SLURM (srun): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID, and the tasks on
//      this node from SLURM_NTASKS_PER_NODE or SLURM_TASKS_PER_NODE ("4(x2),3").
//   3. Open MPI (mpirun): OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE.
//   4. None of them: a single process (rank 0 of 1).
// MASTER_ADDR and MASTER_PORT are read in every case (SLURM and Open MPI do not set them).
//
// Defaults, only where no guess is involved: LOCAL_WORLD_SIZE = WORLD_SIZE (one node) when
// neither LOCAL_RANK nor LOCAL_WORLD_SIZE is set; LOCAL_RANK = RANK % LOCAL_WORLD_SIZE;
// GROUP_RANK = RANK / LOCAL_WORLD_SIZE; with world size 1, MASTER_ADDR 127.0.0.1 and
// MASTER_PORT 0 (any free port). A missing, non-numeric or contradictory variable
// (RANK without WORLD_SIZE, RANK >= WORLD_SIZE, MASTER_PORT 70000, ...) is a std::runtime_error
// that names it.
#pragma once
#include <cstdint>
#include <string>

namespace minidl::dist {

struct WorldInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int group_rank = 0;  // the node's index (torchrun's GROUP_RANK, SLURM_NODEID)
  std::string master_addr = "127.0.0.1";
  uint16_t master_port = 0;
  std::string source = "default";  // "env", "slurm", "ompi" or "default": where it came from
};

WorldInfo world_info_from_env();

}  // namespace minidl::dist
