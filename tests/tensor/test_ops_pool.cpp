// tests/tensor/test_ops_pool.cpp — max_pool2d, avg_pool2d, adaptive_avg_pool2d forward/backward
// (tensor/ops_pool.cpp, kernels/cpu/pool.h): hand-computed windows, float64 finite differences of
// every backward (with padding and overlapping windows), the tiled adaptive backward against the
// adding loop bit for bit, error messages.
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "minidl/kernels/cpu/pool.h"
#include "tests/common/testing.h"
#include "tests/tensor/finite_difference.h"

using namespace minidl;
using minidl::testing::expect_close;
using minidl::testing::expect_equal;
using minidl::testing::numeric_grad;
using minidl::testing::randn64;

TEST(MaxPool2d, TakesTheMaxOfEachWindowAndRecordsWhere) {
  Tensor x = arange(16, DType::Float32).reshape({1, 1, 4, 4});
  MaxPool2dResult r = max_pool2d_forward(x, {.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2});
  expect_equal(r.out, from_vector<float>({5, 7, 13, 15}, {1, 1, 2, 2}));
  expect_equal(r.indices, from_vector<int64_t>({5, 7, 13, 15}, {1, 1, 2, 2}));
}

TEST(MaxPool2d, PaddingIsNeverTheMax) {
  // All-negative input: padded positions (-inf) must not win; 3x3 kernel, stride 1, padding 1.
  Tensor x = from_vector<double>({-9, -8, -7, -6, -5, -4, -3, -2, -1}, {1, 1, 3, 3});
  MaxPool2dResult r =
      max_pool2d_forward(x, {.kernel_h = 3, .kernel_w = 3, .stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1});
  expect_equal(r.out, from_vector<double>({-5, -4, -4, -2, -1, -1, -2, -1, -1}, {1, 1, 3, 3}));
  expect_equal(r.indices, from_vector<int64_t>({4, 5, 5, 7, 8, 8, 7, 8, 8}, {1, 1, 3, 3}));
}

TEST(MaxPool2d, NanPropagates) {
  Tensor x = from_vector<float>({1, std::numeric_limits<float>::quiet_NaN(), 3, 4}, {1, 1, 2, 2});
  MaxPool2dResult r = max_pool2d_forward(x, {.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2});
  EXPECT_TRUE(std::isnan(r.out.item()));
  EXPECT_EQ(r.indices.item<int64_t>(), 1);
}

TEST(MaxPool2d, BackwardRoutesEachGradientToItsMax) {
  // Overlapping windows (kernel 2, stride 1) share the max 9: it receives both gradients.
  Tensor x = from_vector<float>({1, 9, 2, 3, 4, 5}, {1, 1, 2, 3});
  const Pool2dParams p{.kernel_h = 2, .kernel_w = 2, .stride_h = 1, .stride_w = 1};
  MaxPool2dResult r = max_pool2d_forward(x, p);
  expect_equal(r.indices, from_vector<int64_t>({1, 1}, {1, 1, 1, 2}));
  Tensor dx = max_pool2d_backward(from_vector<float>({10, 20}, {1, 1, 1, 2}), r.indices, x.shape(), p);
  expect_equal(dx, from_vector<float>({0, 30, 0, 0, 0, 0}, {1, 1, 2, 3}));
}

TEST(MaxPool2d, BackwardMatchesFiniteDifferences) {
  for (const Pool2dParams& p :
       {Pool2dParams{.kernel_h = 3, .kernel_w = 2, .stride_h = 2, .stride_w = 1, .pad_h = 1, .pad_w = 1},
        Pool2dParams{.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2}}) {
    Tensor x = randn64({2, 3, 5, 6}, 1);
    MaxPool2dResult r = max_pool2d_forward(x, p);
    Tensor dy = randn64(r.out.shape(), 2);
    Tensor dx = max_pool2d_backward(dy, r.indices, x.shape(), p);
    expect_close(dx, numeric_grad([&](const Tensor& v) { return max_pool2d_forward(v, p).out; }, x, dy), 1e-6, 1e-7);
  }
}

TEST(AvgPool2d, CountIncludePadDividesByTheFullWindow) {
  Tensor x = from_vector<double>({1, 2, 3, 4}, {1, 1, 2, 2});
  Pool2dParams p{.kernel_h = 2, .kernel_w = 2, .stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1};
  expect_close(avg_pool2d_forward(x, p),
               from_vector<double>({0.25, 0.75, 0.5, 1.0, 2.5, 1.5, 0.75, 1.75, 1.0}, {1, 1, 3, 3}), 0, 1e-15);
  p.count_include_pad = false;
  expect_close(avg_pool2d_forward(x, p), from_vector<double>({1, 1.5, 2, 2, 2.5, 3, 3, 3.5, 4}, {1, 1, 3, 3}), 0,
               1e-15);
}

TEST(AvgPool2d, BackwardMatchesFiniteDifferences) {
  for (bool include_pad : {true, false}) {
    const Pool2dParams p{.kernel_h = 3,
                         .kernel_w = 3,
                         .stride_h = 2,
                         .stride_w = 1,
                         .pad_h = 1,
                         .pad_w = 1,
                         .count_include_pad = include_pad};
    Tensor x = randn64({2, 2, 5, 4}, 3);
    Tensor y = avg_pool2d_forward(x, p);
    Tensor dy = randn64(y.shape(), 4);
    expect_close(avg_pool2d_backward(dy, x.shape(), p),
                 numeric_grad([&](const Tensor& v) { return avg_pool2d_forward(v, p); }, x, dy), 1e-6, 1e-7,
                 include_pad ? "count_include_pad" : "exclude pad");
  }
}

TEST(AdaptiveAvgPool2d, UsesPyTorchsOverlappingBins) {
  // W = 5 into 3 bins: [0, 2), [1, 4), [3, 5).
  Tensor x = from_vector<float>({1, 2, 3, 4, 5}, {1, 1, 1, 5});
  expect_close(adaptive_avg_pool2d_forward(x, 1, 3), from_vector<float>({1.5f, 3.0f, 4.5f}, {1, 1, 1, 3}), 0, 1e-6);
  // Output 1x1 is the global mean.
  Tensor g = adaptive_avg_pool2d_forward(arange(12, DType::Float64).reshape({1, 2, 2, 3}), 1, 1);
  expect_equal(g, from_vector<double>({2.5, 8.5}, {1, 2, 1, 1}));
}

TEST(AdaptiveAvgPool2d, BackwardMatchesFiniteDifferences) {
  Tensor x = randn64({2, 3, 5, 7}, 5);
  Tensor dy = randn64({2, 3, 3, 4}, 6);
  expect_close(adaptive_avg_pool2d_backward(dy, x.shape()),
               numeric_grad([&](const Tensor& v) { return adaptive_avg_pool2d_forward(v, 3, 4); }, x, dy), 1e-6, 1e-7);
}

TEST(AdaptiveAvgPool2d, BackwardOfWindowsThatTileThePlane) {
  // 6 x 8 -> 3 x 4 and global pooling (4 x 4 -> 1 x 1): each input in one window, written once
  for (const std::array<int64_t, 4>& s : {std::array<int64_t, 4>{6, 8, 3, 4}, std::array<int64_t, 4>{4, 4, 1, 1}}) {
    const int64_t h = s[0], w = s[1], oh = s[2], ow = s[3];  // plain variables: the lambda captures them
    Tensor x = randn64({2, 3, h, w}, 8);
    Tensor dy = randn64({2, 3, oh, ow}, 9);
    expect_close(adaptive_avg_pool2d_backward(dy, x.shape()),
                 numeric_grad([&](const Tensor& v) { return adaptive_avg_pool2d_forward(v, oh, ow); }, x, dy), 1e-6,
                 1e-7);
  }
  // the kernel against the adding loop on a zeroed plane, bit for bit (-0.0 and a NaN included)
  const std::vector<float> dy = {0.5f, -0.0f, -3.0f, std::numeric_limits<float>::quiet_NaN(), 1e-30f, 7.0f};
  std::vector<float> tiled(6 * 9, 123.0f), added(6 * 9, 0.0f);  // (6, 9) -> (2, 3): windows of 3 x 3
  kernels::cpu::adaptive_avg_pool2d_plane_backward_tiled(dy.data(), 2, 3, tiled.data(), 6, 9);
  kernels::cpu::adaptive_avg_pool2d_plane_backward(dy.data(), 2, 3, added.data(), 6, 9);
  for (size_t i = 0; i < tiled.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &tiled[i], 4);
    std::memcpy(&b, &added[i], 4);
    EXPECT_EQ(a, b) << "element " << i;
  }
  // through the op: a -0.0 gradient gives +0.0
  Tensor dx = adaptive_avg_pool2d_backward(from_vector<float>({-0.0f}, {1, 1, 1, 1}), {1, 1, 2, 2});
  for (float v : dx.to_vector<float>()) {
    EXPECT_EQ(v, 0.0f);
    EXPECT_FALSE(std::signbit(v));
  }
}

TEST(AdaptiveAvgPool2d, BackwardOfAnEmptyPlaneIsEmpty) {
  // H = 0 tiles any output in the divisibility sense: the empty check comes first
  const Tensor dx = adaptive_avg_pool2d_backward(zeros({1, 2, 1, 1}), {1, 2, 0, 4});
  EXPECT_EQ(dx.shape(), (Shape{1, 2, 0, 4}));
}

TEST(Pool2d, AcceptsNonContiguousInput) {
  Tensor x = randn64({2, 6, 5, 3}, 7).permute({0, 3, 1, 2});  // (2, 3, 6, 5), strided
  const Pool2dParams p{.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2};
  expect_equal(max_pool2d_forward(x, p).out, max_pool2d_forward(x.contiguous(), p).out);
  expect_equal(avg_pool2d_forward(x, p), avg_pool2d_forward(x.contiguous(), p));
}

TEST(Pool2d, RejectsBadShapesAndWindows) {
  const Pool2dParams p{.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2};
  EXPECT_THROW_MSG(max_pool2d_forward(zeros({4, 4}), p), std::invalid_argument,
                   "max_pool2d: expected input (N, C, H, W) or (C, H, W), got float32[4, 4] on cpu");
  EXPECT_THROW_MSG(avg_pool2d_forward(zeros({1, 1, 1, 4}), p), std::invalid_argument,
                   "avg_pool2d: kernel (2, 2), stride (2, 2), padding (0, 0) gives an empty output for input "
                   "float32[1, 1, 1, 4] on cpu");
  EXPECT_THROW_MSG(
      max_pool2d_forward(zeros({1, 1, 4, 4}), {.kernel_h = 2, .kernel_w = 2, .stride_h = 1, .stride_w = 1, .pad_h = 2}),
      std::invalid_argument, "padding must be at most half the kernel size");
  EXPECT_THROW_MSG(
      max_pool2d_forward(zeros({1, 1, 4, 4}), {.kernel_h = 2, .kernel_w = 2, .stride_h = -1, .stride_w = 1}),
      std::invalid_argument, "kernel and stride must be positive");
  EXPECT_THROW_MSG(avg_pool2d_backward(zeros({1, 1, 3, 3}), {1, 1, 4, 4}, p), std::invalid_argument,
                   "avg_pool2d_backward: expected grad_output of shape [1, 1, 2, 2] for input [1, 1, 4, 4], got "
                   "float32[1, 1, 3, 3] on cpu");
  EXPECT_THROW_MSG(
      max_pool2d_backward(zeros({1, 1, 2, 2}), from_vector<int64_t>({0, 1, 2, 99}, {1, 1, 2, 2}), {1, 1, 4, 4}, p),
      std::invalid_argument, "index 99 is outside the 4x4 plane");
  EXPECT_THROW_MSG(adaptive_avg_pool2d_forward(zeros({1, 1, 4, 4}), 0, 2), std::invalid_argument,
                   "adaptive_avg_pool2d: output size must be positive, got (0, 2)");
}

// PyTorch's default stride: leaving it out (0) means the kernel's extent, per axis.
TEST(Pool2d, StrideLeftOutIsTheKernel) {
  const Tensor x = arange(24, DType::Float32).reshape({1, 1, 4, 6});  // x[h][w] = 6 h + w
  const Pool2dParams kernel_only{.kernel_h = 2, .kernel_w = 3};
  const Pool2dParams explicit_stride{.kernel_h = 2, .kernel_w = 3, .stride_h = 2, .stride_w = 3};
  const MaxPool2dResult m = max_pool2d_forward(x, kernel_only);
  expect_equal(m.out, from_vector<float>({8, 11, 20, 23}, {1, 1, 2, 2}));
  expect_equal(m.indices, max_pool2d_forward(x, explicit_stride).indices);
  const Tensor a = avg_pool2d_forward(x, kernel_only);
  expect_equal(a.to(DType::Float64), from_vector<double>({4, 7, 16, 19}, {1, 1, 2, 2}));
  const Tensor dy = from_vector<float>({1, 2, 3, 4}, {1, 1, 2, 2});
  expect_equal(max_pool2d_backward(dy, m.indices, x.shape(), kernel_only),
               max_pool2d_backward(dy, m.indices, x.shape(), explicit_stride));
  expect_equal(avg_pool2d_backward(dy, x.shape(), kernel_only), avg_pool2d_backward(dy, x.shape(), explicit_stride));
  EXPECT_THROW_MSG(max_pool2d_forward(x, {.kernel_h = 2, .kernel_w = 3, .stride_h = -1}), std::invalid_argument,
                   "stride (-1, 3)");
}
