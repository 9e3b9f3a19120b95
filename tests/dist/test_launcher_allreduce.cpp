// tests/dist/test_launcher_allreduce.cpp — Gloo across launchers: two `minidl-run --nnodes 2`
// invocations (node ranks 0 and 1) on 127.0.0.1 form one world of 4 whose all-reduce gives
// every rank 1 + 2 + 3 + 4. The worker is this test binary (allreduce_worker.cpp).
#include <sys/stat.h>

#include "dist/socket.h"
#include "tests/common/testing.h"
#include "tests/dist/dist_test_util.h"

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using minidl::testing::exit_code;
using minidl::testing::launcher_path;
using minidl::testing::start_process;
using minidl::testing::Subprocess;
using minidl::testing::wait_process;

TEST(LauncherGloo, TwoNodesOnOneMachineAllReduceAsAWorldOfFour) {
  struct stat st {};
  ASSERT_EQ(::stat(launcher_path().c_str(), &st), 0) << launcher_path() << " is missing: build the minidl-run target";
  std::string port = std::to_string(minidl::dist::find_free_port());
  std::map<std::string, std::string> env{{"MINIDL_TEST_PG_WORKER", "allreduce"}};
  auto node = [&](const std::string& node_rank) {
    return start_process({launcher_path(), "--nproc-per-node", "2", "--nnodes", "2", "--node-rank", node_rank,
                          "--master-addr", "127.0.0.1", "--master-port", port, minidl::testing::self_path()},
                         env);
  };
  Subprocess node0 = node("0");
  Subprocess node1 = node("1");
  ASSERT_TRUE(wait_process(node0, 12s));
  ASSERT_TRUE(wait_process(node1, 12s));
  EXPECT_EQ(exit_code(node0), 0) << node0.err;
  EXPECT_EQ(exit_code(node1), 0) << node1.err;
  EXPECT_THAT(node0.out, HasSubstr("[rank 0] rank 0/4 allreduce 10\n"));
  EXPECT_THAT(node0.out, HasSubstr("[rank 1] rank 1/4 allreduce 10\n"));
  EXPECT_THAT(node1.out, HasSubstr("[rank 2] rank 2/4 allreduce 10\n"));
  EXPECT_THAT(node1.out, HasSubstr("[rank 3] rank 3/4 allreduce 10\n"));
}
