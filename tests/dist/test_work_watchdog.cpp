// tests/dist/test_work_watchdog.cpp — WorkWatchdog (dist/work_watchdog.h) on the CPU with fake
// probes: finished collectives are dropped, one past its deadline or an asynchronous backend error
// breaks the group once with a reason naming it, a probe that throws is a failure, the setup runs
// on the watchdog's own thread, and looks are spaced by the interval (no busy spin).
#include <atomic>
#include <thread>

#include "minidl/dist/work_watchdog.h"
#include "tests/common/testing.h"

using minidl::dist::WorkWatchdog;
using namespace std::chrono_literals;

namespace {

// Polls `cond` every millisecond for up to 10 s (a loaded machine may delay the watchdog's thread).
template <class F> bool eventually(F cond) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

struct Failures {
  std::mutex mu;
  std::vector<std::string> reasons;
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& r) {
      std::lock_guard<std::mutex> lock(mu);
      reasons.push_back(r);
    };
  }
  std::vector<std::string> get() {
    std::lock_guard<std::mutex> lock(mu);
    return reasons;
  }
};

}  // namespace

TEST(WorkWatchdog, FinishedCollectivesAreDroppedWithoutAFailure) {
  Failures f;
  WorkWatchdog dog({.interval = 1ms, .on_start = {}, .async_error = {}, .on_failure = f.sink()});
  std::atomic<bool> done{false};
  dog.watch("all_reduce #1 on rank 0", WorkWatchdog::Clock::now() + 60s, [&] { return done.load(); });
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(dog.watched(), 1u) << "a collective that has not finished stays watched";
  done = true;
  ASSERT_TRUE(eventually([&] { return dog.watched() == 0; }));
  EXPECT_EQ(dog.failure(), "");
  EXPECT_TRUE(f.get().empty());
}

TEST(WorkWatchdog, CollectivePastItsDeadlineBreaksTheGroupOnceNamingIt) {
  Failures f;
  WorkWatchdog dog({.interval = 1ms, .on_start = {}, .async_error = {}, .on_failure = f.sink()});
  dog.watch("broadcast #2 (float32[4]) on rank 0", WorkWatchdog::Clock::now() + 60s, [] { return false; });
  dog.watch("all_reduce #3 (float32[8]) on rank 1", WorkWatchdog::Clock::now() + 20ms, [] { return false; });
  ASSERT_TRUE(eventually([&] { return !dog.failure().empty(); }));
  EXPECT_EQ(dog.failure(), "all_reduce #3 (float32[8]) on rank 1 timed out");
  EXPECT_EQ(f.get(), std::vector<std::string>{"all_reduce #3 (float32[8]) on rank 1 timed out"});
  EXPECT_EQ(dog.watched(), 0u) << "a broken group watches nothing more";
  dog.watch("barrier #4 on rank 1", WorkWatchdog::Clock::now(), [] { return false; });
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(dog.watched(), 0u);
  EXPECT_EQ(f.get().size(), 1u) << "on_failure runs once";
}

TEST(WorkWatchdog, AsynchronousBackendErrorBreaksTheGroup) {
  Failures f;
  std::atomic<bool> peer_died{false};
  WorkWatchdog dog({.interval = 1ms,
                    .on_start = {},
                    .async_error = [&] { return peer_died ? std::string("NCCL error: remote process exited") : ""; },
                    .on_failure = f.sink()});
  dog.watch("all_reduce #1 on rank 0", WorkWatchdog::Clock::now() + 60s, [] { return false; });
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(dog.failure(), "");
  peer_died = true;
  ASSERT_TRUE(eventually([&] { return !dog.failure().empty(); }));
  EXPECT_EQ(f.get(), std::vector<std::string>{"NCCL error: remote process exited"});
}

TEST(WorkWatchdog, ProbeThatThrowsIsAFailureWithItsMessage) {
  Failures f;
  WorkWatchdog dog({.interval = 1ms, .on_start = {}, .async_error = {}, .on_failure = f.sink()});
  dog.watch("all_gather #5 on rank 2", WorkWatchdog::Clock::now() + 60s,
            []() -> bool { throw std::runtime_error("CUDA error: an illegal memory access"); });
  ASSERT_TRUE(eventually([&] { return !dog.failure().empty(); }));
  EXPECT_EQ(dog.failure(), "all_gather #5 on rank 2: CUDA error: an illegal memory access");
}

TEST(WorkWatchdog, SetupRunsOnTheWatchdogsOwnThread) {
  std::atomic<bool> ran{false};
  std::thread::id setup_thread;
  {
    WorkWatchdog dog({.interval = 1ms,
                      .on_start =
                          [&] {
                            setup_thread = std::this_thread::get_id();
                            ran = true;
                          },
                      .async_error = {},
                      .on_failure = {}});
    ASSERT_TRUE(eventually([&] { return ran.load(); }));
  }
  EXPECT_NE(setup_thread, std::this_thread::get_id());
}

TEST(WorkWatchdog, LooksAreSpacedByTheIntervalNotABusySpin) {
  std::atomic<int> probes{0};
  WorkWatchdog dog({.interval = 10ms, .on_start = {}, .async_error = {}, .on_failure = {}});
  dog.watch("all_reduce #1 on rank 0", WorkWatchdog::Clock::now() + 60s, [&] {
    ++probes;
    return false;
  });
  std::this_thread::sleep_for(100ms);
  const int n = probes.load();
  EXPECT_LE(n, 11) << "at most one look per 10 ms interval in 100 ms";
  EXPECT_GE(n, 1);
}
