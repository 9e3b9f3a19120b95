// tests/dist/test_launcher_restart.cpp — minidl-run --max-restarts: a failed group is started
// again (a fresh MASTER_PORT, MINIDL_RESTART_COUNT counting up) with the cause logged; it gives
// up when the restarts are used up or a failure repeats at the same step; a stopped worker is
// named; two launchers (--nnodes 2) restart together, and a launcher that is gone is found by
// its missing heartbeat. The torchrun spellings (--standalone, --rdzv-endpoint, --nnodes N:N)
// work (elastic sizes: test_launcher_elastic.cpp). Workers are /bin/sh scripts.
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <thread>

#include "minidl/dist/socket.h"
#include "tests/common/testing.h"
#include "tests/dist/dist_test_util.h"

using namespace std::chrono_literals;
using minidl::testing::exit_code;
using minidl::testing::launcher_path;
using minidl::testing::start_process;
using minidl::testing::Subprocess;
using minidl::testing::wait_process;
using ::testing::HasSubstr;

namespace {

// minidl-run ARGS..., run to completion (at most `limit`).
Subprocess run(const std::vector<std::string>& args, std::chrono::milliseconds limit = 20s) {
  std::vector<std::string> argv{launcher_path()};
  argv.insert(argv.end(), args.begin(), args.end());
  Subprocess p = start_process(argv);
  EXPECT_TRUE(wait_process(p, limit)) << "minidl-run did not finish in time";
  return p;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST(LauncherRestart, AFailedGroupIsStartedAgainWithItsCauseLogged) {
  // Round 0: rank 1 kills itself; round 1: everyone succeeds.
  Subprocess p = run({"--nproc-per-node", "2", "--max-restarts", "2", "/bin/sh", "-c",
                      "echo round $MINIDL_RESTART_COUNT of $MINIDL_MAX_RESTARTS port $MASTER_PORT; "
                      "if [ $MINIDL_RESTART_COUNT = 0 ]; then if [ $RANK = 1 ]; then kill -KILL $$; fi; sleep 30; fi"});
  EXPECT_EQ(exit_code(p), 0) << p.err;
  EXPECT_THAT(p.err,
              HasSubstr("restart 1/2 (cause: rank 1 was killed by signal 9 (Killed)): starting a new group of 2"));
  EXPECT_THAT(p.out, HasSubstr("[rank 0] round 1 of 2 port "));
  EXPECT_THAT(p.out, HasSubstr("[rank 1] round 1 of 2 port "));
  EXPECT_EQ(count(p.err, "restart 1/2"), 1u);
  EXPECT_THAT(p.err, ::testing::Not(HasSubstr("restart 2/2")));
  // Each round had its own MASTER_PORT (a fresh store and process group).
  std::set<std::string> ports;
  std::regex port_re("round \\d of 2 port (\\d+)");
  for (std::sregex_iterator it(p.out.begin(), p.out.end(), port_re), end; it != end; ++it) ports.insert((*it)[1]);
  EXPECT_EQ(ports.size(), 2u) << p.out;
}

TEST(LauncherRestart, GivesUpWhenTheRestartsAreUsedUp) {
  minidl::testing::TempDir tmp;
  Subprocess p = run(
      {"--nproc-per-node", "1", "--max-restarts", "2", "/bin/sh", "-c", "echo x >> " + tmp.path() + "/starts; exit 3"});
  EXPECT_EQ(exit_code(p), 1);
  EXPECT_THAT(p.err, HasSubstr("restart 2/2 (cause: rank 0 exited with status 3)"));
  EXPECT_THAT(p.err, HasSubstr("failed: rank 0 exited with status 3; no restarts left (--max-restarts 2 used up)"));
  std::ifstream starts(tmp.path() + "/starts");
  std::string all((std::istreambuf_iterator<char>(starts)), std::istreambuf_iterator<char>());
  EXPECT_EQ(all, "x\nx\nx\n");  // the first start and two restarts
}

TEST(LauncherRestart, AFailureAtTheSameStepAgainIsNotRestarted) {
  // The worker writes its step where train does (MINIDL_STEP_DIR/step.RANK), then crashes.
  Subprocess p = run({"--nproc-per-node", "2", "--max-restarts", "5", "/bin/sh", "-c",
                      "echo \"7 $$\" > $MINIDL_STEP_DIR/step.$RANK; if [ $RANK = 1 ]; then exit 4; fi; sleep 30"});
  EXPECT_EQ(exit_code(p), 1);
  EXPECT_THAT(p.err, HasSubstr("restart 1/5 (cause: rank 1 exited with status 4 at step 7)"));
  EXPECT_THAT(p.err, HasSubstr("the previous failure was at the same step 7: a deterministic crash"));
  EXPECT_THAT(p.err, ::testing::Not(HasSubstr("restart 2/5")));
}

TEST(LauncherRestart, ABadUsageExitIsNotRestarted) {
  // train exits 2 for a bad flag or an --out that holds another run: a restart would only
  // repeat it (or, worse, skip the check that refused it).
  Subprocess p = run(
      {"--nproc-per-node", "2", "--max-restarts", "3", "/bin/sh", "-c", "if [ $RANK = 0 ]; then exit 2; fi; sleep 30"});
  EXPECT_EQ(exit_code(p), 2);  // passed on: the launcher's own bad-input status
  EXPECT_THAT(p.err, HasSubstr("failed: rank 0 exited with status 2; exit status 2 means a bad flag or input"));
  EXPECT_THAT(p.err, ::testing::Not(HasSubstr("restart 1/3")));
}

TEST(LauncherRestart, AStoppedWorkerIsNamedWhenTheOthersTimeOut) {
  // Rank 1 stops itself (as a hung worker would sit still); rank 0 "times out" and fails.
  Subprocess p =
      run({"--nproc-per-node", "2", "/bin/sh", "-c", "if [ $RANK = 1 ]; then kill -STOP $$; fi; sleep 0.5; exit 1"});
  EXPECT_EQ(exit_code(p), 1);
  EXPECT_THAT(p.err, HasSubstr("failed: rank 0 exited with status 1; rank 1 (pid "));
  EXPECT_THAT(p.err, HasSubstr(") was stopped (SIGSTOP?) and hung the others' collectives"));
}

TEST(LauncherRestart, TorchrunFlagsWork) {
  Subprocess standalone = run({"--standalone", "--nproc_per_node=2", "/bin/sh", "-c", "echo $WORLD_SIZE $MASTER_ADDR"});
  EXPECT_EQ(exit_code(standalone), 0) << standalone.err;
  EXPECT_THAT(standalone.out, HasSubstr("[rank 1] 2 127.0.0.1\n"));

  const std::string port = std::to_string(minidl::dist::find_free_port());
  Subprocess rdzv = run({"--rdzv-endpoint", "127.0.0.1:" + port, "--nnodes", "1:1", "--max_restarts=0", "/bin/sh", "-c",
                         "echo $MASTER_ADDR $MASTER_PORT"});
  EXPECT_EQ(exit_code(rdzv), 0) << rdzv.err;
  EXPECT_THAT(rdzv.out, HasSubstr("[rank 0] 127.0.0.1 " + port + "\n"));

  Subprocess elastic = run({"--nnodes", "4:1", "/bin/true"});
  EXPECT_EQ(exit_code(elastic), 2);
  EXPECT_THAT(elastic.err, HasSubstr("--nnodes 4:1: MIN 4 is above MAX 1"));
  for (std::vector<std::string> bad :
       std::vector<std::vector<std::string>>{{"--standalone", "--nnodes", "2", "/bin/true"},
                                             {"--standalone", "--master-port", port, "/bin/true"},
                                             {"--rdzv-endpoint", "nohostport", "/bin/true"},
                                             {"--max-restarts", "-1", "/bin/true"}}) {
    Subprocess p = run(bad);
    EXPECT_EQ(exit_code(p), 2) << bad[0] << " " << bad[1];
    EXPECT_THAT(p.err, HasSubstr("usage: minidl-run"));
  }

  Subprocess help = run({"--help"});
  EXPECT_EQ(exit_code(help), 0);
  for (const char* flag : {"--standalone", "--max-restarts", "--rdzv-endpoint", "--nnodes", "--nproc-per-node"})
    EXPECT_THAT(help.out, HasSubstr(flag));
}

namespace {

// Two launchers, nodes 0 and 1 of a 2x2 world, with --max-restarts 1, running `script`. Their
// TMPDIR is a directory of this test's, so what a launcher killed here leaves behind is removed.
std::pair<Subprocess, Subprocess> start_two_nodes(const std::string& script) {
  static const minidl::testing::TempDir tmp;
  const std::string port = std::to_string(minidl::dist::find_free_port());
  auto node = [&](const std::string& rank) {
    return start_process({launcher_path(), "--nproc-per-node", "2", "--nnodes", "2", "--node-rank", rank,
                          "--master-port", port, "--max-restarts", "1", "/bin/sh", "-c", script},
                         {{"TMPDIR", tmp.path()}});
  };
  Subprocess node0 = node("0");
  Subprocess node1 = node("1");
  return {node0, node1};
}

}  // namespace

TEST(LauncherRestart, TwoNodesRestartTogetherWhenAWorkerOfNodeOneFails) {
  auto [node0, node1] = start_two_nodes(
      "echo round $MINIDL_RESTART_COUNT rank $RANK of $WORLD_SIZE; "
      "if [ $MINIDL_RESTART_COUNT = 0 ]; then if [ $RANK = 3 ]; then sleep 0.3; kill -KILL $$; fi; sleep 30; fi");
  ASSERT_TRUE(wait_process(node0, 30s));
  ASSERT_TRUE(wait_process(node1, 30s));
  EXPECT_EQ(exit_code(node0), 0) << node0.err;
  EXPECT_EQ(exit_code(node1), 0) << node1.err;
  for (const Subprocess* p : {&node0, &node1})
    EXPECT_THAT(p->err, HasSubstr("restart 1/1 (cause: rank 3 (node 1) was killed by signal 9 (Killed))"));
  EXPECT_THAT(node0.err, HasSubstr("another node failed; stopping this node's workers"));
  EXPECT_THAT(node0.out, HasSubstr("[rank 0] round 1 rank 0 of 4\n"));
  EXPECT_THAT(node1.out, HasSubstr("[rank 3] round 1 rank 3 of 4\n"));
}

TEST(LauncherRestart, ALauncherThatIsGoneIsFoundByItsHeartbeat) {
  auto [node0, node1] = start_two_nodes("sleep 60");
  std::this_thread::sleep_for(3s);  // both joined, a few heartbeats have arrived
  const auto killed_at = std::chrono::steady_clock::now();
  ::kill(node1.pid, SIGKILL);  // node 1's launcher vanishes (its workers get SIGTERM)
  ASSERT_TRUE(wait_process(node0, 30s));
  const auto detected = std::chrono::steady_clock::now() - killed_at;
  EXPECT_EQ(exit_code(node0), 1);
  EXPECT_THAT(node0.err, HasSubstr("failed: node 1 lost (heartbeat stopped 5."));
  EXPECT_THAT(node0.err, HasSubstr(" s ago): 1 node left (node 0), fewer than the minimum 2 (--nnodes 2:2)"));
  EXPECT_LT(detected, 10s);  // 5 s timeout + 1 s heartbeat period + stopping node 0's workers
  wait_process(node1, 5s);
}
