// tests/autograd/test_grad_mode.cpp — set_grad_enabled / is_grad_enabled, the switch NoGradGuard
// is built on (torch.set_grad_enabled): off records no graph, on again records one, the guard
// restores the mode it found, and the mode belongs to the calling thread only.
#include <thread>

#include "minidl/autograd/autograd_all.h"
#include "tests/common/testing.h"

using namespace minidl;

TEST(GradMode, SetGradEnabledSwitchesGraphRecordingOffAndOn) {
  Variable x(from_vector<float>({1, 2}), true);
  ASSERT_TRUE(is_grad_enabled());
  set_grad_enabled(false);
  EXPECT_FALSE(is_grad_enabled());
  Variable off = mul(x, 3.0);
  EXPECT_FALSE(off.requires_grad());
  set_grad_enabled(true);
  Variable on = mul(x, 3.0);
  ASSERT_TRUE(on.requires_grad());
  sum(on).backward();
  minidl::testing::expect_equal(x.grad(), from_vector<float>({3, 3}), "d(3x)/dx");
}

TEST(GradMode, NoGradGuardRestoresTheModeItFound) {
  set_grad_enabled(false);
  {
    NoGradGuard inner;
    EXPECT_FALSE(is_grad_enabled());
  }
  EXPECT_FALSE(is_grad_enabled());  // was off before the guard: stays off
  set_grad_enabled(true);
  {
    NoGradGuard inner;
    EXPECT_FALSE(is_grad_enabled());
  }
  EXPECT_TRUE(is_grad_enabled());
}

TEST(GradMode, TheModeIsPerThread) {
  set_grad_enabled(false);
  bool other_thread_sees = false;
  std::thread([&] { other_thread_sees = is_grad_enabled(); }).join();
  set_grad_enabled(true);
  EXPECT_TRUE(other_thread_sees);  // a DataLoader worker or the comm thread starts with grad on
}
