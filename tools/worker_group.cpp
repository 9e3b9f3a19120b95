// tools/worker_group.cpp — minidl-run's supervisor loop. See worker_group.h.
//
// Each worker is fork()+execvp() of the command, in its own process group (so a signal to the
// group also reaches anything the worker started), with PR_SET_PDEATHSIG so it gets SIGTERM if
// the launcher dies without cleaning up. Its stdout and stderr are pipes read here by one poll()
// loop that also watches a self-pipe fed by the signal handlers (SIGCHLD, SIGINT, SIGTERM,
// SIGHUP): the launcher has a single thread and no work happens inside a signal handler.
// A run is a sequence of rounds (one group of workers each); with several nodes and restarts,
// the launchers agree on each round's end through a store (class Peers).
#include "tools/worker_group.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <sstream>
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
#include "minidl/dist/store.h"

namespace minidl::launcher {

namespace dist = minidl::dist;

namespace {

using Clock = std::chrono::steady_clock;

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

[[noreturn]] void exec_worker(const LaunchConfig& c, int local_rank, uint16_t port, int round,
                              const std::string& step_dir, int out_fd, int err_fd, pid_t launcher) {
  ::setpgid(0, 0);
  minidl::dist::die_with_parent(SIGTERM, launcher);
  ::signal(SIGPIPE, SIG_DFL);
  int null_fd = ::open("/dev/null", O_RDONLY);
  if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  int world = c.nnodes * c.nproc_per_node;
  auto set = [](const char* name, int value) { ::setenv(name, std::to_string(value).c_str(), 1); };
  set("RANK", c.node_rank * c.nproc_per_node + local_rank);
  set("WORLD_SIZE", world);
  set("LOCAL_RANK", local_rank);
  set("LOCAL_WORLD_SIZE", c.nproc_per_node);
  set("GROUP_RANK", c.node_rank);
  set("MASTER_PORT", port);
  set("MINIDL_RESTART_COUNT", round);
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

// How this node's part of one round ended.
enum class EndKind : char {
  ok = 'o',  // every worker exited 0
  failed = 'f',  // a worker failed
  stopped = 's',  // stopped for another node's failure
  aborted = 'a',  // the launcher got a signal, or lost node 0
};
struct NodeEnd {
  EndKind kind = EndKind::ok;
  int64_t step = -1;  // the failed worker's step, when it wrote one
  bool by_signal = false;  // the failed worker was killed by a signal (a primary cause)
  bool usage = false;  // it exited with status 2: a bad flag or input, which a restart repeats
  std::string cause;
  int exit_code = 1;  // for aborted: what the launcher exits with

  // On the store: the kind's letter, the step, "1"/"0" for by_signal (+ "u" for usage), the cause.
  std::string encode() const {
    return std::string(1, static_cast<char>(kind)) + "\n" + std::to_string(step) + "\n" + (by_signal ? "1" : "0") +
           (usage ? "u" : "") + "\n" + cause;
  }
  static NodeEnd decode(const std::string& s) {
    NodeEnd e;
    std::istringstream in(s);
    std::string kind, step, sig;
    std::getline(in, kind);
    std::getline(in, step);
    std::getline(in, sig);
    std::getline(in, e.cause, '\0');
    e.kind = kind.empty() ? EndKind::failed : static_cast<EndKind>(kind[0]);
    e.step = step.empty() ? -1 : std::stoll(step);
    e.by_signal = !sig.empty() && sig[0] == '1';
    e.usage = sig.find('u') != std::string::npos;
    return e;
  }
};

// What happens after a round: done, a restart, or the end of the run.
enum class VerdictKind : char {
  done = 'd',
  restart = 'r',
  give_up = 'g',
  give_up_usage = 'u',  // give up on a bad flag or input (the launcher exits 2)
};
struct Verdict {
  VerdictKind kind = VerdictKind::done;
  std::string message;
  int64_t step = -1;
  // On the store: the kind's letter, the step, the message.
  std::string encode() const {
    return std::string(1, static_cast<char>(kind)) + "\n" + std::to_string(step) + "\n" + message;
  }
  static Verdict decode(const std::string& s) {
    Verdict v;
    std::istringstream in(s);
    std::string kind, step;
    std::getline(in, kind);
    std::getline(in, step);
    std::getline(in, v.message, '\0');
    v.kind = kind.empty() ? VerdictKind::give_up : static_cast<VerdictKind>(kind[0]);
    v.step = step.empty() ? -1 : std::stoll(step);
    return v;
  }
};

// One verdict from every node's end: the primary failure is a worker killed by a signal, else
// the first reported (the others' "connection broke" errors are its consequences).
Verdict decide(const std::vector<NodeEnd>& ends, int restarts_done, int max_restarts, int64_t last_failure_step) {
  const NodeEnd* primary = nullptr;
  for (const auto& e : ends) {
    if (e.kind == EndKind::aborted) return {VerdictKind::give_up, e.cause, e.step};
    if (e.kind == EndKind::failed && (primary == nullptr || (e.by_signal && !primary->by_signal))) primary = &e;
  }
  if (primary == nullptr) return {VerdictKind::done, "", -1};
  const std::string cause = primary->cause;
  if (primary->usage)  // passed on as the launcher's own exit status 2
    return {VerdictKind::give_up_usage,
            "failed: " + cause +
                (restarts_done < max_restarts
                     ? "; exit status 2 means a bad flag or input, which a restart would repeat: not restarting"
                     : ""),
            primary->step};
  if (restarts_done >= max_restarts) {
    std::string msg = "failed: " + cause;
    if (max_restarts > 0) msg += "; no restarts left (--max-restarts " + std::to_string(max_restarts) + " used up)";
    return {VerdictKind::give_up, msg, primary->step};
  }
  if (primary->step >= 0 && primary->step == last_failure_step)
    return {VerdictKind::give_up,
            "failed: " + cause + "; the previous failure was at the same step " + std::to_string(primary->step) +
                ": a deterministic crash that a restart would repeat, not restarting",
            primary->step};
  return {VerdictKind::restart, cause, primary->step};
}

// The launchers of a multi-node run, meeting in a TCPStore hosted by node 0's launcher on
// master_port. Keys: minidl-run/hb/<node>, minidl-run/<round>/{port,joined,stop,end/<node>,verdict},
// minidl-run/finished. Every call comes from the supervisor loop's one thread.
class Peers {
 public:
  explicit Peers(const LaunchConfig& c) : c_(c), last_hb_(static_cast<size_t>(c.nnodes)) {
    const bool loopback = c.master_addr == "127.0.0.1" || c.master_addr == "localhost";
    store_ = std::make_unique<dist::TCPStore>(
        c.master_addr, dist::TCPStoreOptions{.port = c.master_port,
                                             .is_server = c.node_rank == 0,
                                             .timeout = c.join_timeout,
                                             .bind_all_interfaces = c.node_rank == 0 && !loopback});
  }

  // Waits until every node has joined `round`; returns the round's MASTER_PORT.
  uint16_t join(int round) {
    if (c_.node_rank == 0) store_->set(key(round, "port"), std::to_string(dist::find_free_port(c_.master_addr)));
    store_->add(key(round, "joined"), 1);
    const auto deadline = Clock::now() + c_.join_timeout;
    while (store_->add(key(round, "joined"), 0) < c_.nnodes) {
      tick();
      if (lost_) throw std::runtime_error(*lost_);
      if (Clock::now() > deadline)
        throw std::runtime_error("not every node joined rendezvous round " + std::to_string(round) + " within " +
                                 std::to_string(c_.join_timeout.count() / 1000) + " s");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return static_cast<uint16_t>(std::stoi(store_->get(key(round, "port"))));
  }

  // Heartbeat, and on node 0 the check of everyone else's; throttled to heartbeat_interval.
  void tick() {
    const auto now = Clock::now();
    if (now < next_tick_) return;
    next_tick_ = now + std::min<std::chrono::milliseconds>(c_.heartbeat_interval, std::chrono::milliseconds(200));
    if (now >= next_beat_) {
      store_->set("minidl-run/hb/" + std::to_string(c_.node_rank), std::to_string(++beats_));
      next_beat_ = now + c_.heartbeat_interval;
    }
    if (c_.node_rank != 0 || lost_) return;
    for (int node = 1; node < c_.nnodes; ++node) {
      const std::string hb = "minidl-run/hb/" + std::to_string(node);
      if (!store_->check({hb})) continue;  // not started yet: the join timeout covers it
      const std::string value = store_->get(hb);
      Beat& b = last_hb_[static_cast<size_t>(node)];
      if (value != b.value) {
        b = {value, now};
      } else if (now - b.changed > c_.heartbeat_timeout) {
        lost_ = "node " + std::to_string(node) + "'s launcher is gone: no heartbeat for " +
                std::to_string(c_.heartbeat_timeout.count() / 1000) + " s (the node count is fixed: not restarting)";
      }
    }
  }

  // Whether another node asked this round's workers to stop (or, on node 0, a node was lost).
  bool stop_requested(int round) {
    tick();
    if (lost_) return true;
    return store_->check({key(round, "stop")});
  }
  void request_stop(int round) { store_->set(key(round, "stop"), "1"); }

  // Posts this node's end of the round and returns the common verdict (node 0 decides).
  Verdict settle(int round, const NodeEnd& mine, int restarts_done, int64_t last_failure_step) {
    store_->set(key(round, "end/" + std::to_string(c_.node_rank)), mine.encode());
    if (c_.node_rank != 0) {
      while (!store_->check({key(round, "verdict")})) {
        tick();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      return Verdict::decode(store_->get(key(round, "verdict")));
    }
    std::vector<NodeEnd> ends{mine};
    for (int node = 1; node < c_.nnodes; ++node) {
      const std::string k = key(round, "end/" + std::to_string(node));
      while (!store_->check({k}) && !lost_) {
        tick();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      ends.push_back(lost_ ? NodeEnd{.kind = EndKind::aborted, .cause = "failed: " + *lost_}
                           : NodeEnd::decode(store_->get(k)));
    }
    const Verdict v = decide(ends, restarts_done, c_.max_restarts, last_failure_step);
    store_->set(key(round, "verdict"), v.encode());
    return v;
  }

  // The end of the run: node 0 keeps the store up until every launcher has read the verdict.
  void finish() {
    store_->add("minidl-run/finished", 1);
    if (c_.node_rank != 0) return;
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (store_->add("minidl-run/finished", 0) < c_.nnodes && !lost_ && Clock::now() < deadline) {
      tick();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

 private:
  struct Beat {
    std::string value;
    Clock::time_point changed = Clock::now();
  };
  static std::string key(int round, const std::string& name) {
    return "minidl-run/" + std::to_string(round) + "/" + name;
  }

  const LaunchConfig& c_;
  std::unique_ptr<dist::TCPStore> store_;
  std::vector<Beat> last_hb_;
  Clock::time_point next_tick_{}, next_beat_{};
  int64_t beats_ = 0;
  std::optional<std::string> lost_;
};

// Starts this node's workers of one round and supervises them until they have all ended.
NodeEnd run_round(const LaunchConfig& c, int round, uint16_t port, const std::string& step_dir, Peers* peers) {
  pid_t launcher = ::getpid();
  std::vector<Worker> workers;
  std::vector<Stream> streams;
  for (int local = 0; local < c.nproc_per_node; ++local) {
    ::unlink((step_dir + "/step." + std::to_string(c.node_rank * c.nproc_per_node + local)).c_str());
  }
  for (int local = 0; local < c.nproc_per_node; ++local) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
      throw_pipe_failed("the pipes for local rank " + std::to_string(local) + "'s output");
    Worker w;
    w.local_rank = local;
    w.rank = c.node_rank * c.nproc_per_node + local;
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
      exec_worker(c, local, port, round, step_dir, out[1], err[1], launcher);
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
            peers->request_stop(round);
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
        if (peers->stop_requested(round)) {
          say("another node failed; stopping this node's workers");
          stop();
          end.kind = EndKind::stopped;
        }
      } catch (const std::exception& e) {
        store_error = e.what();
      }
      if (store_error) {
        say("lost the launchers' store on node 0 (" + c.master_addr + ":" + std::to_string(c.master_port) +
            "): " + *store_error + "; stopping this node's workers");
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

}  // namespace

int run_workers(const LaunchConfig& c) {
  install_signal_handlers();
  const dist::StepDir step_dir;  // the workers' step files
  std::unique_ptr<Peers> peers;
  if (c.nnodes > 1 && c.max_restarts > 0) peers = std::make_unique<Peers>(c);
  int64_t last_failure_step = -1;
  for (int round = 0;; ++round) {
    uint16_t port = c.master_port;
    if (peers)
      port = peers->join(round);
    else if (round > 0)
      port = dist::find_free_port(c.master_addr);  // a fresh store for the new group
    const NodeEnd end = run_round(c, round, port, step_dir.path(), peers.get());
    const Verdict v = peers ? peers->settle(round, end, round, last_failure_step)
                            : decide({end}, round, c.max_restarts, last_failure_step);
    if (v.kind == VerdictKind::restart) {
      say("restart " + std::to_string(round + 1) + "/" + std::to_string(c.max_restarts) + " (cause: " + v.message +
          "): starting a new group of " + std::to_string(c.nproc_per_node * c.nnodes) + " worker(s)");
      last_failure_step = v.step;
      continue;
    }
    if (peers) peers->finish();
    if (v.kind == VerdictKind::done) return 0;
    say(v.message);
    return end.kind == EndKind::aborted ? end.exit_code : v.kind == VerdictKind::give_up_usage ? 2 : 1;
  }
}

}  // namespace minidl::launcher
