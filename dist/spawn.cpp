// dist/spawn.cpp — spawn(): fork nprocs children, collect their results or errors through one
// pipe each, stop everyone when one fails. See spawn.h.
//
// Pipe protocol, child to parent: one tag byte, then bytes until the pipe closes.
//   'R' result   fn returned; the rest is its result
//   'E' message  fn threw; the rest is the exception's message (the child then exits 1)
#include "minidl/dist/spawn.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <new>
#include <stdexcept>
#include <system_error>

#include "minidl/dist/process.h"
#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/cuda_api.h"
#include "minidl/dist/socket.h"
#include "minidl/dist/store.h"

namespace minidl::dist {

namespace {

struct Child {
  pid_t pid = -1;
  int fd = -1;  // read end of the child's pipe; -1 once closed
  std::string data;  // everything read from it
  bool exited = false;
  int status = 0;
  Clock::time_point exited_at;
};

void write_all_fd(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // the parent is gone; nothing to report to
    }
    done += static_cast<size_t>(n);
  }
}

// What a child reports for an exception that left fn. Two kinds say little by themselves:
// std::thread throws std::system_error with EAGAIN ("Resource temporarily unavailable") when no
// thread can be started, and a bare std::bad_alloc says "std::bad_alloc"; those get named. So
// does the cause of CUDA's bare "initialization error" in a child whose parent had started CUDA.
std::string describe_exception(const std::exception& e) {
  const std::string what = e.what();
  if (const auto* se = dynamic_cast<const std::system_error*>(&e);
      se != nullptr && se->code() == std::errc::resource_unavailable_try_again) {
    return "cannot start a thread: " + what + " (the limit on processes and threads, `ulimit -u`, or memory)";
  }
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr && what == std::bad_alloc().what())
    return "out of memory: an allocation failed (" + what + "; see free memory and `ulimit -v`)";
  if (kernels::cuda::initialized_before_fork())
    return what +
           " (the parent process had started CUDA before spawn, and a forked child cannot use it: make no CUDA "
           "call before spawn — not even a device count — or start the ranks with minidl-run)";
  return what;
}

// The child side: set the environment, run fn, report through the pipe, _exit.
[[noreturn]] void run_child(int rank, int nprocs, const std::function<std::string(int)>& fn,
                            const SpawnOptions& options, uint16_t port, const std::string& token, int write_fd,
                            pid_t parent) {
  die_with_parent(SIGTERM, parent);
  // Through the kernels' own knob, not omp_set_num_threads alone: the kernels' lazily chosen
  // default (cores / LOCAL_WORLD_SIZE) would otherwise replace it on first use.
  kernels::cpu::set_num_threads(std::max(1, options.omp_threads));
  auto set = [](const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); };
  set("RANK", std::to_string(rank));
  set("WORLD_SIZE", std::to_string(nprocs));
  set("LOCAL_RANK", std::to_string(rank));
  set("LOCAL_WORLD_SIZE", std::to_string(nprocs));
  set("GROUP_RANK", "0");
  set("MASTER_ADDR", options.master_addr);
  set("MASTER_PORT", std::to_string(port));
  set("MINIDL_STORE_TOKEN", token);
  std::string report;
  int code = 0;
  try {
    report = "R" + fn(rank);
  } catch (const std::exception& e) {
    report = "E" + describe_exception(e);
    code = 1;
  } catch (...) {
    report = "Eunknown exception (not derived from std::exception)";
    code = 1;
  }
  write_all_fd(write_fd, report);
  ::close(write_fd);
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  _exit(code);
}

// Reads what is available on the child's pipe; closes it at end of stream.
void drain(Child& c) {
  char buf[65536];
  while (c.fd >= 0) {
    ssize_t n = ::read(c.fd, buf, sizeof(buf));
    if (n > 0) {
      c.data.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      ::close(c.fd);
      c.fd = -1;
    } else if (errno != EINTR) {
      if (errno != EAGAIN) {
        ::close(c.fd);
        c.fd = -1;
      }
      return;
    }
  }
}

void signal_all(std::vector<Child>& children, int sig) {
  for (auto& c : children) {
    if (!c.exited) {
      ::kill(c.pid, sig);
      if (sig == SIGTERM) ::kill(c.pid, SIGCONT);  // a stopped child acts on SIGTERM once continued
    }
  }
}

std::string failure_message(int rank, const Child& c, const std::string& stopped) {
  std::string how = (!c.data.empty() && c.data[0] == 'E') ? c.data.substr(1) : describe_exit(c.status);
  return "spawn: rank " + std::to_string(rank) + " failed: " + how + stopped;
}

bool killed_by_signal(const Child& c) { return WIFSIGNALED(c.status) && WTERMSIG(c.status) != SIGTERM; }

// Waits for every child; on the first failure stops the others. Returns the index of the failed
// child (see spawn.h for which), or -1; `stopped` gets a note on children found stopped.
int supervise(std::vector<Child>& children, std::chrono::milliseconds kill_grace, std::string* stopped = nullptr) {
  int failed = -1;
  Clock::time_point failed_at;
  bool stopping = false;
  bool killed = false;
  Clock::time_point kill_at;
  const auto eof_grace = std::chrono::seconds(1);  // a grandchild may still hold a pipe open
  while (true) {
    std::vector<pollfd> fds;
    std::vector<Child*> owners;
    for (auto& c : children) {
      if (c.fd >= 0) {
        fds.push_back({c.fd, POLLIN, 0});
        owners.push_back(&c);
      }
    }
    if (!fds.empty()) ::poll(fds.data(), fds.size(), 20);
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents != 0) drain(*owners[i]);
    }
    bool all_done = true;
    for (size_t i = 0; i < children.size(); ++i) {
      Child& c = children[i];
      if (!c.exited && ::waitpid(c.pid, &c.status, WNOHANG) == c.pid) {
        c.exited = true;
        c.exited_at = Clock::now();
        drain(c);  // what it wrote before exiting is in the pipe now
        if (!exited_ok(c.status) && !stopping) {
          failed = static_cast<int>(i);
          failed_at = Clock::now();
          stopping = true;
          kill_at = Clock::now() + kill_grace;
          for (size_t j = 0; j < children.size() && stopped; ++j) {
            if (!children[j].exited && is_stopped(children[j].pid))
              *stopped += "; rank " + std::to_string(j) + " (pid " + std::to_string(children[j].pid) +
                          ") was stopped (SIGSTOP?) and hung the others' collectives";
          }
          signal_all(children, SIGTERM);
        } else if (stopping && failed >= 0 && killed_by_signal(c) && !killed_by_signal(children[failed]) &&
                   Clock::now() - failed_at < std::chrono::milliseconds(500)) {
          failed = static_cast<int>(i);  // the cause; the first one failed because of it
        }
      }
      if (c.exited && c.fd >= 0 && Clock::now() - c.exited_at > eof_grace) {
        ::close(c.fd);
        c.fd = -1;
      }
      all_done = all_done && c.exited && c.fd < 0;
    }
    if (all_done) return failed;
    if (stopping && !killed && Clock::now() >= kill_at) {
      signal_all(children, SIGKILL);
      killed = true;
    }
  }
}

// Whether rank 0 failed because its store could not listen on `port` of `addr`: another process
// bound the port between find_free_port's probe and the store's listen.
bool lost_the_port(const SpawnError& e, const std::string& addr, uint16_t port) {
  const std::string what = e.what();
  return e.rank == 0 &&
         what.find("cannot listen on " + addr + ":" + std::to_string(port) + ": ") != std::string::npos &&
         what.find(std::strerror(EADDRINUSE)) != std::string::npos;
}

// One world of nprocs children whose rank 0 serves the store on `port`.
std::vector<std::string> spawn_world(int nprocs, const std::function<std::string(int rank)>& fn,
                                     const SpawnOptions& options, uint16_t port) {
  // The world's store admits only its own ranks: one token for all children (the caller's, if set).
  const std::string token = store_token_from_env().empty() ? generate_store_token() : store_token_from_env();
  pid_t parent = ::getpid();
  std::cout.flush();  // or the children would print the parent's buffered output again
  std::cerr.flush();
  std::fflush(nullptr);

  std::vector<Child> children(static_cast<size_t>(nprocs));
  for (int rank = 0; rank < nprocs; ++rank) {
    int fds[2];
    pid_t pid = -1;
    if (::pipe2(fds, O_CLOEXEC) == 0) {
      pid = ::fork();
      if (pid < 0) {
        ::close(fds[0]);
        ::close(fds[1]);
      }
    }
    if (pid < 0) {
      int err = errno;
      children.resize(static_cast<size_t>(rank));
      signal_all(children, SIGKILL);
      supervise(children, std::chrono::milliseconds(0));
      const std::string hint =
          err == EAGAIN || err == ENOMEM ? " (the limit on processes and threads, `ulimit -u`, or memory)" : "";
      throw std::runtime_error("spawn: cannot start rank " + std::to_string(rank) + ": " + std::strerror(err) + hint);
    }
    if (pid == 0) {
      ::close(fds[0]);
      for (int r = 0; r < rank; ++r) ::close(children[r].fd);  // the siblings' pipes are not ours
      run_child(rank, nprocs, fn, options, port, token, fds[1], parent);
    }
    ::close(fds[1]);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    children[rank].pid = pid;
    children[rank].fd = fds[0];
  }

  std::string stopped;
  int failed = supervise(children, options.kill_grace, &stopped);
  if (failed >= 0)
    throw SpawnError(failure_message(failed, children[failed], stopped), failed, children[failed].status);
  std::vector<std::string> results;
  for (auto& c : children) results.push_back(c.data.empty() ? std::string() : c.data.substr(1));
  return results;
}

}  // namespace

std::vector<std::string> spawn_with_results(int nprocs, const std::function<std::string(int rank)>& fn,
                                            const SpawnOptions& options) {
  if (nprocs < 1) throw std::runtime_error("spawn: nprocs must be at least 1, got " + std::to_string(nprocs));
  if (options.master_port != 0) return spawn_world(nprocs, fn, options, options.master_port);
  constexpr int kPortAttempts = 3;
  for (int attempt = 1;; ++attempt) {
    const uint16_t port = find_free_port(options.master_addr);
    try {
      return spawn_world(nprocs, fn, options, port);
    } catch (const SpawnError& e) {
      if (attempt == kPortAttempts || !lost_the_port(e, options.master_addr, port)) throw;
    }
  }
}

void spawn(int nprocs, const std::function<void(int rank)>& fn, const SpawnOptions& options) {
  spawn_with_results(
      nprocs,
      [&](int rank) {
        fn(rank);
        return std::string();
      },
      options);
}

}  // namespace minidl::dist
