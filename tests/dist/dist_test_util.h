// tests/dist/dist_test_util.h — helpers for the dist tests: environment save/restore, running a
// program with a deadline while capturing its output, process liveness, and the "count to
// world size" rendezvous that the spawn and launcher tests use as their stand-in for a
// collective.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "minidl/dist/store.h"
#include "tests/common/temp_dir.h"

namespace minidl::testing {

// Saves the listed variables, unsets them all, and restores the saved values on destruction.
class EnvGuard {
 public:
  EnvGuard();  // guards every variable dist::world_info_from_env() reads
  ~EnvGuard();
  void set(const std::string& name, const std::string& value);

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

// A child process running a program, its stdout and stderr captured through pipes.
struct Subprocess {
  pid_t pid = -1;
  int out_fd = -1, err_fd = -1;
  std::string out, err;
  bool exited = false;
  int status = 0;  // waitpid status once exited
};

// fork + execv(argv[0]) with extra environment variables. Throws on failure to fork.
Subprocess start_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {});
// Collects output until the process has exited and closed its pipes, or the timeout passes;
// on timeout it is killed with SIGKILL (and reaped) and false is returned.
bool wait_process(Subprocess& p, std::chrono::milliseconds timeout);
// Exit code of an exited process, or 128 + signal.
int exit_code(const Subprocess& p);

// Whether a process with this pid is running (a zombie, already dead but not yet reaped by
// whoever inherited it, does not count).
bool process_alive(pid_t pid);
// Pids written as files "<prefix><rank>" (contents: a pid) in dir.
std::vector<pid_t> read_pid_files(const std::string& dir, const std::string& prefix = "pid.");


// Path of the minidl-run binary in the build tree, and of this test executable.
std::string launcher_path();
std::string self_path();

// Two `minidl-run --nproc-per-node 2 --nnodes 2` invocations (node ranks 0 and 1) on 127.0.0.1
// and a free port, each running this test binary with `env`; waits for both (at most `timeout`
// each) and returns them, node 0 first. wait_ok tells whether both ended in time.
struct TwoNodes {
  Subprocess node0, node1;
  bool wait_ok = false;
};
TwoNodes run_two_launcher_nodes(const std::map<std::string, std::string>& env, std::chrono::milliseconds timeout);

// Every rank adds 1 to "count", then waits until world_size ranks have arrived; rank 0 (the
// server's host) then waits until every rank is done with the store. Returns the count seen (world).
int64_t count_rendezvous(dist::TCPStore& store, int rank, int world_size);

}  // namespace minidl::testing
