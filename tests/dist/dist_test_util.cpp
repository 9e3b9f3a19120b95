// tests/dist/dist_test_util.cpp — see dist_test_util.h.
#include "tests/dist/dist_test_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace minidl::testing {

namespace {

const char* const kWorldVariables[] = {"RANK",
                                       "WORLD_SIZE",
                                       "LOCAL_RANK",
                                       "LOCAL_WORLD_SIZE",
                                       "GROUP_RANK",
                                       "MASTER_ADDR",
                                       "MASTER_PORT",
                                       "SLURM_PROCID",
                                       "SLURM_NTASKS",
                                       "SLURM_NPROCS",
                                       "SLURM_LOCALID",
                                       "SLURM_NODEID",
                                       "SLURM_NTASKS_PER_NODE",
                                       "SLURM_TASKS_PER_NODE",
                                       "OMPI_COMM_WORLD_RANK",
                                       "OMPI_COMM_WORLD_SIZE",
                                       "OMPI_COMM_WORLD_LOCAL_RANK",
                                       "OMPI_COMM_WORLD_LOCAL_SIZE"};

void read_some(int& fd, std::string& into) {
  char buf[65536];
  ssize_t n = ::read(fd, buf, sizeof(buf));
  if (n > 0) {
    into.append(buf, static_cast<size_t>(n));
  } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
    ::close(fd);
    fd = -1;
  }
}

}  // namespace

EnvGuard::EnvGuard() {
  for (const char* name : kWorldVariables) {
    const char* v = std::getenv(name);
    saved_[name] = v ? std::optional<std::string>(v) : std::nullopt;
    ::unsetenv(name);
  }
}

EnvGuard::~EnvGuard() {
  for (const auto& [name, value] : saved_) {
    if (value) {
      ::setenv(name.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }
}

void EnvGuard::set(const std::string& name, const std::string& value) {
  if (!saved_.count(name)) {
    const char* v = std::getenv(name.c_str());
    saved_[name] = v ? std::optional<std::string>(v) : std::nullopt;
  }
  ::setenv(name.c_str(), value.c_str(), 1);
}

Subprocess start_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    _exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  Subprocess p;
  p.pid = pid;
  p.out_fd = out[0];
  p.err_fd = err[0];
  return p;
}

bool wait_process(Subprocess& p, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!p.exited || p.out_fd >= 0 || p.err_fd >= 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      if (!p.exited) {
        ::kill(p.pid, SIGKILL);
        ::waitpid(p.pid, &p.status, 0);
        p.exited = true;
      }
      if (p.out_fd >= 0) ::close(p.out_fd);
      if (p.err_fd >= 0) ::close(p.err_fd);
      p.out_fd = p.err_fd = -1;
      return false;
    }
    std::vector<pollfd> fds;
    if (p.out_fd >= 0) fds.push_back({p.out_fd, POLLIN, 0});
    if (p.err_fd >= 0) fds.push_back({p.err_fd, POLLIN, 0});
    if (!fds.empty()) {
      ::poll(fds.data(), fds.size(), 20);
      for (auto& f : fds) {
        if (f.revents == 0) continue;
        if (f.fd == p.out_fd)
          read_some(p.out_fd, p.out);
        else if (f.fd == p.err_fd)
          read_some(p.err_fd, p.err);
      }
    } else {
      ::usleep(10000);
    }
    if (!p.exited && ::waitpid(p.pid, &p.status, WNOHANG) == p.pid) p.exited = true;
  }
  return true;
}

int exit_code(const Subprocess& p) {
  if (WIFEXITED(p.status)) return WEXITSTATUS(p.status);
  if (WIFSIGNALED(p.status)) return 128 + WTERMSIG(p.status);
  return -1;
}

bool process_alive(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_field, comm, state;
  if (!(stat >> pid_field >> comm >> state)) return false;  // gone in between
  return state != "Z";  // comm of our workers ("sh", "sleep") has no spaces
}

std::vector<pid_t> read_pid_files(const std::string& dir, const std::string& prefix) {
  std::vector<pid_t> pids;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return pids;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.rfind(prefix, 0) != 0) continue;
    std::ifstream in(dir + "/" + name);
    pid_t pid = 0;
    if (in >> pid && pid > 0) pids.push_back(pid);
  }
  ::closedir(d);
  return pids;
}

std::string launcher_path() { return std::string(MINIDL_BINARY_DIR) + "/tools/minidl-run"; }

std::string self_path() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw std::runtime_error("readlink /proc/self/exe failed");
  return std::string(buf, static_cast<size_t>(n));
}

TwoNodes run_two_launcher_nodes(const std::map<std::string, std::string>& env, std::chrono::milliseconds timeout) {
  const std::string port = std::to_string(dist::find_free_port());
  auto node = [&](const std::string& node_rank) {
    return start_process({launcher_path(), "--nproc-per-node", "2", "--nnodes", "2", "--node-rank", node_rank,
                          "--master-addr", "127.0.0.1", "--master-port", port, self_path()},
                         env);
  };
  TwoNodes t{node("0"), node("1")};
  const bool ok0 = wait_process(t.node0, timeout);
  const bool ok1 = wait_process(t.node1, timeout);
  t.wait_ok = ok0 && ok1;
  return t;
}

int64_t count_rendezvous(dist::TCPStore& store, int rank, int world_size) {
  if (store.add("count", 1) == world_size) store.set("all_arrived", "1");
  store.wait({"all_arrived"});
  int64_t seen = std::stoll(store.get("count"));
  if (store.add("done", 1) == world_size) store.set("all_done", "1");
  if (rank == 0) store.wait({"all_done"});  // keep the server up until everyone has finished
  return seen;
}

}  // namespace minidl::testing
