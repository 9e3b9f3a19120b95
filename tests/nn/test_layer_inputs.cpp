// tests/nn/test_layer_inputs.cpp — layer options and inputs as PyTorch takes them: pooling modules
// whose stride is left out.
#include "minidl/nn/nn_all.h"
#include "tests/common/testing.h"

using namespace minidl;
using minidl::testing::expect_equal;

TEST(PoolModules, StrideLeftOutIsTheKernel) {
  const Variable x(arange(36, DType::Float32).reshape({1, 1, 6, 6}));  // x[h][w] = 6 h + w
  nn::MaxPool2d max_pool({.kernel = 3});
  nn::AvgPool2d avg_pool({.kernel = 3});
  EXPECT_EQ(max_pool.params.stride_h, 3);
  EXPECT_EQ(max_pool.extra_repr(), "kernel_size=3, stride=3, padding=0, dilation=1, ceil_mode=False");
  expect_equal(max_pool(x).data(), from_vector<float>({14, 17, 32, 35}, {1, 1, 2, 2}));
  expect_equal(avg_pool(x).data(), from_vector<float>({7, 10, 25, 28}, {1, 1, 2, 2}));
  EXPECT_THROW_MSG(nn::MaxPool2d({.kernel = 3, .stride = -1}), std::invalid_argument, "stride=-1");
}
