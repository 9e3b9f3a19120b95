// tests/kernels/test_cpu_conv.cpp — the Winograd convolution (kernels/cpu/conv2d_winograd.h:
// F(4x4, 3x3) forward and input gradient, F(2x2, 3x3) weight gradient) and the direct few-channel weight gradient (kernels/cpu/conv2d_direct.h)
// against im2col + GEMM (conv2d_forward_reference / conv2d_backward_reference in
// kernels/cpu/conv2d.h): forward with and without bias, the input, weight and bias gradients, for
// padding 0 to 3, odd image sizes (ragged tiles and vectors at the edges) and more images than
// weight-gradient blocks; which shapes take which path; and the same bits with 1 and 2 threads.
// The depthwise kernel (kernels/cpu/conv2d_depthwise.h) likewise, for any kernel size, stride 1 to
// 3, padding 0 to 3 and channel multipliers; the 1x1 path (no im2col copy) bit for bit but for
// the weight gradient of small images (several images per GEMM: within rounding); the
// general im2col path as run (packed GEMMs) on strided, 5x5, dilated and grouped shapes.
// (tests/tensor/test_ops_conv.cpp checks the dispatching op against a naive direct convolution.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "minidl/kernels/cpu/conv2d.h"
#include "minidl/kernels/cpu/parallel.h"
#include "tests/common/testing.h"

namespace {

using minidl::kernels::cpu::Conv2dShape;
using minidl::testing::values;

Conv2dShape shape(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t pad) {
  return {N, C, H, W, O, 3, 3, 1, 1, 1, pad, pad, 1, 1, H + 2 * pad - 2, W + 2 * pad - 2};
}

// A depthwise convolution (groups = C, O = multiplier * C), kernel (kH, kW), stride, padding
Conv2dShape depthwise_shape(int64_t N, int64_t C, int64_t H, int64_t W, int64_t multiplier, int64_t kH, int64_t kW,
                            int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w) {
  return {N,
          C,
          H,
          W,
          multiplier * C,
          kH,
          kW,
          C,
          stride_h,
          stride_w,
          pad_h,
          pad_w,
          1,
          1,
          (H + 2 * pad_h - kH) / stride_h + 1,
          (W + 2 * pad_w - kW) / stride_w + 1};
}

size_t weight_numel(const Conv2dShape& s) { return static_cast<size_t>(s.O * (s.C / s.groups) * s.kH * s.kW); }

// |a - b| <= tol * (1 + |b|) elementwise
void expect_close(const std::vector<float>& a, const std::vector<float>& b, double tol, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], tol * (1 + std::fabs(b[i]))) << what << ", element " << i;
}

// |a - b| <= tol * scale elementwise, with scale = the sum of |terms| behind each element, bounded
// here by max |b| + 1: a weight gradient sums N * H_out * W_out products in another order on each path
void expect_close_to_max(const std::vector<float>& a, const std::vector<float>& b, double tol, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  double scale = 1;
  for (float v : b) scale = std::max(scale, 1.0 + std::fabs(v));
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol * scale) << what << ", element " << i;
}

// Runs conv2d_forward / conv2d_backward (the dispatching paths) and the im2col + GEMM reference on
// seeded values and compares y (with and without bias), dx (when with_dx), dw and db; y and dx
// within tol, dw within dw_tol (tol when not given).
void expect_matches_reference(const Conv2dShape& s, bool with_dx, double tol, double dw_tol = 0) {
  SCOPED_TRACE(::testing::Message() << "N " << s.N << " C " << s.C << " H " << s.H << " W " << s.W << " O " << s.O
                                    << " kernel " << s.kH << "x" << s.kW << " groups " << s.groups << " stride "
                                    << s.stride_h << "," << s.stride_w << " pad " << s.pad_h << "," << s.pad_w
                                    << (with_dx ? " with dx" : ""));
  const size_t x_n = static_cast<size_t>(s.N * s.C * s.H * s.W),
               y_n = static_cast<size_t>(s.N * s.O * s.H_out * s.W_out);
  const std::vector<float> x = values(x_n, 1), w = values(weight_numel(s), 2), b = values(static_cast<size_t>(s.O), 3),
                           dy = values(y_n, 4);
  for (const float* bias : {b.data(), static_cast<const float*>(nullptr)}) {
    std::vector<float> y(y_n, NAN), ref(y_n, NAN);
    minidl::kernels::cpu::conv2d_forward(x.data(), w.data(), bias, s, y.data());
    minidl::kernels::cpu::conv2d_forward_reference(x.data(), w.data(), bias, s, ref.data());
    expect_close(y, ref, tol, "forward");
  }
  std::vector<float> dx(with_dx ? x_n : 0, NAN), dw(w.size(), NAN), db(b.size(), NAN), dx_ref(x_n), dw_ref(w.size()),
      db_ref(b.size());
  minidl::kernels::cpu::conv2d_backward(x.data(), w.data(), dy.data(), s, with_dx ? dx.data() : nullptr, dw.data(),
                                        db.data());
  minidl::kernels::cpu::conv2d_backward_reference(x.data(), w.data(), dy.data(), s, dx_ref.data(), dw_ref.data(),
                                                  db_ref.data());
  if (with_dx) expect_close(dx, dx_ref, tol, "dx");
  expect_close_to_max(dw, dw_ref, dw_tol > 0 ? dw_tol : tol, "dw");
  expect_close_to_max(db, db_ref, 1e-6, "db");  // summed in double on every path
}

}  // namespace

TEST(CpuConv, WinogradMatchesIm2colGemm) {
  // (N, C, H, W, O, pad): the reference CNN's second layer, odd sizes, every padding, more chunks
  // of images (8 each) than weight-gradient blocks (16), and 16 output channels over 32 and 48
  // inputs (the narrow products' several blocks of k, forward and input gradient, with rows left
  // over after the blocks of eight)
  const int64_t cases[][6] = {{2, 32, 14, 14, 64, 1}, {3, 9, 7, 10, 12, 1}, {2, 8, 5, 6, 8, 0},
                              {1, 10, 6, 5, 9, 2},    {9, 8, 3, 3, 8, 1},   {2, 16, 3, 9, 11, 0},
                              {137, 8, 3, 4, 9, 1},   {2, 32, 9, 9, 16, 1}, {3, 16, 7, 9, 40, 1}};
  for (const auto& c : cases) {
    const Conv2dShape s = shape(c[0], c[1], c[2], c[3], c[4], c[5]);
    ASSERT_TRUE(minidl::kernels::cpu::conv2d_uses_winograd(s));
    // y and dx by F(4x4, 3x3), whose transforms scale by up to 8 (their rounding: up to 1e-4 of
    // outputs near 1 here); dw by F(2x2, 3x3)
    expect_matches_reference(s, true, 2e-4, 2e-5);
    expect_matches_reference(s, false, 2e-4, 2e-5);
  }
}

TEST(CpuConv, DirectMatchesIm2colGemm) {
  // (N, C, H, W, O, pad_h, pad_w): the reference CNN's first layer, rows of 1, 16 and 17 outputs
  // (a partial vector), 3 and 7 channels, padding 0 to 3, more images than weight-gradient blocks
  const int64_t cases[][7] = {{3, 1, 28, 28, 32, 1, 1}, {2, 3, 5, 18, 5, 0, 0}, {2, 7, 4, 19, 9, 2, 1},
                              {1, 2, 3, 3, 4, 0, 3},    {35, 1, 6, 7, 3, 1, 1}, {2, 1, 9, 1, 2, 1, 2}};
  for (const auto& c : cases) {
    Conv2dShape s = shape(c[0], c[1], c[2], c[3], c[4], c[5]);
    s.pad_w = c[6];
    s.W_out = s.W + 2 * s.pad_w - 2;
    ASSERT_TRUE(minidl::kernels::cpu::conv2d_uses_direct(s));
    ASSERT_FALSE(minidl::kernels::cpu::conv2d_uses_winograd(s));
    expect_matches_reference(s, false, 2e-5);
    expect_matches_reference(s, true, 2e-5);  // dx wanted: dx by im2col + GEMM, dw and db still direct
  }
}

TEST(CpuConv, DepthwiseMatchesIm2colGemm) {
  // (N, C, H, W, multiplier, kH, kW, stride_h, stride_w, pad_h, pad_w): the small MobileNet's
  // shapes (3x3, stride 1 and 2, padding 1), odd sizes, no padding and padding 2 and 3 (outputs
  // that read only padding), channel multipliers 2 and 3, 5x5 and 1x3 kernels, unequal strides,
  // stride 3 over a 2x2 kernel (inputs no output reads: dx 0 there), more images than blocks,
  // stride 2 on rows of more than 32 (padded rows of several vectors) with padding 1, 2 and 3
  const int64_t cases[][11] = {
      {2, 3, 9, 37, 1, 3, 3, 2, 2, 1, 1},   {2, 2, 8, 40, 1, 5, 5, 2, 2, 2, 2},   {1, 2, 7, 35, 1, 7, 7, 2, 2, 3, 3},
      {2, 32, 32, 32, 1, 3, 3, 1, 1, 1, 1}, {2, 16, 16, 16, 1, 3, 3, 2, 2, 1, 1}, {3, 5, 7, 9, 1, 3, 3, 2, 2, 1, 1},
      {2, 4, 8, 8, 1, 3, 3, 2, 2, 0, 0},    {2, 3, 9, 7, 1, 3, 3, 1, 1, 0, 0},    {1, 3, 6, 5, 2, 3, 3, 1, 1, 2, 2},
      {2, 6, 9, 11, 1, 5, 5, 1, 1, 2, 2},   {2, 3, 10, 7, 3, 3, 3, 2, 1, 1, 0},   {2, 4, 7, 7, 1, 1, 3, 1, 2, 0, 1},
      {2, 3, 10, 7, 1, 2, 2, 3, 3, 0, 0},   {1, 2, 4, 5, 1, 3, 3, 1, 1, 3, 3},    {35, 2, 4, 4, 1, 3, 3, 2, 2, 1, 1}};
  for (const auto& c : cases) {
    const Conv2dShape s = depthwise_shape(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10]);
    ASSERT_TRUE(minidl::kernels::cpu::conv2d_uses_depthwise(s));
    expect_matches_reference(s, true, 2e-5);
    expect_matches_reference(s, false, 2e-5);
  }
}

TEST(CpuConv, Im2colWithPackedGemmsMatchesReference) {
  // The general path as run (conv2d_forward_im2col<true>: float products with every side >= 16 on
  // the packed GEMM) against the reference (gemm()'s choice): ResNet-20's stride-2 3x3 and 1x1
  // convolutions, a 5x5, a dilated and a grouped one, and sides under 16 (gemm() for those)
  using S = Conv2dShape;
  // (N, C, H, W, O, kH, kW, groups, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, H_out, W_out)
  const S cases[] = {
      {3, 16, 32, 32, 32, 3, 3, 1, 2, 2, 1, 1, 1, 1, 16, 16}, {2, 32, 16, 16, 64, 3, 3, 1, 2, 2, 1, 1, 1, 1, 8, 8},
      {2, 16, 15, 13, 32, 1, 1, 1, 2, 2, 0, 0, 1, 1, 8, 7},   {2, 6, 11, 12, 20, 5, 5, 1, 1, 1, 2, 2, 1, 1, 11, 12},
      {2, 16, 12, 12, 24, 3, 3, 1, 1, 1, 2, 2, 2, 2, 12, 12}, {2, 32, 9, 9, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1, 5, 9},
      {17, 3, 8, 8, 5, 3, 3, 1, 2, 2, 1, 1, 1, 1, 4, 4}};
  for (const S& s : cases) {
    ASSERT_FALSE(minidl::kernels::cpu::conv2d_uses_winograd(s) || minidl::kernels::cpu::conv2d_uses_direct(s) ||
                 minidl::kernels::cpu::conv2d_uses_depthwise(s) || minidl::kernels::cpu::conv2d_uses_1x1(s));
    expect_matches_reference(s, true, 2e-5);
  }
}

// conv2d_forward_1x1 / conv2d_backward_1x1 run the reference's GEMMs on x itself instead of its
// im2col copy: the same bits as the reference, in float and double; but the weight gradient of
// images under 256 pixels sums several images per GEMM: the same within rounding (a relative 1e-5
// of the largest element in float, 1e-13 in double)
template <class T> void expect_1x1_equals_reference(const Conv2dShape& s) {
  SCOPED_TRACE(::testing::Message() << "N " << s.N << " C " << s.C << " H " << s.H << " W " << s.W << " O " << s.O
                                    << " groups " << s.groups << (sizeof(T) == 8 ? " double" : " float"));
  ASSERT_TRUE(minidl::kernels::cpu::conv2d_uses_1x1(s));
  auto typed = [](const std::vector<float>& v) { return std::vector<T>(v.begin(), v.end()); };
  const size_t x_n = static_cast<size_t>(s.N * s.C * s.H * s.W), y_n = static_cast<size_t>(s.N * s.O * s.H * s.W);
  const std::vector<T> x = typed(values(x_n, 1)), w = typed(values(weight_numel(s), 2)),
                       b = typed(values(static_cast<size_t>(s.O), 3)), dy = typed(values(y_n, 4));
  std::vector<T> y(y_n, NAN), y_ref(y_n, NAN);
  minidl::kernels::cpu::conv2d_forward(x.data(), w.data(), b.data(), s, y.data());
  minidl::kernels::cpu::conv2d_forward_reference(x.data(), w.data(), b.data(), s, y_ref.data());
  EXPECT_EQ(y, y_ref);
  std::vector<T> dx(x_n, NAN), dw(w.size(), NAN), db(b.size(), NAN), dx_ref(x_n), dw_ref(w.size()), db_ref(b.size());
  minidl::kernels::cpu::conv2d_backward(x.data(), w.data(), dy.data(), s, dx.data(), dw.data(), db.data());
  minidl::kernels::cpu::conv2d_backward_reference(x.data(), w.data(), dy.data(), s, dx_ref.data(), dw_ref.data(),
                                                  db_ref.data());
  EXPECT_EQ(dx, dx_ref);
  EXPECT_EQ(db, db_ref);
  const auto expect_dw = [&](const std::vector<T>& got) {
    if (s.H * s.W >= 256) {
      EXPECT_EQ(got, dw_ref);
      return;
    }
    double scale = 1;
    for (T v : dw_ref) scale = std::max(scale, 1.0 + std::fabs(static_cast<double>(v)));
    const double tol = (sizeof(T) == 8 ? 1e-13 : 1e-5) * scale;
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], dw_ref[i], tol) << "dw, element " << i;
  };
  expect_dw(dw);
  std::fill(dw.begin(), dw.end(), NAN);  // the weight gradient alone
  minidl::kernels::cpu::conv2d_backward(x.data(), w.data(), dy.data(), s, static_cast<T*>(nullptr), dw.data(),
                                        static_cast<T*>(nullptr));
  expect_dw(dw);
}

TEST(CpuConv, OneByOneEqualsIm2colGemm) {
  // (N, C, H, W, O, groups): the small MobileNet's pointwise layers, odd sizes, groups, a 1x1
  // image, more images than weight-gradient blocks, images whose weight gradients are summed one
  // per GEMM (16 x 16) and several per GEMM: 4 x 4 (blocks of 9 images, one GEMM each, the last
  // block 4), 7 x 9 (5 images, a whole block), 8 x 8 (blocks of 13 images in runs of 4, 4, 4, 1)
  const int64_t cases[][6] = {{3, 32, 8, 8, 64, 1}, {2, 6, 5, 7, 9, 3},     {2, 8, 1, 1, 4, 2},
                              {35, 4, 3, 3, 5, 1},  {40, 16, 16, 16, 8, 1}, {130, 24, 4, 4, 40, 1},
                              {70, 6, 7, 9, 10, 2}, {200, 8, 8, 8, 12, 1}};
  for (const auto& c : cases) {
    const Conv2dShape s{c[0], c[1], c[2], c[3], c[4], 1, 1, c[5], 1, 1, 0, 0, 1, 1, c[2], c[3]};
    expect_1x1_equals_reference<float>(s);
    expect_1x1_equals_reference<double>(s);
  }
}

TEST(CpuConv, FastPathsAreUsedOnlyForTheirShapes) {
  using minidl::kernels::cpu::conv2d_uses_direct;
  using minidl::kernels::cpu::conv2d_uses_winograd;
  Conv2dShape s = shape(2, 8, 6, 6, 8, 1);
  EXPECT_TRUE(conv2d_uses_winograd(s));
  EXPECT_FALSE(conv2d_uses_direct(s));
  Conv2dShape t = s;
  t.C = 1;  // the reference CNN's first layer: direct
  EXPECT_FALSE(conv2d_uses_winograd(t));
  EXPECT_TRUE(conv2d_uses_direct(t));
  t.C = 7;
  EXPECT_TRUE(conv2d_uses_direct(t));
  for (int c : {1, 8}) {  // neither path: im2col + GEMM
    t = s;
    t.C = c;
    t.stride_h = 2;
    EXPECT_FALSE(conv2d_uses_winograd(t));
    EXPECT_FALSE(conv2d_uses_direct(t));
    t = s;
    t.C = c;
    t.groups = 2;
    EXPECT_FALSE(conv2d_uses_winograd(t));
    EXPECT_FALSE(conv2d_uses_direct(t));
    t = s;
    t.C = c;
    t.kW = 5;
    EXPECT_FALSE(conv2d_uses_winograd(t));
    EXPECT_FALSE(conv2d_uses_direct(t));
    t = s;
    t.C = c;
    t.dil_w = 2;
    EXPECT_FALSE(conv2d_uses_winograd(t));
    EXPECT_FALSE(conv2d_uses_direct(t));
  }
  t = s;
  t.pad_w = 0;
  EXPECT_FALSE(conv2d_uses_winograd(t));
  // depthwise: groups == C > 1 and O a multiple of C, any kernel, stride and padding; not dilated
  using minidl::kernels::cpu::conv2d_uses_depthwise;
  EXPECT_FALSE(conv2d_uses_depthwise(s));
  t = depthwise_shape(2, 8, 9, 9, 1, 3, 3, 2, 2, 1, 1);
  EXPECT_TRUE(conv2d_uses_depthwise(t));
  EXPECT_FALSE(conv2d_uses_winograd(t));
  EXPECT_FALSE(conv2d_uses_direct(t));
  EXPECT_TRUE(conv2d_uses_depthwise(depthwise_shape(2, 8, 9, 9, 2, 5, 1, 1, 3, 0, 2)));
  t.groups = 4;  // two input channels per group
  EXPECT_FALSE(conv2d_uses_depthwise(t));
  t = depthwise_shape(2, 8, 9, 9, 1, 3, 3, 1, 1, 1, 1);
  t.dil_h = 2;
  t.H_out = 7;
  EXPECT_FALSE(conv2d_uses_depthwise(t));
  EXPECT_FALSE(conv2d_uses_depthwise(depthwise_shape(2, 1, 9, 9, 4, 3, 3, 1, 1, 1, 1)));  // one channel: a plain conv
  // 1x1: stride 1, no padding, not depthwise
  using minidl::kernels::cpu::conv2d_uses_1x1;
  const Conv2dShape one{2, 8, 5, 5, 16, 1, 1, 1, 1, 1, 0, 0, 1, 1, 5, 5};
  EXPECT_TRUE(conv2d_uses_1x1(one));
  EXPECT_FALSE(conv2d_uses_winograd(one) || conv2d_uses_direct(one) || conv2d_uses_depthwise(one));
  t = one;
  t.groups = 8;  // depthwise
  EXPECT_FALSE(conv2d_uses_1x1(t));
  EXPECT_TRUE(conv2d_uses_depthwise(t));
  t = one;
  t.stride_w = 2;
  t.W_out = 3;
  EXPECT_FALSE(conv2d_uses_1x1(t));
  t = one;
  t.pad_h = 1;
  t.H_out = 7;
  EXPECT_FALSE(conv2d_uses_1x1(t));
  EXPECT_FALSE(conv2d_uses_1x1(s));
}

TEST(CpuConv, FastPathsSameBitsFor1And2Threads) {
  // Winograd (3 chunks of images), direct (20 images: 10 weight-gradient blocks), depthwise
  // (stride 1 and 2, with a multiplier), 1x1 (40 images of 4 x 4: two per weight-gradient GEMM)
  for (const Conv2dShape& s :
       {shape(20, 16, 9, 9, 24, 1), shape(20, 1, 9, 21, 24, 1), depthwise_shape(20, 12, 9, 9, 1, 3, 3, 1, 1, 1, 1),
        depthwise_shape(20, 6, 11, 10, 2, 3, 3, 2, 2, 1, 1),
        Conv2dShape{40, 16, 4, 4, 24, 1, 1, 1, 1, 1, 0, 0, 1, 1, 4, 4}}) {
    const size_t x_n = static_cast<size_t>(s.N * s.C * s.H * s.W),
                 y_n = static_cast<size_t>(s.N * s.O * s.H_out * s.W_out);
    const std::vector<float> x = values(x_n, 5), w = values(weight_numel(s), 6),
                             b = values(static_cast<size_t>(s.O), 7), dy = values(y_n, 8);
    const bool with_dx = !minidl::kernels::cpu::conv2d_uses_direct(s);  // direct: dx by im2col + GEMM
    const int saved = minidl::kernels::cpu::get_num_threads();
    std::vector<float> y[2], dx[2], dw[2], db[2];
    for (int t = 0; t < 2; ++t) {
      minidl::kernels::cpu::set_num_threads(t + 1);
      y[t].resize(y_n);
      dx[t].resize(with_dx ? x_n : 0);
      dw[t].resize(w.size());
      db[t].resize(b.size());
      minidl::kernels::cpu::conv2d_forward(x.data(), w.data(), b.data(), s, y[t].data());
      minidl::kernels::cpu::conv2d_backward(x.data(), w.data(), dy.data(), s, with_dx ? dx[t].data() : nullptr,
                                            dw[t].data(), db[t].data());
    }
    minidl::kernels::cpu::set_num_threads(saved);
    EXPECT_EQ(y[0], y[1]);
    EXPECT_EQ(dx[0], dx[1]);
    EXPECT_EQ(dw[0], dw[1]);
    EXPECT_EQ(db[0], db[1]);
  }
}
