// tests/tensor/test_threads.cpp — the public thread-count knob (tensor/threads.h): what is set is
// what the kernels use, and a count below 1 is refused by name.
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
