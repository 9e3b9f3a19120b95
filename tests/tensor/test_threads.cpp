// tests/tensor/test_threads.cpp — the public thread-count knob (tensor/threads.h): what is set is
// what the kernels use, and a count below 1 is refused by name; a parallel_for inside another's
// chunk runs on the calling thread, without a nested region.
#include <omp.h>

#include <mutex>
#include <thread>
#include <vector>

#include "minidl/kernels/cpu/parallel.h"
#include "tests/common/testing.h"

using namespace minidl;

TEST(Threads, SetGetRoundTripReachesTheKernels) {
  const int saved = get_num_threads();
  for (int n : {1, 3, 2}) {
    set_num_threads(n);
    EXPECT_EQ(get_num_threads(), n);
    EXPECT_EQ(kernels::cpu::get_num_threads(), n);  // one knob, not a copy of it
  }
  set_num_threads(saved);
  EXPECT_EQ(get_num_threads(), saved);
}

TEST(Threads, CountBelowOneIsRefusedByValue) {
  const int saved = get_num_threads();
  EXPECT_THROW_MSG(set_num_threads(0), std::invalid_argument, "must be >= 1, got 0");
  EXPECT_THROW_MSG(set_num_threads(-3), std::invalid_argument, "must be >= 1, got -3");
  EXPECT_EQ(get_num_threads(), saved);  // unchanged by the refused calls
}

TEST(Threads, NestedParallelForRunsOnTheCallingThread) {
  const int saved = get_num_threads();
  set_num_threads(2);
  EXPECT_FALSE(kernels::cpu::in_parallel());
  std::mutex m;
  std::vector<int64_t> done(16, 0);
  int mismatched = 0, outer_chunks = 0;
  kernels::cpu::parallel_for(2, 1, [&](int64_t o, int64_t) {
    const std::thread::id me = std::this_thread::get_id();
    const int level = omp_get_level();
    const bool inside = kernels::cpu::in_parallel();
    kernels::cpu::parallel_for(8, 1, [&](int64_t i, int64_t) {
      std::lock_guard<std::mutex> lock(m);
      // the same thread, and no OpenMP region opened below the outer one
      if (std::this_thread::get_id() != me || omp_get_level() != level) ++mismatched;
      ++done[static_cast<size_t>(o * 8 + i)];
    });
    std::lock_guard<std::mutex> lock(m);
    outer_chunks += inside ? 1 : 0;
  });
  EXPECT_EQ(outer_chunks, 2);  // both outer chunks ran on a team
  EXPECT_EQ(mismatched, 0);
  EXPECT_EQ(done, std::vector<int64_t>(16, 1));  // every inner chunk once
  EXPECT_FALSE(kernels::cpu::in_parallel());
  set_num_threads(saved);
}
