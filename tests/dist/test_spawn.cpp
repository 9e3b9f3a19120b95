// tests/dist/test_spawn.cpp — dist::spawn: children see the world in their environment, meet
// through the TCPStore, hand results back; a failing rank stops the others and its error
// reaches the parent, saying what ran out when it was memory or threads; no child is left
// behind; a port spawn picked that another process takes first costs a retry on another port,
// a port the caller gave is an error naming it.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <fstream>
#include <thread>
#include <vector>

#include "minidl/dist/env.h"
#include "minidl/dist/socket.h"
#include "minidl/dist/spawn.h"
#include "minidl/dist/store.h"
#include "minidl/kernels/caching_allocator.h"
#include "minidl/tensor/creation.h"
#include "tests/common/temp_dir.h"
#include "tests/common/testing.h"
#include "tests/dist/dist_test_util.h"

using namespace std::chrono_literals;
using minidl::dist::spawn;
using minidl::dist::spawn_with_results;
using minidl::dist::SpawnOptions;

namespace {

// True when this process has no children left, reaped or not.
bool no_children_left() {
  int status = 0;
  return ::waitpid(-1, &status, WNOHANG) == -1 && errno == ECHILD;
}

}  // namespace

TEST(Spawn, ChildrenSeeTheWorldAndHandResultsBack) {
  minidl::testing::EnvGuard env;  // the parent's own variables must not leak into the test
  auto results = spawn_with_results(3, [](int rank) {
    auto w = minidl::dist::world_info_from_env();
    minidl::dist::TCPStore store(w.master_addr, {.port = w.master_port, .is_server = w.rank == 0, .timeout = 8s});
    int64_t count = minidl::testing::count_rendezvous(store, w.rank, w.world_size);
    return "rank " + std::to_string(rank) + " env " + std::to_string(w.rank) + "/" + std::to_string(w.world_size) +
           " local " + std::to_string(w.local_rank) + "/" + std::to_string(w.local_world_size) + " count " +
           std::to_string(count) + " addr " + w.master_addr;
  });
  ASSERT_EQ(results.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    std::string n = std::to_string(r);
    EXPECT_EQ(results[r], "rank " + n + " env " + n + "/3 local " + n + "/3 count 3 addr 127.0.0.1");
  }
  EXPECT_TRUE(no_children_left());
}

// Rank 0 of the first world finds its MASTER_PORT taken (it binds the port itself before creating
// the store, as another process could): spawn starts a second world on another port, which
// succeeds. A file counts the worlds.
TEST(Spawn, APickedPortTakenBeforeTheStoreListensCostsARetryOnAnother) {
  const minidl::testing::TempDir dir;
  const std::string marker = dir.path() + "/worlds";
  auto results = spawn_with_results(2, [&](int rank) {
    auto w = minidl::dist::world_info_from_env();
    minidl::dist::Socket thief;
    if (rank == 0) {
      const bool first = !std::ifstream(marker).good();
      std::ofstream(marker, std::ios::app) << w.master_port << "\n";
      if (first) thief = minidl::dist::listen_tcp(w.master_addr, w.master_port, /*bind_all=*/false);
    }
    minidl::dist::TCPStore store(w.master_addr, {.port = w.master_port, .is_server = w.rank == 0, .timeout = 8s});
    return std::to_string(minidl::testing::count_rendezvous(store, w.rank, w.world_size));
  });
  EXPECT_EQ(results, (std::vector<std::string>{"2", "2"}));
  std::ifstream in(marker);
  std::string first_port, second_port, more;
  in >> first_port >> second_port;
  EXPECT_FALSE(first_port.empty());
  EXPECT_FALSE(second_port.empty());
  EXPECT_NE(first_port, second_port);
  EXPECT_FALSE(in >> more) << "a third world ran";
  EXPECT_TRUE(no_children_left());
}

// A port the caller chose is not replaced: the store's error names it.
TEST(Spawn, AGivenPortInUseIsAnErrorNamingIt) {
  const uint16_t port = minidl::dist::find_free_port("127.0.0.1");
  const minidl::dist::Socket taken = minidl::dist::listen_tcp("127.0.0.1", port, /*bind_all=*/false);
  SpawnOptions options;
  options.master_port = port;
  EXPECT_THROW_MSG(spawn(
                       2,
                       [](int) {
                         auto w = minidl::dist::world_info_from_env();
                         minidl::dist::TCPStore store(w.master_addr,
                                                      {.port = w.master_port, .is_server = w.rank == 0, .timeout = 2s});
                       },
                       options),
                   minidl::dist::SpawnError,
                   "spawn: rank 0 failed: TCPStore: cannot listen on 127.0.0.1:" + std::to_string(port) +
                       ": Address already in use");
  EXPECT_TRUE(no_children_left());
}

TEST(Spawn, LargeResultsArriveWhole) {
  auto results =
      spawn_with_results(2, [](int rank) { return std::string(300000 + rank, static_cast<char>('a' + rank)); });
  EXPECT_EQ(results[0], std::string(300000, 'a'));
  EXPECT_EQ(results[1], std::string(300001, 'b'));
}

TEST(Spawn, AFailingRankStopsTheOthersAndReportsItsMessage) {
  auto start = std::chrono::steady_clock::now();
  EXPECT_THROW_MSG(spawn(3,
                         [](int rank) {
                           if (rank == 1) throw std::runtime_error("boom from rank one");
                           std::this_thread::sleep_for(30s);  // the others would run long; spawn must stop them
                         }),
                   std::runtime_error, "spawn: rank 1 failed: boom from rank one");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_TRUE(no_children_left());
}

TEST(Spawn, ARankKilledByASignalIsNamed) {
  EXPECT_THROW_MSG(spawn(2,
                         [](int rank) {
                           if (rank == 0) ::raise(SIGKILL);
                           std::this_thread::sleep_for(30s);
                         }),
                   std::runtime_error, "spawn: rank 0 failed: was killed by signal 9");
  EXPECT_TRUE(no_children_left());
}

TEST(Spawn, AChildIgnoringSigtermIsKilledAfterTheGracePeriod) {
  auto start = std::chrono::steady_clock::now();
  EXPECT_THROW_MSG(spawn(
                       2,
                       [](int rank) {
                         if (rank == 1) {
                           std::this_thread::sleep_for(100ms);
                           ::_exit(4);
                         }
                         ::signal(SIGTERM, SIG_IGN);
                         std::this_thread::sleep_for(30s);
                       },
                       SpawnOptions{.kill_grace = 500ms}),
                   std::runtime_error, "spawn: rank 1 failed: exited with status 4");
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 500ms);
  EXPECT_LT(took, 5s);
  EXPECT_TRUE(no_children_left());
}

TEST(Spawn, NprocsMustBePositive) {
  EXPECT_THROW_MSG(spawn(0, [](int) {}), std::runtime_error, "spawn: nprocs must be at least 1, got 0");
}

TEST(Spawn, ARankOutOfMemoryForATensorSaysHowMuchItAskedFor) {
  const size_t bytes = minidl::testing::more_bytes_than_memory();
  EXPECT_THROW_MSG(spawn(1,
                         [bytes](int) {
                           minidl::testing::limit_address_space(size_t(256) << 20);
                           minidl::Tensor t = minidl::empty({static_cast<int64_t>(bytes / 4)}, minidl::DType::Float32);
                         }),
                   minidl::dist::SpawnError,
                   "spawn: rank 0 failed: out of memory: cannot allocate " + minidl::kernels::format_bytes(bytes) +
                       " for a CPU tensor (" + std::to_string(bytes) + " bytes); ");
}

TEST(Spawn, ARankThatCannotStartAThreadSaysSo) {
  EXPECT_THROW_MSG(spawn(1,
                         [](int) {
                           // Less room than one thread's stack. glibc may hand out a few cached
                           // stacks first, so threads are started until one cannot be.
                           minidl::testing::limit_address_space(size_t(4) << 20);
                           std::atomic<bool> release{false};
                           std::vector<std::thread> threads;
                           auto join_all = [&] {
                             release = true;
                             for (auto& t : threads) t.join();
                           };
                           try {
                             for (int i = 0; i < 64; ++i)
                               threads.emplace_back([&] {
                                 while (!release) std::this_thread::sleep_for(1ms);
                               });
                           } catch (...) {
                             join_all();
                             throw;
                           }
                           join_all();
                         }),
                   minidl::dist::SpawnError,
                   "spawn: rank 0 failed: cannot start a thread: Resource temporarily unavailable (the limit on "
                   "processes and threads, `ulimit -u`, or memory)");
}

TEST(Spawn, ABareBadAllocIsReportedAsOutOfMemory) {
  EXPECT_THROW_MSG(spawn(1, [](int) { throw std::bad_alloc(); }), minidl::dist::SpawnError,
                   "spawn: rank 0 failed: out of memory: an allocation failed (std::bad_alloc; see free memory and "
                   "`ulimit -v`)");
}
