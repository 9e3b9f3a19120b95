// tests/nn/test_new_layers.cpp — the modules over interpolate, dropout2d, group_norm and
// conv_transpose2d: each forward equals its functional op, parameters and default init as
// PyTorch's (ConvTranspose2d's (in, out / groups, k, k) weight with fan_in from that layout),
// printing as PyTorch's repr, and errors for bad options.
#include <cmath>

#include "minidl/nn/nn_all.h"
#include "tests/common/testing.h"

using namespace minidl;
using minidl::testing::expect_equal;

TEST(Upsample, ForwardIsInterpolate) {
  const Variable x(randn({2, 3, 4, 5}, RandomKey{3, 1}));
  nn::Upsample up({.scale_factor = {2.0}, .mode = InterpolateMode::Bilinear, .align_corners = true});
  expect_equal(
      up(x).data(),
      interpolate(x, {.scale_factor = {2.0}, .mode = InterpolateMode::Bilinear, .align_corners = true}).data());
  EXPECT_EQ(up(x).shape(), (Shape{2, 3, 8, 10}));
  EXPECT_EQ(nn::Upsample({.size = {7}}).forward(x).shape(), (Shape{2, 3, 7, 7}));
  EXPECT_EQ(up.extra_repr(), "scale_factor=2.0, mode='bilinear'");
  EXPECT_EQ(nn::Upsample({.size = {4, 6}}).extra_repr(), "size=(4, 6), mode='nearest'");
  EXPECT_EQ(nn::Upsample({.scale_factor = {1.5, 2}}).extra_repr(), "scale_factor=(1.5, 2.0), mode='nearest'");
  EXPECT_THROW_MSG(nn::Upsample({}), std::invalid_argument, "exactly one of size and scale_factor");
  EXPECT_THROW_MSG(nn::Upsample({.size = {2}, .align_corners = false}), std::invalid_argument,
                   "align_corners can only be set with mode bilinear");
}

TEST(Dropout2d, TrainingMasksChannelsEvalIsIdentity) {
  const Variable x(ones({4, 16, 2, 2}));
  nn::Dropout2d drop({.p = 0.5});
  manual_seed(11);
  const Tensor y = drop(x).data();
  manual_seed(11);
  expect_equal(y, dropout2d(x, 0.5, true).data(), "the module draws its key as the functional op does");
  EXPECT_GT(minidl::testing::max_abs_diff(y, x.data()), 0.0);
  drop.eval();
  expect_equal(drop(x).data(), x.data());
  EXPECT_EQ(drop.extra_repr(), "p=0.5, inplace=False");
  EXPECT_THROW_MSG(nn::Dropout2d({.p = 1.0}), std::invalid_argument, "Dropout2d: p must be in [0, 1)");
}

TEST(GroupNorm, ParametersForwardAndErrors) {
  nn::GroupNorm gn({.num_groups = 2, .num_channels = 6, .eps = 1e-3});
  ASSERT_EQ(gn.parameters().size(), 2u);
  expect_equal(gn.weight.data(), ones({6}));
  expect_equal(gn.bias.data(), zeros({6}));
  gn.weight.data().fill_(2.0);
  const Variable x(randn({3, 6, 4}, RandomKey{3, 2}));
  expect_equal(gn(x).data(), group_norm(x, 2, gn.weight, gn.bias, 1e-3).data());
  EXPECT_EQ(gn.extra_repr(), "2, 6, eps=0.001, affine=True");
  EXPECT_TRUE(nn::GroupNorm({.num_groups = 3, .num_channels = 3, .affine = false}).parameters().empty());
  EXPECT_THROW_MSG(nn::GroupNorm({.num_groups = 4, .num_channels = 6}), std::invalid_argument,
                   "num_channels (6) must be positive and divisible by num_groups (4)");
}

namespace {
double max_abs(const Tensor& t) {
  double m = 0;
  for (float v : t.to_vector<float>()) m = std::max(m, static_cast<double>(std::abs(v)));
  return m;
}
}  // namespace

TEST(ConvTranspose2d, WeightLayoutInitAndForward) {
  manual_seed(5);
  nn::ConvTranspose2d ct({.in = 16, .out = 8, .kernel = 3, .stride = 2, .padding = 1, .output_padding = 1});
  EXPECT_EQ(ct.weight.shape(), (Shape{16, 8, 3, 3}));
  EXPECT_EQ(ct.bias.shape(), (Shape{8}));
  // PyTorch: kaiming_uniform(a = sqrt(5)) gives bound 1 / sqrt(fan_in) with fan_in = 8 * 3 * 3 (dim 1
  // of this layout), the bias the same bound; fan_in from `in` would give 1 / 12
  const double bound = 1.0 / std::sqrt(72.0);
  EXPECT_LE(max_abs(ct.weight.data()), bound);
  EXPECT_GT(max_abs(ct.weight.data()), 0.95 * bound);  // 1152 draws reach the bound's last 5%
  EXPECT_LE(max_abs(ct.bias.data()), bound);
  const Variable x(randn({2, 16, 5, 4}, RandomKey{3, 3}));
  const Variable y = ct(x);
  EXPECT_EQ(y.shape(), (Shape{2, 8, 10, 8}));  // (5 - 1) * 2 - 2 + 2 + 1 + 1
  expect_equal(y.data(), conv_transpose2d(x, ct.weight, ct.bias, ct.params).data());
  EXPECT_EQ(ct.extra_repr(), "16, 8, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), output_padding=(1, 1)");
  nn::ConvTranspose2d grouped({.in = 4, .out = 6, .kernel = 2, .groups = 2, .bias = false});
  EXPECT_EQ(grouped.weight.shape(), (Shape{4, 3, 2, 2}));
  EXPECT_EQ(grouped.parameters().size(), 1u);
  EXPECT_EQ(grouped.extra_repr(), "4, 6, kernel_size=(2, 2), stride=(1, 1), groups=2, bias=False");
  EXPECT_THROW_MSG(nn::ConvTranspose2d({.in = 4, .out = 4, .kernel = 3, .stride = 2, .output_padding = 2}),
                   std::invalid_argument, "output_padding must be smaller than stride");
  EXPECT_THROW_MSG(nn::ConvTranspose2d({.in = 4, .out = 6, .kernel = 3, .groups = 4}), std::invalid_argument,
                   "must be divisible by groups (4)");
}
