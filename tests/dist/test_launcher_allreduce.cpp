// tests/dist/test_launcher_allreduce.cpp — Gloo across launchers: two `minidl-run --nnodes 2`
// invocations (node ranks 0 and 1) on 127.0.0.1 form one world of 4 whose all-reduce gives
// every rank 1 + 2 + 3 + 4. The worker is this test binary (allreduce_worker.cpp).
#include <sys/stat.h>

#include "tests/common/testing.h"
#include "tests/dist/dist_test_util.h"

using namespace std::chrono_literals;
using minidl::testing::exit_code;
using minidl::testing::launcher_path;
using ::testing::HasSubstr;

TEST(LauncherGloo, TwoNodesOnOneMachineAllReduceAsAWorldOfFour) {
  struct stat st {};
  ASSERT_EQ(::stat(launcher_path().c_str(), &st), 0) << launcher_path() << " is missing: build the minidl-run target";
  auto [node0, node1, ended] = minidl::testing::run_two_launcher_nodes({{"MINIDL_TEST_PG_WORKER", "allreduce"}}, 12s);
  ASSERT_TRUE(ended);
  EXPECT_EQ(exit_code(node0), 0) << node0.err;
  EXPECT_EQ(exit_code(node1), 0) << node1.err;
  EXPECT_THAT(node0.out, HasSubstr("[rank 0] rank 0/4 allreduce 10\n"));
  EXPECT_THAT(node0.out, HasSubstr("[rank 1] rank 1/4 allreduce 10\n"));
  EXPECT_THAT(node1.out, HasSubstr("[rank 2] rank 2/4 allreduce 10\n"));
  EXPECT_THAT(node1.out, HasSubstr("[rank 3] rank 3/4 allreduce 10\n"));
}
