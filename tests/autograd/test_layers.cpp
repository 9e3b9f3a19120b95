// tests/autograd/test_layers.cpp — interpolate, group_norm, conv_transpose2d and dropout2d beyond
// their PyTorch goldens (test_golden.cpp): float64 finite-difference gradients, conv_transpose2d
// as the adjoint of conv2d, dropout2d's per-channel mask, its statistics and its determinism, and
// the errors for bad arguments.
#include <cmath>

#include "tests/common/gradcheck.h"
#include "tests/common/testing.h"

using namespace minidl;
using minidl::testing::expect_close;
using minidl::testing::expect_equal;
using minidl::testing::gradcheck;
using V = std::vector<Variable>;

namespace {
Tensor rn(const Shape& s, uint64_t stream) { return randn(s, RandomKey{77, stream}, DType::Float64); }
}  // namespace

TEST(Interpolate, GradcheckNearestAndBilinear) {
  const Tensor x = rn({2, 2, 3, 4}, 1);
  gradcheck([](const V& v) { return interpolate(v[0], {.size = {5, 6}}); }, {x}, "nearest up");
  gradcheck([](const V& v) { return interpolate(v[0], {.size = {2, 3}}); }, {x}, "nearest down");
  gradcheck(
      [](const V& v) {
        return interpolate(v[0], {.size = {5, 7}, .mode = InterpolateMode::Bilinear});
      },
      {x}, "bilinear");
  gradcheck(
      [](const V& v) {
        return interpolate(v[0],
                           {.scale_factor = {1.5, 0.75}, .mode = InterpolateMode::Bilinear, .align_corners = true});
      },
      {x}, "bilinear align_corners");
  gradcheck([](const V& v) { return interpolate(transpose(v[0], 2, 3), {.scale_factor = {2.0}}); }, {x},
            "nearest of a transposed input");
}

TEST(Interpolate, SameSizeIsTheIdentity) {
  const Tensor x = rn({1, 2, 3, 5}, 2);
  expect_equal(interpolate(Variable(x), {.size = {3, 5}}).data(), x);
  expect_equal(interpolate(Variable(x), {.scale_factor = {1.0}, .mode = InterpolateMode::Bilinear}).data(), x);
}

TEST(Interpolate, BilinearAlignCornersKeepsTheCorners) {
  // (1, 1, 2, 2) -> (1, 1, 3, 3) with align_corners: the centre is the mean of the four corners
  const Tensor x = from_vector<float>({1, 2, 3, 5}, {1, 1, 2, 2});
  const Tensor y =
      interpolate(Variable(x), {.size = {3}, .mode = InterpolateMode::Bilinear, .align_corners = true}).data();
  expect_close(y, from_vector<float>({1, 1.5f, 2, 2, 2.75f, 3.5f, 3, 4, 5}, {1, 1, 3, 3}), 0, 1e-6);
}

TEST(Interpolate, BadArgumentsAreErrors) {
  const Variable x(rn({1, 1, 4, 4}, 3));
  EXPECT_THROW_MSG(interpolate(x, {}), std::invalid_argument, "exactly one of size and scale_factor, got neither");
  EXPECT_THROW_MSG(interpolate(x, {.size = {2}, .scale_factor = {2.0}}), std::invalid_argument, "got both");
  EXPECT_THROW_MSG(interpolate(x, {.size = {2}, .align_corners = true}), std::invalid_argument,
                   "align_corners can only be set with mode bilinear");
  EXPECT_THROW_MSG(interpolate(x, {.scale_factor = {-2.0}}), std::invalid_argument, "scale_factor must be positive");
  EXPECT_THROW_MSG(interpolate(x, {.scale_factor = {0.1}}), std::invalid_argument, "output size must be positive");
  EXPECT_THROW_MSG(interpolate(x, {.size = {1, 2, 3}}), std::invalid_argument, "one value or two");
  EXPECT_THROW_MSG(interpolate(Variable(rn({1, 4, 4}, 4)), {.size = {2}}), std::invalid_argument,
                   "expected a float32 or float64 input (N, C, H, W)");
  EXPECT_THROW_MSG(interpolate(Variable(zeros({1, 1, 2, 2}, DType::Int64)), {.size = {2}}), std::invalid_argument,
                   "int64");
}

TEST(GroupNorm, Gradcheck) {
  gradcheck([](const V& v) { return group_norm(v[0], 3, v[1], v[2], 1e-5); },
            {rn({2, 6, 2, 3}, 5), rn({6}, 6), rn({6}, 7)}, "group_norm affine");
  gradcheck(
      [](const V& v) {
        return group_norm(permute(v[0], {0, 2, 1}), 2, {}, {}, 1e-3);
      },
      {rn({3, 5, 4}, 8)}, "group_norm of a permuted input, no affine");
}

TEST(GroupNorm, OneGroupPerChannelNormalisesEachPlane) {
  const Tensor y = group_norm(Variable(rn({2, 3, 4, 4}, 9)), 3, {}, {}, 1e-5).data();
  expect_close(mean(y, {2, 3}), zeros({2, 3}, DType::Float64), 0, 1e-12, "plane means");
  expect_close(var(y, {2, 3}, 0), full({2, 3}, 1.0, DType::Float64), 1e-4, 0, "plane variances");
}

TEST(GroupNorm, BadArgumentsAreErrors) {
  const Variable x(rn({2, 6, 3}, 10));
  EXPECT_THROW_MSG(group_norm(x, 4, {}, {}), std::invalid_argument,
                   "num_groups = 4 must be positive and divide the number of channels C = 6");
  EXPECT_THROW_MSG(group_norm(x, 0, {}, {}), std::invalid_argument, "num_groups = 0");
  EXPECT_THROW_MSG(group_norm(x, 2, Variable(rn({4}, 11)), {}), std::invalid_argument, "expected weight of shape [6]");
  EXPECT_THROW_MSG(group_norm(Variable(rn({6}, 12)), 2, {}, {}), std::invalid_argument, "expected input (N, C, *)");
}

TEST(ConvTranspose2d, Gradcheck) {
  const ConvTranspose2dParams p{
      .stride_h = 2, .stride_w = 3, .pad_h = 1, .pad_w = 0, .output_padding_h = 1, .output_padding_w = 2};
  gradcheck([p](const V& v) { return conv_transpose2d(v[0], v[1], v[2], p); },
            {rn({2, 2, 3, 2}, 13), rn({2, 3, 3, 2}, 14), rn({3}, 15)},
            "conv_transpose2d stride, padding, output_padding");
  const ConvTranspose2dParams q{
      .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1, .dilation_h = 2, .dilation_w = 1, .groups = 2};
  gradcheck([q](const V& v) { return conv_transpose2d(v[0], v[1], {}, q); },
            {rn({1, 4, 3, 3}, 16), rn({4, 2, 2, 3}, 17)}, "conv_transpose2d dilation, groups");
  // kernel == stride, no padding: the outputs do not overlap (one GEMM and a scatter per image)
  const ConvTranspose2dParams u{.stride_h = 2, .stride_w = 3};
  gradcheck([u](const V& v) { return conv_transpose2d(v[0], v[1], v[2], u); },
            {rn({2, 3, 3, 2}, 25), rn({3, 2, 2, 3}, 26), rn({2}, 27)}, "conv_transpose2d kernel == stride");
  // ... and concatenated (as in a U-Net): its gradient is a slice of cat's, read in place
  gradcheck(
      [u](const V& v) {
        return cat({v[3], conv_transpose2d(v[0], v[1], v[2], u)}, 1);
      },
      {rn({2, 3, 3, 2}, 28), rn({3, 2, 2, 3}, 29), rn({2}, 30), rn({2, 1, 6, 6}, 31)},
      "cat(x, conv_transpose2d kernel == stride)");
}

TEST(ConvTranspose2d, IsTheAdjointOfConv2d) {
  // <conv2d(u, w), v> = <u, conv_transpose2d(v, w)> for the same stride, padding, dilation, groups
  const Conv2dParams cp{
      .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 2, .dilation_h = 1, .dilation_w = 2, .groups = 2};
  const ConvTranspose2dParams tp{.stride_h = 2,
                                 .stride_w = 2,
                                 .pad_h = 1,
                                 .pad_w = 2,
                                 .output_padding_h = 1,
                                 .output_padding_w = 0,
                                 .dilation_h = 1,
                                 .dilation_w = 2,
                                 .groups = 2};
  const Tensor u = rn({2, 4, 8, 7}, 18), w = rn({6, 2, 3, 3}, 19);
  const Tensor cu = conv2d_forward(u, w, Tensor(), cp);  // (2, 6, 4, 4)
  const Tensor v = rn(cu.shape(), 20);
  const Tensor tv = conv_transpose2d_forward(v, w, Tensor(), tp);
  ASSERT_EQ(tv.shape(), u.shape());
  EXPECT_NEAR(sum(mul(cu, v)).item(), sum(mul(u, tv)).item(), 1e-10);
}

TEST(ConvTranspose2d, BadArgumentsAreErrors) {
  const Variable x(rn({1, 2, 3, 3}, 21)), w(rn({2, 3, 3, 3}, 22));
  EXPECT_THROW_MSG(conv_transpose2d(x, w, {}, {.stride_h = 2, .stride_w = 2, .output_padding_h = 2}),
                   std::invalid_argument, "output_padding must be smaller than the stride");
  EXPECT_THROW_MSG(conv_transpose2d(Variable(rn({1, 3, 3, 3}, 23)), w, {}), std::invalid_argument,
                   "expected input (N, C, H, W) with C = 2");
  EXPECT_THROW_MSG(conv_transpose2d(x, w, Variable(rn({2}, 24))), std::invalid_argument, "expected bias float64[3]");
  EXPECT_THROW_MSG(conv_transpose2d(x, w, {}, {.groups = 4}), std::invalid_argument, "not divisible by groups = 4");
  EXPECT_THROW_MSG(conv_transpose2d(x, w, {}, {.pad_h = 3}), std::invalid_argument, "gives an empty output");
}

TEST(Dropout2d, ZeroesWholeChannelsAndScalesTheRest) {
  const double p = 0.3;
  const Variable x(ones({64, 32, 3, 4}), true);
  const Variable y = dropout2d(x, p, true, RandomKey{5, 1});
  sum(y).backward();
  const Tensor planes = y.data().reshape({64 * 32, 12});
  const float* v = planes.data<float>();
  int64_t dropped = 0;
  for (int64_t i = 0; i < 64 * 32; ++i) {
    const float first = v[i * 12];
    ASSERT_TRUE(first == 0.0f || std::abs(first - 1.0f / 0.7f) < 1e-6f) << "plane " << i << " holds " << first;
    for (int64_t k = 1; k < 12; ++k) ASSERT_EQ(v[i * 12 + k], first) << "plane " << i << " is not one value";
    dropped += first == 0.0f;
  }
  // 2048 planes: the dropped fraction's standard deviation is sqrt(0.3 * 0.7 / 2048) ~ 0.010
  EXPECT_NEAR(static_cast<double>(dropped) / 2048.0, p, 0.05);
  // the mean is kept: E[y] = 1; and the gradient of sum(y) is the mask itself
  EXPECT_NEAR(mean(y.data()).item(), 1.0, 0.08);
  expect_equal(x.grad(), y.data(), "gradient = mask");
}

TEST(Dropout2d, DeterministicUnderTheSeededGenerator) {
  const Variable x(randn({4, 8, 2, 2}, RandomKey{1, 1}));
  manual_seed(123);
  const Tensor a = dropout2d(x, 0.5, true).data();
  const Tensor b = dropout2d(x, 0.5, true).data();
  manual_seed(123);
  expect_equal(dropout2d(x, 0.5, true).data(), a, "same seed, same masks");
  EXPECT_GT(minidl::testing::max_abs_diff(a, b), 0.0) << "the next call draws a new mask";
  expect_equal(dropout2d(x, 0.5, true, RandomKey{9, 2}).data(), dropout2d(x, 0.5, true, RandomKey{9, 2}).data());
}

TEST(Dropout2d, IdentityInEvalOrWithPZeroAndErrors) {
  const Variable x(randn({2, 3, 2, 2}, RandomKey{1, 2}));
  expect_equal(dropout2d(x, 0.5, false).data(), x.data());
  expect_equal(dropout2d(x, 0.0, true).data(), x.data());
  EXPECT_THROW_MSG(dropout2d(x, 1.0, true), std::invalid_argument, "p must be in [0, 1)");
  EXPECT_THROW_MSG(dropout2d(Variable(ones({3, 4, 5})), 0.5, true), std::invalid_argument,
                   "expected input (N, C, H, W)");
}
