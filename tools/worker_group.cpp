// tools/worker_group.cpp — minidl-run's supervisor loop. See worker_group.h.
//
// Each worker is fork()+execvp() of the command, in its own process group (so a signal to the
// group also reaches anything the worker started), with PR_SET_PDEATHSIG so it gets SIGTERM if
// the launcher dies without cleaning up. Its stdout and stderr are pipes read here by one poll()
// loop that also watches a self-pipe fed by the signal handlers (SIGCHLD, SIGINT, SIGTERM,
// SIGHUP): the launcher has a single thread and no work happens inside a signal handler.
// A run is a sequence of rounds (one group of workers each); with several nodes and restarts,
// the launchers agree on each round's members and end through a store (class Peers).
#include "tools/worker_group.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "minidl/dist/process.h"
#include "minidl/dist/socket.h"
#include "minidl/dist/step_record.h"
#include "tools/peers.h"
#include "tools/round_end.h"

namespace minidl::launcher {

namespace dist = minidl::dist;

namespace {

const int kHandledSignals[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};
int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  int saved = errno;
  unsigned char byte = static_cast<unsigned char>(sig);
  (void)!::write(g_signal_pipe[1], &byte, 1);
  errno = saved;
}

// Throws for a failed pipe2() (errno set): what the pipe was for, and why it failed; out of
// descriptors, with the limit and `ulimit -n`.
[[noreturn]] void throw_pipe_failed(const std::string& what_for) {
  const int err = errno;
  throw std::runtime_error(
      "cannot create " + what_for + ": " +
      (dist::is_out_of_descriptors(err) ? dist::out_of_descriptors_message(err) : std::string(std::strerror(err))));
}

void install_signal_handlers() {
  if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) throw_pipe_failed("the pipe for signals");
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  for (int sig : kHandledSignals) sigaction(sig, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the launcher (reset in workers)
}

void write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // stdout gone: drop the output, keep supervising
    }
    done += static_cast<size_t>(n);
  }
}

void say(const std::string& message) { write_all(STDERR_FILENO, "minidl-run: " + message + "\n"); }

// One worker's stdout or stderr: lines are re-emitted on ours, prefixed with "[rank R] ".
struct Stream {
  int fd = -1;
  int dest = STDOUT_FILENO;
  std::string prefix;
  std::string partial;  // bytes after the last newline
};

void pump(Stream& s) {
  char buf[65536];
  ssize_t n = ::read(s.fd, buf, sizeof(buf));
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n > 0) s.partial.append(buf, static_cast<size_t>(n));
  std::string out;
  size_t start = 0;
  for (size_t nl; (nl = s.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    out += s.prefix;
    out.append(s.partial, start, nl + 1 - start);
  }
  s.partial.erase(0, start);
  bool eof = n <= 0;
  if (!s.partial.empty() && (eof || s.partial.size() > 65536)) {  // an unterminated last line
    out += s.prefix + s.partial + "\n";
    s.partial.clear();
  }
  write_all(s.dest, out);
  if (eof) {
    ::close(s.fd);
    s.fd = -1;
  }
}

struct Worker {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  bool exited = false;
  int status = 0;
};

// Where this node's workers sit in one round: the round's number, MASTER_PORT, this node's rank
// among the round's nodes, and how many there are.
struct Placement {
  int round = 0;
  uint16_t port = 0;
  int group_rank = 0;
  int nnodes = 1;
};

[[noreturn]] void exec_worker(const LaunchConfig& c, const Placement& p, int local_rank, const std::string& step_dir,
                              int out_fd, int err_fd, pid_t launcher) {
  ::setpgid(0, 0);
  minidl::dist::die_with_parent(SIGTERM, launcher);
  ::signal(SIGPIPE, SIG_DFL);
  int null_fd = ::open("/dev/null", O_RDONLY);
  if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  auto set = [](const char* name, int value) { ::setenv(name, std::to_string(value).c_str(), 1); };
  set("RANK", p.group_rank * c.nproc_per_node + local_rank);
  set("WORLD_SIZE", p.nnodes * c.nproc_per_node);
  set("LOCAL_RANK", local_rank);
  set("LOCAL_WORLD_SIZE", c.nproc_per_node);
  set("GROUP_RANK", p.group_rank);
  set("MASTER_PORT", p.port);
  set("MINIDL_RESTART_COUNT", p.round);
  set("MINIDL_MAX_RESTARTS", c.max_restarts);
  ::setenv("MINIDL_STEP_DIR", step_dir.c_str(), 1);
  ::setenv("MASTER_ADDR", c.master_addr.c_str(), 1);
  std::vector<char*> argv;
  for (const auto& a : c.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  std::string msg = "minidl-run: cannot run '" + c.command[0] + "': " + std::strerror(errno) + "\n";
  (void)!::write(STDERR_FILENO, msg.data(), msg.size());
  _exit(127);
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "a signal";
  }
}

void signal_groups(const std::vector<Worker>& workers, int sig, bool include_exited) {
  for (const auto& w : workers) {
    if (!w.exited || include_exited) ::kill(-w.pid, sig);  // the worker's whole process group
  }
}

// Starts this node's workers of one round and supervises them until they have all ended.
// `round` and `peers` are null for a node on its own.
NodeEnd run_round(const LaunchConfig& c, const Placement& p, const std::string& step_dir, Peers* peers,
                  const Round* round) {
  pid_t launcher = ::getpid();
  std::vector<Worker> workers;
  std::vector<Stream> streams;
  for (int local = 0; local < c.nproc_per_node; ++local) {
    ::unlink((step_dir + "/step." + std::to_string(p.group_rank * c.nproc_per_node + local)).c_str());
  }
  for (int local = 0; local < c.nproc_per_node; ++local) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
      throw_pipe_failed("the pipes for local rank " + std::to_string(local) + "'s output");
    Worker w;
    w.local_rank = local;
    w.rank = p.group_rank * c.nproc_per_node + local;
    // Block our signals across fork(): a signal meant for the worker that arrived before exec
    // would otherwise run the launcher's handler in the child and be lost.
    sigset_t block, old;
    sigemptyset(&block);
    for (int sig : kHandledSignals) sigaddset(&block, sig);
    sigprocmask(SIG_BLOCK, &block, &old);
    w.pid = ::fork();
    if (w.pid == 0) {
      for (int sig : kHandledSignals) ::signal(sig, SIG_DFL);
      sigprocmask(SIG_SETMASK, &old, nullptr);  // pending signals now act with default dispositions
      exec_worker(c, p, local, step_dir, out[1], err[1], launcher);
    }
    sigprocmask(SIG_SETMASK, &old, nullptr);
    if (w.pid < 0) {
      const int e = errno;
      throw std::runtime_error(
          "cannot start local rank " + std::to_string(local) + ": fork failed: " + std::strerror(e) +
          (e == EAGAIN || e == ENOMEM ? " (the limit on processes and threads, `ulimit -u`, or memory)" : ""));
    }
    ::setpgid(w.pid, w.pid);  // also here, so it holds before we ever signal the group
    ::close(out[1]);
    ::close(err[1]);
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    std::string prefix = "[rank " + std::to_string(w.rank) + "] ";
    streams.push_back({out[0], STDOUT_FILENO, prefix, ""});
    streams.push_back({err[0], STDERR_FILENO, prefix, ""});
    workers.push_back(w);
  }

  NodeEnd end;
  bool stopping = false, killed = false;
  Clock::time_point kill_at, all_exited_at, stop_at;
  bool all_exited = false;
  std::optional<std::string> store_error;
  auto stop = [&]() {
    stopping = true;
    stop_at = Clock::now();
    kill_at = stop_at + c.kill_grace;
    signal_groups(workers, SIGTERM, false);
    signal_groups(workers, SIGCONT, false);  // a stopped worker acts on SIGTERM only once continued
  };

  while (true) {
    std::vector<pollfd> fds{{g_signal_pipe[0], POLLIN, 0}};
    for (auto& s : streams) {
      if (s.fd >= 0) fds.push_back({s.fd, POLLIN, 0});
    }
    ::poll(fds.data(), fds.size(), 50);

    // Signals that reached the launcher: forward to every worker, then stop.
    unsigned char sigs[64];
    ssize_t nsig = ::read(g_signal_pipe[0], sigs, sizeof(sigs));
    for (ssize_t i = 0; i < nsig; ++i) {
      int sig = sigs[i];
      if (sig == SIGCHLD) continue;
      if (!stopping) {
        say(std::string("received ") + signal_name(sig) + ", forwarding it to the workers");
        signal_groups(workers, sig, false);
        signal_groups(workers, SIGCONT, false);
        stopping = true;
        kill_at = Clock::now() + c.kill_grace;
        end = {.kind = EndKind::aborted,
               .cause = std::string("node ") + std::to_string(c.node_rank) + "'s launcher received " + signal_name(sig),
               .exit_code = 128 + sig};
        if (peers) {  // the other nodes stop too (and, without node 0, the run ends)
          try {
            peers->request_stop(round->index, end.cause);
          } catch (const std::exception&) {
            // node 0's store is gone already: nothing to tell
          }
        }
      } else if (sig == SIGINT && !killed) {  // a second Ctrl-C: no more patience
        signal_groups(workers, SIGKILL, true);
        killed = true;
      }
    }

    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      for (auto& s : streams) {
        if (s.fd == fds[i].fd) pump(s);
      }
    }

    for (auto& w : workers) {
      if (w.exited || ::waitpid(w.pid, &w.status, WNOHANG) != w.pid) continue;
      w.exited = true;
      if (minidl::dist::exited_ok(w.status)) continue;
      // The first failure, or one killed by a signal soon after a first plain exit: a worker
      // killed with -9 takes the others down with it, and they may be reaped first.
      const bool by_signal = WIFSIGNALED(w.status) && WTERMSIG(w.status) != SIGTERM;
      const bool primary = !stopping || (end.kind == EndKind::failed && !end.by_signal && by_signal &&
                                         Clock::now() - stop_at < std::chrono::milliseconds(500));
      if (!primary) continue;
      const int64_t step = dist::read_step(step_dir, w.rank);
      std::string cause = "rank " + std::to_string(w.rank) +
                          (c.nnodes > 1 ? " (node " + std::to_string(c.node_rank) + ")" : "") + " " +
                          minidl::dist::describe_exit(w.status) + (step >= 0 ? " at step " + std::to_string(step) : "");
      for (const auto& other : workers) {
        if (!other.exited && minidl::dist::is_stopped(other.pid))
          cause += "; rank " + std::to_string(other.rank) + " (pid " + std::to_string(other.pid) +
                   ") was stopped (SIGSTOP?) and hung the others' collectives";
      }
      if (!stopping) {
        say("rank " + std::to_string(w.rank) + " (local rank " + std::to_string(w.local_rank) + ", pid " +
            std::to_string(w.pid) + ") " + minidl::dist::describe_exit(w.status) +
            (step >= 0 ? " at step " + std::to_string(step) : "") + "; stopping the other workers");
        stop();
        if (peers) {
          try {
            peers->request_stop(round->index);
          } catch (const std::exception& e) {
            store_error = e.what();
          }
        }
      } else {
        say("rank " + std::to_string(w.rank) + " " + minidl::dist::describe_exit(w.status) +
            ": that is the cause of the failure");
      }
      end = {.kind = EndKind::failed,
             .step = step,
             .by_signal = by_signal,
             .usage = WIFEXITED(w.status) && WEXITSTATUS(w.status) == 2,
             .cause = cause};
    }

    if (peers && !stopping && !store_error) {
      try {
        if (peers->stop_requested(*round)) {
          say(peers->stop_cause() + "; stopping this node's workers");
          stop();
          end.kind = EndKind::stopped;
        }
      } catch (const std::exception& e) {
        store_error = e.what();
      }
      if (store_error) {
        say("lost the launchers' store on node 0 (" + c.master_addr + ":" + std::to_string(c.master_port) +
            "): " + *store_error +
            "; node 0 hosts the run's store, the run cannot go on without it: stopping this "
            "node's workers");
        if (!stopping) stop();
        end = {.kind = EndKind::aborted, .cause = "failed: lost the launchers' store on node 0: " + *store_error};
      }
    }

    if (stopping && !killed && Clock::now() >= kill_at) {
      signal_groups(workers, SIGKILL, true);
      killed = true;
    }
    bool done = std::all_of(workers.begin(), workers.end(), [](const Worker& w) { return w.exited; });
    if (done && !all_exited) {
      all_exited = true;
      all_exited_at = Clock::now();
      // Leave nothing behind: whatever a stopped worker started dies with its process group.
      if (stopping) signal_groups(workers, SIGKILL, true);
    }
    // Output still buffered in the pipes gets a moment after the last worker ends; a pipe held
    // open by a stray grandchild does not keep the launcher alive.
    bool streams_open = std::any_of(streams.begin(), streams.end(), [](const Stream& s) { return s.fd >= 0; });
    if (all_exited && (!streams_open || Clock::now() - all_exited_at > std::chrono::seconds(1))) break;
  }
  for (auto& s : streams) {
    if (s.fd < 0) continue;
    pump(s);  // non-blocking: what is there
    if (s.fd >= 0) {
      if (!s.partial.empty()) write_all(s.dest, s.prefix + s.partial + "\n");
      ::close(s.fd);
    }
  }
  if (store_error) throw std::runtime_error(end.cause.substr(std::string("failed: ").size()));
  return end;
}

// One node on its own (or several without restarts, each on its own): rounds decided here.
int run_alone(const LaunchConfig& c, const std::string& step_dir) {
  int64_t last_failure_step = -1;
  for (int round = 0;; ++round) {
    // a fresh store for each new group
    const uint16_t port = round == 0 ? c.master_port : dist::find_free_port(c.master_addr);
    const NodeEnd end = run_round(c, {round, port, c.node_rank, c.nnodes}, step_dir, nullptr, nullptr);
    const Verdict v = decide({end}, round, c.max_restarts, last_failure_step);
    if (v.kind == VerdictKind::restart) {
      say("restart " + std::to_string(round + 1) + "/" + std::to_string(c.max_restarts) + " (cause: " + v.message +
          "): starting a new group of " + std::to_string(c.nproc_per_node * c.nnodes) + " worker(s)");
      last_failure_step = v.step;
      continue;
    }
    if (v.kind == VerdictKind::done) return 0;
    say(v.message);
    return end.kind == EndKind::aborted ? end.exit_code : v.kind == VerdictKind::give_up_usage ? 2 : 1;
  }
}

// Several nodes with restarts or elastic sizes: node 0 forms each round and decides its end.
int run_together(const LaunchConfig& c, const std::string& step_dir) {
  Peers peers(c);
  for (int index = peers.first_round();;) {
    const std::optional<Round> round = peers.join(index);
    if (!round) {
      const int status = peers.over_status();
      say("the run ended (exit status " + std::to_string(status) + ") before node " + std::to_string(c.node_rank) +
          " was admitted");
      return status;
    }
    if (!round->message.empty()) say(round->message);
    const Placement p{round->index, round->port, round->group_rank, static_cast<int>(round->members.size())};
    const NodeEnd end = run_round(c, p, step_dir, &peers, &*round);
    const Verdict v = peers.settle(*round, end);
    if (v.kind == VerdictKind::restart) {
      index = round->index + 1;
      continue;
    }
    const int status = end.kind == EndKind::aborted           ? end.exit_code
                       : v.kind == VerdictKind::done          ? 0
                       : v.kind == VerdictKind::give_up_usage ? 2
                                                              : 1;
    peers.finish(*round, status);
    if (v.kind != VerdictKind::done) say(v.message);
    return status;
  }
}

}  // namespace

int run_workers(const LaunchConfig& c) {
  install_signal_handlers();
  const dist::StepDir step_dir;  // the workers' step files
  if (c.nnodes > 1 && (c.max_restarts > 0 || c.min_nodes < c.nnodes)) return run_together(c, step_dir.path());
  return run_alone(c, step_dir.path());
}

}  // namespace minidl::launcher
