// tools/worker_group.cpp — minidl-run's supervisor loop. See worker_group.h.
//
// Each worker is fork()+execvp() of the command, in its own process group (so a signal to the
// group also reaches anything the worker started), with PR_SET_PDEATHSIG so it gets SIGTERM if
// the launcher dies without cleaning up. Its stdout and stderr are pipes read here by one poll()
// loop that also watches a self-pipe fed by the signal handlers (SIGCHLD, SIGINT, SIGTERM,
// SIGHUP): the launcher has a single thread and no work happens inside a signal handler.
#include "tools/worker_group.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "dist/process.h"

namespace minidl::launcher {

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

void install_signal_handlers() {
  if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) throw std::runtime_error("pipe failed");
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

[[noreturn]] void exec_worker(const LaunchConfig& c, int local_rank, int out_fd, int err_fd, pid_t launcher) {
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
  set("MASTER_PORT", c.master_port);
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
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

void signal_groups(const std::vector<Worker>& workers, int sig, bool include_exited) {
  for (const auto& w : workers) {
    if (!w.exited || include_exited) ::kill(-w.pid, sig);  // the worker's whole process group
  }
}

}  // namespace

int run_workers(const LaunchConfig& c) {
  install_signal_handlers();
  pid_t launcher = ::getpid();
  std::vector<Worker> workers;
  std::vector<Stream> streams;
  for (int local = 0; local < c.nproc_per_node; ++local) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
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
      exec_worker(c, local, out[1], err[1], launcher);
    }
    sigprocmask(SIG_SETMASK, &old, nullptr);
    if (w.pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
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

  int exit_code = 0;
  int first_failed = -1;  // index into workers
  bool stopping = false, killed = false;
  Clock::time_point kill_at, all_exited_at;
  bool all_exited = false;
  auto stop = [&](int code) {
    stopping = true;
    exit_code = code;
    kill_at = Clock::now() + c.kill_grace;
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
        stop(128 + sig);
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
      if (!minidl::dist::exited_ok(w.status) && !stopping) {
        say("rank " + std::to_string(w.rank) + " (local rank " + std::to_string(w.local_rank) + ", pid " +
            std::to_string(w.pid) + ") " + minidl::dist::describe_exit(w.status) + "; stopping the other workers");
        first_failed = static_cast<int>(&w - workers.data());
        signal_groups(workers, SIGTERM, false);
        stop(1);
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

  if (first_failed >= 0) {
    const Worker& w = workers[first_failed];
    say("failed: rank " + std::to_string(w.rank) + " " + minidl::dist::describe_exit(w.status));
  }
  return exit_code;
}

}  // namespace minidl::launcher
