// tests/tensor/test_ops_conv.cpp — conv2d forward/backward (tensor/ops_conv.cpp, kernels/cpu/im2col.h,
// kernels/cpu/conv2d.h): hand-computed outputs, a naive direct convolution as reference, float64
// finite differences of dx, dw, db with stride, padding, dilation and groups, and error messages.
#include <cmath>
#include <string>
#include <vector>

#include "minidl/kernels/cpu/parallel.h"
#include "tests/common/testing.h"
#include "tests/tensor/finite_difference.h"

using namespace minidl;
using minidl::testing::expect_close;
using minidl::testing::expect_equal;
using minidl::testing::expect_within_product_bound;
using minidl::testing::numeric_grad;
using minidl::testing::randn64;

namespace {

// The definition of conv2d, one output element at a time, in double.
Tensor naive_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t O = w.size(0), Cg = w.size(1), kH = w.size(2), kW = w.size(3), Og = O / p.groups;
  const int64_t Ho = (H + 2 * p.pad_h - p.dilation_h * (kH - 1) - 1) / p.stride_h + 1;
  const int64_t Wo = (W + 2 * p.pad_w - p.dilation_w * (kW - 1) - 1) / p.stride_w + 1;
  const auto xv = x.to_vector<double>(), wv = w.to_vector<double>();
  const auto bv = b.defined() ? b.to_vector<double>() : std::vector<double>(O, 0.0);
  std::vector<double> y(N * O * Ho * Wo);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          double s = bv[o];
          for (int64_t ci = 0; ci < Cg; ++ci) {
            const int64_t c = (o / Og) * Cg + ci;
            for (int64_t kh = 0; kh < kH; ++kh)
              for (int64_t kw = 0; kw < kW; ++kw) {
                const int64_t h = oh * p.stride_h - p.pad_h + kh * p.dilation_h;
                const int64_t ww = ow * p.stride_w - p.pad_w + kw * p.dilation_w;
                if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                s += xv[((n * C + c) * H + h) * W + ww] * wv[((o * Cg + ci) * kH + kh) * kW + kw];
              }
          }
          y[((n * O + o) * Ho + oh) * Wo + ow] = s;
        }
  (void)C;
  return from_vector(y, {N, O, Ho, Wo}, x.dtype());
}

struct ConvCase {
  const char* name;
  Shape x, w;
  Conv2dParams p;
};

// The geometries every conv test runs through.
std::vector<ConvCase> conv_cases() {
  return {
      {"plain 3x3", {2, 3, 5, 5}, {4, 3, 3, 3}, {}},
      {"stride 2, padding 1", {2, 2, 6, 5}, {3, 2, 3, 3}, {.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1}},
      {"dilation 2, padding 2", {1, 2, 7, 6}, {2, 2, 3, 2}, {.pad_h = 2, .pad_w = 1, .dilation_h = 2, .dilation_w = 2}},
      {"groups 2, stride (2, 1), padding (1, 0)",
       {2, 4, 5, 6},
       {6, 2, 3, 2},
       {.stride_h = 2, .stride_w = 1, .pad_h = 1, .pad_w = 0, .groups = 2}},
      {"1x1 kernel", {3, 3, 4, 4}, {2, 3, 1, 1}, {}},
  };
}

}  // namespace

TEST(Conv2d, SumsTheWindowAndAddsTheBias) {
  // x = 1..9 in a 3x3 plane, a 2x2 kernel of ones, bias 0.5: each output is its window's sum + 0.5.
  Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  Tensor y = conv2d_forward(x, ones({1, 1, 2, 2}), from_vector<float>({0.5f}, {1}), {});
  expect_equal(y, from_vector<float>({12.5f, 16.5f, 24.5f, 28.5f}, {1, 1, 2, 2}));
}

TEST(Conv2d, PaddingAndStrideTwoPickEveryOtherWindow) {
  // 3x3 kernel [[0,0,0],[0,1,0],[0,0,2]] over 1..9 padded by 1, stride 2: out = x[h, w] + 2 x[h+1, w+1].
  Tensor x = from_vector<double>({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  Tensor w = from_vector<double>({0, 0, 0, 0, 1, 0, 0, 0, 2}, {1, 1, 3, 3});
  Tensor y = conv2d_forward(x, w, Tensor(), {.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1});
  expect_equal(y, from_vector<double>({1 + 2 * 5, 3 + 0, 7 + 0, 9}, {1, 1, 2, 2}));
}

TEST(Conv2d, MatchesNaiveDirectConvolution) {
  uint64_t stream = 0;
  for (const ConvCase& c : conv_cases()) {
    for (DType dt : {DType::Float32, DType::Float64}) {
      Tensor x = randn64(c.x, stream++).to(dt), w = randn64(c.w, stream++).to(dt);
      Tensor b = randn64({c.w[0]}, stream++).to(dt);
      const double tol = dt == DType::Float32 ? 1e-5 : 1e-12;
      expect_close(conv2d_forward(x, w, b, c.p), naive_conv2d(x, w, b, c.p), tol, tol, c.name);
      expect_close(conv2d_forward(x, w, Tensor(), c.p), naive_conv2d(x, w, Tensor(), c.p), tol, tol, c.name);
    }
  }
}

TEST(Conv2d, AcceptsNonContiguousInputs) {
  // x stored as (N, H, W, C) and permuted to (N, C, H, W); w transposed in its spatial dims.
  Tensor x_nhwc = randn64({2, 5, 4, 3}, 1);
  Tensor x = x_nhwc.permute({0, 3, 1, 2});
  Tensor w = randn64({2, 3, 3, 2}, 2).transpose(2, 3);
  ASSERT_FALSE(x.is_contiguous());
  ASSERT_FALSE(w.is_contiguous());
  const Conv2dParams p{.pad_h = 1, .pad_w = 1};
  expect_close(conv2d_forward(x, w, Tensor(), p), naive_conv2d(x.contiguous(), w.contiguous(), Tensor(), p), 1e-12,
               1e-12);
  Tensor dy = randn64({2, 2, 4, 6}, 3).transpose(2, 3);  // (2, 2, 6, 4), strided too
  Conv2dGrads a = conv2d_backward(x, w, dy, true, p);
  Conv2dGrads b = conv2d_backward(x.contiguous(), w.contiguous(), dy.contiguous(), true, p);
  expect_equal(a.dx, b.dx);
  expect_equal(a.dw, b.dw);
  expect_equal(a.db, b.db);
}

TEST(Conv2d, BackwardMatchesFiniteDifferences) {
  uint64_t stream = 100;
  for (const ConvCase& c : conv_cases()) {
    Tensor x = randn64(c.x, stream++), w = randn64(c.w, stream++), b = randn64({c.w[0]}, stream++);
    Tensor y = conv2d_forward(x, w, b, c.p);
    Tensor dy = randn64(y.shape(), stream++);
    Conv2dGrads g = conv2d_backward(x, w, dy, true, c.p);
    expect_close(g.dx, numeric_grad([&](const Tensor& v) { return conv2d_forward(v, w, b, c.p); }, x, dy), 1e-6, 1e-7,
                 std::string(c.name) + " dx");
    expect_close(g.dw, numeric_grad([&](const Tensor& v) { return conv2d_forward(x, v, b, c.p); }, w, dy), 1e-6, 1e-7,
                 std::string(c.name) + " dw");
    expect_close(g.db, numeric_grad([&](const Tensor& v) { return conv2d_forward(x, w, v, c.p); }, b, dy), 1e-6, 1e-7,
                 std::string(c.name) + " db");
  }
}

TEST(Conv2d, BackwardWithoutBiasLeavesDbUndefined) {
  Conv2dGrads g =
      conv2d_backward(randn64({1, 1, 3, 3}, 1), randn64({1, 1, 2, 2}, 2), randn64({1, 1, 2, 2}, 3), false, {});
  EXPECT_TRUE(g.dx.defined());
  EXPECT_TRUE(g.dw.defined());
  EXPECT_FALSE(g.db.defined());
}

TEST(Conv2d, Float32BackwardAgreesWithFloat64) {
  const ConvCase c = conv_cases()[3];
  Tensor x = randn64(c.x, 7), w = randn64(c.w, 8), dy = randn64({2, 6, 3, 5}, 9);
  Conv2dGrads g64 = conv2d_backward(x, w, dy, true, c.p);
  Conv2dGrads g32 = conv2d_backward(x.to(DType::Float32), w.to(DType::Float32), dy.to(DType::Float32), true, c.p);
  expect_close(g32.dx, g64.dx, 1e-4, 1e-5, "dx");
  expect_close(g32.dw, g64.dw, 1e-4, 1e-5, "dw");
  expect_close(g32.db, g64.db, 1e-4, 1e-5, "db");
}

TEST(Conv2d, WeightGradientIsTheSameForAnyThreadCount) {
  Tensor x = randn64({20, 3, 6, 6}, 11).to(DType::Float32), w = randn64({4, 3, 3, 3}, 12).to(DType::Float32);
  Tensor dy = randn64({20, 4, 4, 4}, 13).to(DType::Float32);
  const int saved = kernels::cpu::get_num_threads();
  kernels::cpu::set_num_threads(1);
  Conv2dGrads one = conv2d_backward(x, w, dy, true, {});
  kernels::cpu::set_num_threads(4);
  Conv2dGrads four = conv2d_backward(x, w, dy, true, {});
  kernels::cpu::set_num_threads(saved);
  expect_equal(one.dw, four.dw, "dw");
  expect_equal(one.db, four.db, "db");
  expect_equal(one.dx, four.dx, "dx");
}

TEST(Conv2d, RejectsAChannelMismatchNamingBothShapes) {
  EXPECT_THROW_MSG(
      conv2d_forward(zeros({2, 4, 5, 5}), zeros({8, 3, 3, 3}), Tensor(), {}), std::invalid_argument,
      "conv2d: expected input (N, C, H, W) with C = 3 (weight [8, 3, 3, 3]), got float32[2, 4, 5, 5] on cpu");
  EXPECT_THROW_MSG(conv2d_forward(zeros({2, 3, 5}), zeros({8, 3, 3, 3}), Tensor(), {}), std::invalid_argument,
                   "got float32[2, 3, 5] on cpu");
}

TEST(Conv2d, RejectsBadGroupsBiasKernelAndGrad) {
  EXPECT_THROW_MSG(conv2d_forward(zeros({1, 4, 5, 5}), zeros({3, 2, 3, 3}), Tensor(), {.groups = 2}),
                   std::invalid_argument,
                   "C_out = 3 of weight float32[3, 2, 3, 3] on cpu is not divisible by groups = 2");
  EXPECT_THROW_MSG(conv2d_forward(zeros({1, 3, 5, 5}), zeros({8, 3, 3, 3}), zeros({7}), {}), std::invalid_argument,
                   "conv2d: expected bias float32[8] for weight float32[8, 3, 3, 3] on cpu, got float32[7] on cpu");
  EXPECT_THROW_MSG(conv2d_forward(zeros({1, 3, 2, 2}), zeros({8, 3, 3, 3}), Tensor(), {}), std::invalid_argument,
                   "does not fit input float32[1, 3, 2, 2] on cpu");
  EXPECT_THROW_MSG(conv2d_forward(zeros({1, 3, 5, 5}), zeros({8, 3, 3, 3}), Tensor(), {.stride_h = 0}),
                   std::invalid_argument, "stride (0, 1)");
  EXPECT_THROW_MSG(conv2d_forward(zeros({1, 3, 5, 5}), zeros({8, 3, 3, 3}, DType::Float64), Tensor(), {}),
                   std::invalid_argument, "same dtype");
  EXPECT_THROW_MSG(conv2d_forward(zeros({1, 3, 5, 5}, DType::Int64), zeros({8, 3, 3, 3}), Tensor(), {}),
                   std::invalid_argument,
                   "conv2d: expected input to be float32 or float64, got int64[1, 3, 5, 5] on cpu");
  EXPECT_THROW_MSG(conv2d_backward(zeros({1, 3, 5, 5}), zeros({8, 3, 3, 3}), zeros({1, 8, 2, 2}), true, {}),
                   std::invalid_argument, "conv2d_backward: expected grad_output float32[1, 8, 3, 3]");
}

// bfloat16 x and w (autocast's operands): a float32 y and float32 gradients, the convolution of the
// widened operands: on small integers, the exact integers of the float64 path within 4e-6 of the
// sum of |products| (at most a few thousand here, so any misplaced value, off by 1 or more, fails),
// whichever kernel runs — the bfloat16 ones where kernels::cpu::conv2d_bf16_pays, exact; the
// widened float32 ones elsewhere, Winograd's transforms rounding by about 1e-6 of that sum;
// integer dy is the same rounded to bfloat16 or not. The bias and dy float32, anything else named
// in the error.
TEST(Conv2d, BFloat16OperandsGiveTheFloat32OpOfTheWidenedOperands) {
  constexpr double kWinograd = 4e-6;
  auto small_ints = [](const Shape& shape, uint32_t seed) {  // integers in [-3, 3]
    std::vector<float> v = minidl::testing::values(static_cast<size_t>(shape_numel(shape)), seed);
    for (float& e : v) e = std::round(3.0f * e);
    return from_vector(v, shape);
  };
  std::vector<ConvCase> cases = conv_cases();
  cases.push_back({"16 channels, 3x3, padding 1 (the implicit kernel on AMX)",
                   {2, 16, 6, 7},
                   {8, 16, 3, 3},
                   {.pad_h = 1, .pad_w = 1}});
  for (const ConvCase& c : cases) {
    const Tensor x = small_ints(c.x, 1), w = small_ints(c.w, 2), b = small_ints({c.w[0]}, 3);
    const Tensor x16 = x.to(DType::BFloat16), w16 = w.to(DType::BFloat16);
    const Tensor y = conv2d_forward(x16, w16, b, c.p);
    ASSERT_EQ(y.dtype(), DType::Float32) << c.name;
    auto f64 = [](const Tensor& t) { return t.to(DType::Float64); };
    auto f32 = [](const Tensor& t) { return t.to(DType::Float32); };
    const Tensor y_bound = f32(conv2d_forward(abs(f64(x)), abs(f64(w)), abs(f64(b)), c.p));
    expect_within_product_bound(y, f32(conv2d_forward(f64(x), f64(w), f64(b), c.p)), y_bound, kWinograd, c.name);
    const Tensor dy = small_ints(y.shape(), 4);
    const Conv2dGrads g = conv2d_backward(x16, w16, dy, true, c.p);
    const Conv2dGrads expect = conv2d_backward(f64(x), f64(w), f64(dy), true, c.p);
    const Conv2dGrads bound = conv2d_backward(abs(f64(x)), abs(f64(w)), abs(f64(dy)), true, c.p);
    for (const Tensor* t : {&g.dx, &g.dw, &g.db}) ASSERT_EQ(t->dtype(), DType::Float32) << c.name;
    expect_within_product_bound(g.dx, f32(expect.dx), f32(bound.dx), kWinograd, std::string(c.name) + ", dx");
    expect_within_product_bound(g.dw, f32(expect.dw), f32(bound.dw), kWinograd, std::string(c.name) + ", dw");
    expect_within_product_bound(g.db, f32(expect.db), f32(bound.db), kWinograd, std::string(c.name) + ", db");
  }
  const Tensor x16 = zeros({1, 3, 5, 5}).to(DType::BFloat16), w16 = zeros({8, 3, 3, 3}).to(DType::BFloat16);
  EXPECT_THROW_MSG(conv2d_forward(x16, w16, zeros({8}).to(DType::BFloat16), {}), std::invalid_argument,
                   "conv2d: expected bias float32[8] for weight bfloat16[8, 3, 3, 3] on cpu, got bfloat16[8] on cpu");
  EXPECT_THROW_MSG(conv2d_backward(x16, w16, zeros({1, 8, 3, 3}).to(DType::BFloat16), true, {}), std::invalid_argument,
                   "conv2d_backward: expected grad_output float32[1, 8, 3, 3]");
}

// round_dx: dx rounded to that precision, the bits of round_to(unrounded dx) on every path — the
// bfloat16 kernels' rounded stores (implicit, im2col, 1x1 in place), the widened float32 kernels
// (one input channel, float16 operands), float32 operands — with dw and db untouched.
TEST(Conv2d, RoundedInputGradientIsRoundToOfTheUnroundedOne) {
  std::vector<ConvCase> cases = conv_cases();
  cases.push_back({"16 channels, 3x3, padding 1", {2, 16, 6, 7}, {8, 16, 3, 3}, {.pad_h = 1, .pad_w = 1}});
  cases.push_back({"16 channels, 3x3, stride 2", {2, 16, 9, 9}, {8, 16, 3, 3}, {.stride_h = 2, .stride_w = 2}});
  cases.push_back({"12 channels, 1x1", {2, 12, 5, 6}, {20, 12, 1, 1}, {}});
  cases.push_back({"one channel, 3x3", {3, 1, 9, 9}, {8, 1, 3, 3}, {.pad_h = 1, .pad_w = 1}});
  for (const ConvCase& c : cases)
    for (const DType low : {DType::BFloat16, DType::Float16, DType::Float32}) {
      const Tensor x = randn(c.x, RandomKey{41, 1}).to(low), w = randn(c.w, RandomKey{41, 2}).to(low);
      const Tensor dy = randn(conv2d_forward(x, w, Tensor(), c.p).shape(), RandomKey{41, 3});
      const DType round = low == DType::Float32 ? DType::BFloat16 : low;
      const Conv2dGrads plain = conv2d_backward(x, w, dy, true, c.p);
      const Conv2dGrads rounded = conv2d_backward(x, w, dy, true, c.p, true, round);
      const std::string what = std::string(c.name) + ", " + dtype_name(low) + " operands";
      expect_equal(rounded.dx, round_to(plain.dx, round), what + ": dx");
      expect_equal(rounded.dw, plain.dw, what + ": dw");
      expect_equal(rounded.db, plain.db, what + ": db");
    }
  const Tensor x = zeros({1, 3, 5, 5}), w = zeros({8, 3, 3, 3});
  EXPECT_THROW_MSG(conv2d_backward(x, w, zeros({1, 8, 3, 3}), true, {}, true, DType::Int64), std::invalid_argument,
                   "conv2d_backward: round_dx must be bfloat16, float16 or float32 (none), got int64");
}
