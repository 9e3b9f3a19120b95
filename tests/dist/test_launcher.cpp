// tests/dist/test_launcher.cpp — minidl-run: the environment it gives workers, prefixed output,
// a failing worker stops the rest, SIGTERM reaches every worker, no process is left behind, bad
// flags, running out of file descriptors, and two launchers (--nnodes 2) forming one world of 4
// on 127.0.0.1.
// Simple workers are /bin/sh scripts; the store worker is this test binary itself
// (MINIDL_TEST_WORKER, see worker_entry.cpp).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <thread>

#include "minidl/dist/socket.h"
#include "tests/common/testing.h"
#include "tests/dist/dist_test_util.h"

using namespace std::chrono_literals;
using minidl::testing::exit_code;
using minidl::testing::launcher_path;
using minidl::testing::process_alive;
using minidl::testing::read_pid_files;
using minidl::testing::start_process;
using minidl::testing::Subprocess;
using minidl::testing::wait_process;
using ::testing::HasSubstr;

namespace {

// A shell worker that records its pid as DIR/pid.$RANK and waits until n workers have done so.
std::string record_pid_and_wait(const std::string& dir, int n) {
  return "echo $$ > " + dir + "/pid.$RANK; while [ $(ls " + dir + " | grep -c '^pid') -lt " + std::to_string(n) +
         " ]; do sleep 0.02; done; ";
}

class Launcher : public ::testing::Test {
 protected:
  void SetUp() override {
    struct stat st {};
    ASSERT_EQ(::stat(launcher_path().c_str(), &st), 0) << launcher_path() << " is missing: build the minidl-run target";
  }

  // minidl-run ARGS..., run to completion (at most 10 s).
  Subprocess run(const std::vector<std::string>& args, const std::map<std::string, std::string>& env = {}) {
    std::vector<std::string> argv{launcher_path()};
    argv.insert(argv.end(), args.begin(), args.end());
    Subprocess p = start_process(argv, env);
    EXPECT_TRUE(wait_process(p, 10s)) << "minidl-run did not finish within 10 s";
    return p;
  }

  static void expect_all_gone(const std::vector<pid_t>& pids) {
    for (pid_t pid : pids) EXPECT_FALSE(process_alive(pid)) << "worker pid " << pid << " is still alive";
  }

  // minidl-run with 2 shell workers that run `prologue`, record their pids in dir and wait for
  // each other, then run `rest`; returns (p: the launcher, pids: the workers') once both pids are
  // recorded (at most 5 s).
  static void start_two_workers(const std::string& dir, const std::string& prologue, const std::string& rest,
                                Subprocess& p, std::vector<pid_t>& pids) {
    p = start_process(  // TMPDIR: what a launcher killed by a test leaves behind goes with dir
        {launcher_path(), "--nproc-per-node", "2", "/bin/sh", "-c", prologue + record_pid_and_wait(dir, 2) + rest},
        {{"TMPDIR", dir}});
    for (int i = 0; i < 250 && read_pid_files(dir).size() < 2; ++i) std::this_thread::sleep_for(20ms);
    pids = read_pid_files(dir);
    ASSERT_EQ(pids.size(), 2u);
  }

  // Two workers as above that then sleep 30 s; sends the launcher `sig` and waits (at most 10 s)
  // for it to end.
  static void signal_two_sleeping_workers(const std::string& dir, int sig, Subprocess& p, std::vector<pid_t>& pids) {
    ASSERT_NO_FATAL_FAILURE(start_two_workers(dir, "", "exec sleep 30", p, pids));
    ::kill(p.pid, sig);
    ASSERT_TRUE(wait_process(p, 10s));
  }
};

// Waits (at most 5 s) until none of pids is running.
bool all_gone_within_5s(const std::vector<pid_t>& pids) {
  for (int i = 0; i < 250; ++i) {
    if (std::none_of(pids.begin(), pids.end(), process_alive)) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

}  // namespace

TEST_F(Launcher, GivesEachWorkerItsPlaceInTheWorld) {
  uint16_t port = minidl::dist::find_free_port();
  Subprocess p = run({"--nproc-per-node", "2", "--nnodes", "3", "--node-rank", "1", "--master-port",
                      std::to_string(port), "/bin/sh", "-c",
                      "echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT"});
  EXPECT_EQ(exit_code(p), 0) << p.err;
  std::string tail = " 6 0 2 1 127.0.0.1 " + std::to_string(port) + "\n";
  EXPECT_THAT(p.out, HasSubstr("[rank 2] 2" + tail));
  tail = " 6 1 2 1 127.0.0.1 " + std::to_string(port) + "\n";
  EXPECT_THAT(p.out, HasSubstr("[rank 3] 3" + tail));
}

TEST_F(Launcher, PrefixesEveryOutputLineWithTheRank) {
  Subprocess p = run({"--nproc-per-node=2", "/bin/sh", "-c",
                      "echo one $RANK; echo two $RANK; echo oops $RANK >&2; printf 'no newline'"});
  EXPECT_EQ(exit_code(p), 0) << p.err;
  for (std::string r : {"0", "1"}) {
    EXPECT_THAT(p.out, HasSubstr("[rank " + r + "] one " + r + "\n"));
    EXPECT_THAT(p.out, HasSubstr("[rank " + r + "] two " + r + "\n"));
    EXPECT_THAT(p.out, HasSubstr("[rank " + r + "] no newline\n"));
    EXPECT_THAT(p.err, HasSubstr("[rank " + r + "] oops " + r + "\n"));
  }
  EXPECT_THAT(p.out, ::testing::Not(HasSubstr("oops")));
}

TEST_F(Launcher, AFailingWorkerStopsTheOthersAndIsNamed) {
  minidl::testing::TempDir tmp;
  const std::string& dir = tmp.path();
  auto start = std::chrono::steady_clock::now();
  // Every worker also leaves a background grandchild; it must not survive either.
  Subprocess p = run({"--nproc-per-node", "3", "/bin/sh", "-c",
                      "sleep 30 & echo $! > " + dir + "/grandchild.$RANK; " + record_pid_and_wait(dir, 3) +
                          "if [ $RANK = 1 ]; then exit 1; fi; exec sleep 30"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_EQ(exit_code(p), 1);
  EXPECT_THAT(p.err, HasSubstr("rank 1 (local rank 1, pid "));
  EXPECT_THAT(p.err, HasSubstr("failed: rank 1 exited with status 1"));
  auto pids = read_pid_files(dir);
  EXPECT_EQ(pids.size(), 3u);
  expect_all_gone(pids);
  auto grandchildren = read_pid_files(dir, "grandchild.");
  EXPECT_EQ(grandchildren.size(), 3u);
  EXPECT_TRUE(all_gone_within_5s(grandchildren));  // orphaned zombies are reaped by init
}

TEST_F(Launcher, AWorkerKilledByASignalIsNamed) {
  Subprocess p =
      run({"--nproc-per-node", "2", "/bin/sh", "-c", "if [ $RANK = 0 ]; then kill -KILL $$; fi; exec sleep 30"});
  EXPECT_EQ(exit_code(p), 1);
  EXPECT_THAT(p.err, HasSubstr("failed: rank 0 was killed by signal 9"));
}

TEST_F(Launcher, SigtermEndsAllWorkers) {
  minidl::testing::TempDir tmp;
  Subprocess p;
  std::vector<pid_t> pids;
  ASSERT_NO_FATAL_FAILURE(signal_two_sleeping_workers(tmp.path(), SIGTERM, p, pids));
  EXPECT_EQ(exit_code(p), 128 + SIGTERM);
  EXPECT_THAT(p.err, HasSubstr("received SIGTERM, forwarding it to the workers"));
  expect_all_gone(pids);
}

TEST_F(Launcher, SigintIsForwardedToo) {
  minidl::testing::TempDir tmp;
  Subprocess p;
  std::vector<pid_t> pids;
  ASSERT_NO_FATAL_FAILURE(signal_two_sleeping_workers(tmp.path(), SIGINT, p, pids));
  EXPECT_EQ(exit_code(p), 128 + SIGINT);
  expect_all_gone(pids);
}

TEST_F(Launcher, WorkersDieWithAKilledLauncher) {
  minidl::testing::TempDir tmp;
  Subprocess p;
  std::vector<pid_t> pids;
  // no chance to clean up: PR_SET_PDEATHSIG sends the workers SIGTERM
  ASSERT_NO_FATAL_FAILURE(signal_two_sleeping_workers(tmp.path(), SIGKILL, p, pids));
  EXPECT_TRUE(all_gone_within_5s(pids));
}

TEST_F(Launcher, AWorkerIgnoringSigtermIsKilledAfterTheGracePeriod) {
  minidl::testing::TempDir tmp;
  Subprocess p;
  std::vector<pid_t> pids;
  // sh ignores TERM and so does the sleep it starts; only SIGKILL ends them.
  ASSERT_NO_FATAL_FAILURE(start_two_workers(tmp.path(), "trap '' TERM; ", "sleep 30", p, pids));
  auto start = std::chrono::steady_clock::now();
  ::kill(p.pid, SIGTERM);
  ASSERT_TRUE(wait_process(p, 10s));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 8s);
  EXPECT_EQ(exit_code(p), 128 + SIGTERM);
  expect_all_gone(pids);
}

TEST_F(Launcher, AProgramThatCannotStartIsAFailure) {
  Subprocess p = run({"--nproc-per-node", "1", "/nonexistent/program"});
  EXPECT_EQ(exit_code(p), 1);
  EXPECT_THAT(p.err, HasSubstr("cannot run '/nonexistent/program'"));
  EXPECT_THAT(p.err, HasSubstr("failed: rank 0 exited with status 127"));
}

TEST_F(Launcher, OutOfDescriptorsItSaysSoWithTheLimit) {
  minidl::testing::TempDir tmp;  // the launcher's TMPDIR: it must leave nothing there
  Subprocess p = start_process(
      {"/bin/sh", "-c", "ulimit -n 8 && exec " + launcher_path() + " --nproc-per-node 2 /bin/true"},
      {{"TMPDIR", tmp.path()}});
  ASSERT_TRUE(wait_process(p, 10s));
  EXPECT_TRUE(std::filesystem::is_empty(tmp.path())) << "the launcher left its step directory in " << tmp.path();
  EXPECT_NE(exit_code(p), 0);
  EXPECT_THAT(p.err, HasSubstr("minidl-run: cannot create the pipe"));
  EXPECT_THAT(p.err, HasSubstr(": this process is out of file descriptors (Too many open files; its limit is 8 open "
                               "files: raise it with `ulimit -n`)"));
}

TEST_F(Launcher, BadFlagsPrintUsageAndExit2) {
  for (std::vector<std::string> args :
       std::vector<std::vector<std::string>>{{"--nproc-per-node", "two", "/bin/true"},
                                             {"--nproc-per-node", "0", "/bin/true"},
                                             {"--nnodes", "2", "--node-rank", "2", "/bin/true"},
                                             {"--master-port", "70000", "/bin/true"},
                                             {"--frobnicate", "/bin/true"},
                                             {"--nproc-per-node", "2"},
                                             {"--nproc-per-node"}}) {
    Subprocess p = run(args);
    EXPECT_EQ(exit_code(p), 2) << args[0];
    EXPECT_THAT(p.err, HasSubstr("usage: minidl-run")) << args[0];
  }
}

TEST_F(Launcher, TwoNodesOnOneMachineFormAWorldOfFour) {
  auto [node0, node1, ended] = minidl::testing::run_two_launcher_nodes({{"MINIDL_TEST_WORKER", "count"}}, 10s);
  ASSERT_TRUE(ended);
  EXPECT_EQ(exit_code(node0), 0) << node0.err;
  EXPECT_EQ(exit_code(node1), 0) << node1.err;
  EXPECT_THAT(node0.out, HasSubstr("[rank 0] rank 0/4 local 0 group 0 count 4\n"));
  EXPECT_THAT(node0.out, HasSubstr("[rank 1] rank 1/4 local 1 group 0 count 4\n"));
  EXPECT_THAT(node1.out, HasSubstr("[rank 2] rank 2/4 local 0 group 1 count 4\n"));
  EXPECT_THAT(node1.out, HasSubstr("[rank 3] rank 3/4 local 1 group 1 count 4\n"));
}
