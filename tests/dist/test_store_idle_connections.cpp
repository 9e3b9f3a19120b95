// tests/dist/test_store_idle_connections.cpp — the TCPStore's server under a crowd of idle
// connections (clients that connect and never send their hello) in a process with a low file
// descriptor limit: real clients are still served, no thread is started per idle client, idle
// ones are closed after the hello deadline, stderr stays a few lines long, and a real 2-rank
// world runs its collectives to a clean exit. The crowd is a few hundred connections to
// 127.0.0.1, held for a few seconds; the limits are lowered in forked children only.
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <thread>

#include "minidl/dist/distributed.h"
#include "minidl/dist/process.h"
#include "minidl/dist/socket.h"
#include "minidl/dist/spawn.h"
#include "minidl/dist/store.h"
#include "minidl/dist/store_server.h"
#include "minidl/tensor/creation.h"
#include "tests/common/testing.h"
#include "tests/dist/dist_test_util.h"

using namespace std::chrono_literals;
using minidl::dist::Clock;
using minidl::dist::Socket;
using minidl::dist::TCPStore;
using ::testing::HasSubstr;

namespace {

const std::string kHost = "127.0.0.1";
constexpr int kIdleConnections = 300;
// Low enough that 300 idle connections with a thread each would exhaust it.
constexpr rlim_t kDescriptorLimit = 256;

void lower_descriptor_limit(rlim_t soft) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) throw std::runtime_error("getrlimit failed");
  limit.rlim_cur = soft;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) throw std::runtime_error("setrlimit failed");
}

// Threads of this process: the entries of /proc/self/task.
int thread_count() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A forked child running fn, then _exit(0) (1 if fn throws); killed and reaped on destruction if
// still running. Fork it while this process has one thread.
class ForkedChild {
 public:
  explicit ForkedChild(const std::function<void()>& fn) {
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      minidl::dist::die_with_parent(SIGKILL, parent);
      int code = 0;
      try {
        fn();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child failed: %s\n", e.what());
        code = 1;
      }
      std::fflush(nullptr);
      _exit(code);
    }
  }
  ~ForkedChild() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  ForkedChild(const ForkedChild&) = delete;
  ForkedChild& operator=(const ForkedChild&) = delete;

  // Waits for the child to end; its waitpid status.
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
};

std::vector<Socket> open_idle_connections(uint16_t port, int n) {
  std::vector<Socket> idle;
  for (int i = 0; i < n; ++i) idle.push_back(minidl::dist::connect_tcp(kHost, port, Clock::now() + 10s));
  return idle;
}

// Whether the server closed fd before deadline (an end of stream or a reset).
bool closed_by_server_before(int fd, Clock::time_point deadline) {
  char c;
  try {
    return !minidl::dist::recv_all(fd, &c, 1, deadline);
  } catch (const std::exception& e) {
    return std::string(e.what()).find("timed out") == std::string::npos;
  }
}

void write_all(int fd, const void* data, size_t size) {
  if (::write(fd, data, size) != static_cast<ssize_t>(size)) throw std::runtime_error("pipe write failed");
}
void read_all(int fd, void* data, size_t size) {
  if (::read(fd, data, size) != static_cast<ssize_t>(size)) throw std::runtime_error("pipe read failed");
}

}  // namespace

TEST(StoreIdleConnections, RealClientsAreServedWhileIdleConnectionsCrowdTheServer) {
  minidl::testing::TempDir dir;
  const std::string err_path = dir.path() + "/server.err";
  int to_server[2], from_server[2];
  ASSERT_EQ(::pipe(to_server), 0);
  ASSERT_EQ(::pipe(from_server), 0);
  // The server runs in a child whose descriptor limit is low and whose stderr goes to a file;
  // asked ('t'), it says how many threads it has; told to quit ('q'), it exits.
  ForkedChild server_process([&] {
    if (std::freopen(err_path.c_str(), "w", stderr) == nullptr) throw std::runtime_error("freopen failed");
    lower_descriptor_limit(kDescriptorLimit);
    TCPStore server(kHost, {.is_server = true, .timeout = 5s, .token = "t"});
    const uint16_t port = server.port();
    write_all(from_server[1], &port, sizeof(port));
    char command = 0;
    while (::read(to_server[0], &command, 1) == 1 && command == 't') {
      const int threads = thread_count();
      write_all(from_server[1], &threads, sizeof(threads));
    }
  });
  uint16_t port = 0;
  read_all(from_server[0], &port, sizeof(port));
  auto ask_threads = [&] {
    int threads = 0;
    write_all(to_server[1], "t", 1);
    read_all(from_server[0], &threads, sizeof(threads));
    return threads;
  };

  const auto crowd_start = Clock::now();
  std::vector<Socket> idle = open_idle_connections(port, kIdleConnections);
  std::this_thread::sleep_for(300ms);  // let the server take in the crowd

  // Real clients connect through the crowd, and the store answers them.
  TCPStore writer(kHost, {.port = port, .timeout = 3s, .token = "t"});
  writer.set("k", "v");
  TCPStore reader(kHost, {.port = port, .timeout = 3s, .token = "t"});
  EXPECT_EQ(reader.get("k"), "v");
  EXPECT_EQ(reader.add("n", 5), 5);

  // Main thread, accept thread, and one thread per admitted client (the server's own, writer,
  // reader): none for the idle ones.
  EXPECT_LE(ask_threads(), 8);

  // Every idle connection is closed by the server within its hello deadline (and some slack).
  const auto deadline = crowd_start + minidl::dist::TCPStoreServer::kHelloDeadline + 3s;
  int closed = 0;
  for (const auto& s : idle) closed += closed_by_server_before(s.fd(), deadline);
  EXPECT_EQ(closed, kIdleConnections);
  EXPECT_EQ(reader.get("k"), "v");  // and the real clients are still served

  write_all(to_server[1], "q", 1);
  EXPECT_TRUE(minidl::dist::exited_ok(server_process.wait()));
  for (int fd : {to_server[0], to_server[1], from_server[0], from_server[1]}) ::close(fd);
  // The evictions and time-outs are a few rate-limited lines, not one (or more) per connection.
  const std::string log = read_file(err_path);
  EXPECT_LT(log.size(), 2048u) << log.substr(0, 4096);
  EXPECT_THAT(log, HasSubstr("[minidl TCPStore] closing connection from 127.0.0.1:"));
}

TEST(StoreIdleConnections, ARealWorldFinishesWhileIdleConnectionsCrowdItsStore) {
  minidl::testing::TempDir dir;
  const std::string d = dir.path();
  const uint16_t port = minidl::dist::find_free_port(kHost);
  // The crowd: a process (forked while this one has one thread) that opens its connections to
  // the world's store as soon as it listens, says so in a file, and holds them until killed.
  ForkedChild crowd([&] {
    std::vector<Socket> idle = open_idle_connections(port, kIdleConnections);
    std::ofstream(d + "/crowd_connected") << idle.size() << "\n";
    std::this_thread::sleep_for(60s);
  });
  constexpr int kSteps = 20;
  minidl::dist::spawn(2,
                      [&](int rank) {
                        if (std::freopen((d + "/err." + std::to_string(rank)).c_str(), "w", stderr) == nullptr)
                          std::abort();
                        if (rank == 0) lower_descriptor_limit(kDescriptorLimit);  // rank 0 hosts the store
                        minidl::dist::init({.timeout = 20s});
                        const auto give_up = Clock::now() + 20s;
                        while (!std::ifstream(d + "/crowd_connected")) {
                          if (Clock::now() > give_up) throw std::runtime_error("the crowd never connected");
                          std::this_thread::sleep_for(20ms);
                        }
                        for (int step = 0; step < kSteps; ++step) {
                          minidl::Tensor t = minidl::full({4}, static_cast<double>(rank + 1), minidl::DType::Float64);
                          minidl::dist::all_reduce(t);
                          if (t.to_vector<double>()[0] != 3.0) throw std::runtime_error("wrong all-reduce sum");
                          minidl::dist::barrier();
                          if (rank == 0) {  // a metrics file, opened afresh at every step like a trainer's log
                            std::ofstream metrics(d + "/metrics.jsonl", std::ios::app);
                            if (!(metrics << "{\"step\": " << step << "}\n" << std::flush))
                              throw std::runtime_error("cannot append to metrics.jsonl");
                          } else if (step % 5 == 0) {  // a late client of the store gets in through the crowd
                            const auto& info = minidl::dist::world_info();
                            TCPStore late(info.master_addr, {.port = info.master_port, .timeout = 5s});
                            late.set("late/" + std::to_string(step), "1");
                          }
                          std::this_thread::sleep_for(100ms);
                        }
                        minidl::dist::shutdown();
                      },
                      {.master_port = port});
  EXPECT_EQ(read_file(d + "/crowd_connected"), std::to_string(kIdleConnections) + "\n");
  std::ifstream metrics(d + "/metrics.jsonl");
  int lines = 0;
  for (std::string line; std::getline(metrics, line);) ++lines;
  EXPECT_EQ(lines, kSteps);
  const std::string log0 = read_file(d + "/err.0");
  EXPECT_LT(log0.size(), 2048u) << log0.substr(0, 4096);
  EXPECT_LT(read_file(d + "/err.1").size(), 2048u);
}
