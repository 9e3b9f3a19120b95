// tests/tensor/test_pinned.cpp — empty_pinned / pin_memory: with a CUDA device, a contiguous CPU
// tensor of the asked shape and dtype that every CPU op can use; without one, an error that says
// why (the build has no CUDA, or no device is present), never a crash or a silent plain buffer.
#include "minidl/kernels/cuda_api.h"
#include "minidl/tensor/pinned.h"
#include "tests/common/testing.h"

using minidl::DType;
using minidl::Tensor;

TEST(Pinned, WithoutADeviceEmptyPinnedSaysWhy) {
  if (minidl::kernels::cuda::device_count() > 0)
    GTEST_SKIP() << "a CUDA device is present: the error path does not apply";
  try {
    (void)minidl::empty_pinned({2, 3});
    FAIL() << "empty_pinned succeeded without a CUDA device";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(msg.find("pinned_malloc") != std::string::npos) << msg;
    EXPECT_TRUE(msg.find("no CUDA device present") != std::string::npos ||
                msg.find("built without CUDA") != std::string::npos)
        << msg;
  }
}

TEST(Pinned, EmptyPinnedIsAContiguousCpuTensorOfTheShapeAndDtype) {
  if (minidl::kernels::cuda::device_count() == 0) GTEST_SKIP() << "pinned memory needs a CUDA device; none is present";
  Tensor t = minidl::empty_pinned({4, 5}, DType::Int64);
  EXPECT_TRUE(t.device().is_cpu());
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.dtype(), DType::Int64);
  EXPECT_EQ(t.shape(), (minidl::Shape{4, 5}));
  t.fill_(7.0);
  EXPECT_EQ(minidl::sum(t).item(), 140.0);
  Tensor p = minidl::pin_memory(minidl::arange(6).reshape({2, 3}).t());  // a strided source
  minidl::testing::expect_equal(p, minidl::arange(6).reshape({2, 3}).t().contiguous(), "pin_memory copy");
}
