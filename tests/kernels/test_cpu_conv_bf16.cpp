// tests/kernels/test_cpu_conv_bf16.cpp — the bfloat16 convolution's two kernels (kernels/cpu/
// conv2d_bf16.h: im2col + the bf16 GEMM, and the implicit GEMM on AMX tiles) and their dispatch,
// against im2col + the float32 GEMM on the widened operands (conv2d_forward_reference /
// conv2d_backward_reference in kernels/cpu/conv2d.h): bit for bit on small integers (every product
// and sum exact, so any misplaced value shows), within float32 rounding on general values; forward
// with and without bias, the input and weight gradients (and none for dx), over 3x3 with padding,
// one input channel, stride 2 on odd sizes, dilation, 5x5, 1x1, channels and sizes off the 32-wide
// tiles, and more images than weight-gradient blocks; the same bits with 1 and 2 threads; and which
// shapes each takes. A kernel's tests are skipped, saying so, on a CPU that lacks what it needs
// (the im2col one: a bfloat16 GEMM; the implicit one: AMX).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "minidl/kernels/cpu/conv2d.h"
#include "minidl/kernels/cpu/conv2d_bf16.h"
#include "minidl/kernels/cpu/half_span.h"
#include "minidl/kernels/cpu/gemm_bf16.h"
#include "minidl/kernels/cpu/half.h"
#include "minidl/kernels/cpu/parallel.h"
#include "tests/common/testing.h"

namespace {

namespace k = minidl::kernels::cpu;
using k::Conv2dShape;

Conv2dShape conv_shape(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t kernel, int64_t stride,
                       int64_t pad, int64_t dil) {
  const int64_t span = dil * (kernel - 1) + 1;
  return {N,
          C,
          H,
          W,
          O,
          kernel,
          kernel,
          1,
          stride,
          stride,
          pad,
          pad,
          dil,
          dil,
          (H + 2 * pad - span) / stride + 1,
          (W + 2 * pad - span) / stride + 1};
}

std::string what(const Conv2dShape& s) {
  return "N " + std::to_string(s.N) + " C " + std::to_string(s.C) + " " + std::to_string(s.H) + "x" +
         std::to_string(s.W) + " O " + std::to_string(s.O) + " k " + std::to_string(s.kH) + " stride " +
         std::to_string(s.stride_h) + " pad " + std::to_string(s.pad_h) + " dil " + std::to_string(s.dil_h);
}

// n values rounded to bf16: pseudo-random in [-1, 1), or integers in [-3, 3] when small_ints; the
// bits and the widened floats
struct Bf16Values {
  std::vector<uint16_t> bits;
  std::vector<float> wide;
  Bf16Values(size_t n, uint32_t stream, bool small_ints) : bits(n), wide(n) {
    const std::vector<float> v = minidl::testing::values(n, stream);
    for (size_t i = 0; i < n; ++i) {
      bits[i] = k::float_to_bf16(small_ints ? std::round(3.0f * v[i]) : v[i]);
      wide[i] = k::bf16_to_float(bits[i]);
    }
  }
};

// Every element equal (small integers), or within rel * (sum of |terms|) where the float32
// reference's largest value stands in for that sum's scale.
void expect_matches(const std::vector<float>& got, const std::vector<float>& ref, bool exact, const std::string& name) {
  ASSERT_EQ(got.size(), ref.size());
  double scale = 1;
  for (float r : ref) scale = std::max(scale, double(std::fabs(r)));
  for (size_t i = 0; i < got.size(); ++i) {
    if (exact)
      ASSERT_EQ(got[i], ref[i]) << name << ", element " << i;
    else
      ASSERT_NEAR(got[i], ref[i], 1e-5 * scale) << name << ", element " << i;
  }
}

// A kernel pair: forward and backward, as conv2d_bf16.h declares them.
struct Kernel {
  const char* name;
  bool (*forward)(const uint16_t*, const uint16_t*, const float*, const Conv2dShape&, float*);
  bool (*backward)(const uint16_t*, const uint16_t*, const uint16_t*, const Conv2dShape&, float*, float*, bool);
};
const Kernel kDispatch{"conv2d_bf16", k::conv2d_bf16_forward, k::conv2d_bf16_backward};
const Kernel kIm2col{"im2col", k::conv2d_bf16_im2col_forward, k::conv2d_bf16_im2col_backward};
const Kernel kImplicit{"implicit", k::conv2d_bf16_implicit_forward, k::conv2d_bf16_implicit_backward};

void check(const Kernel& kernel, const Conv2dShape& s, bool with_bias, bool with_dx, bool small_ints) {
  const size_t x_n = static_cast<size_t>(s.N * s.C * s.H * s.W), w_n = static_cast<size_t>(s.O * s.C * s.kH * s.kW),
               y_n = static_cast<size_t>(s.N * s.O * s.H_out * s.W_out);
  const Bf16Values x(x_n, 1, small_ints), w(w_n, 2, small_ints), dy(y_n, 3, small_ints);
  const std::vector<float> b = minidl::testing::values(static_cast<size_t>(s.O), 4);
  const std::string name = std::string(kernel.name) + ", " + what(s) + (small_ints ? ", small integers" : "");

  std::vector<float> y(y_n, 7.0f), y_ref(y_n);
  ASSERT_TRUE(kernel.forward(x.bits.data(), w.bits.data(), with_bias ? b.data() : nullptr, s, y.data())) << name;
  k::conv2d_forward_reference(x.wide.data(), w.wide.data(), with_bias ? b.data() : nullptr, s, y_ref.data());
  expect_matches(y, y_ref, small_ints, "forward, " + name);

  std::vector<float> dx(with_dx ? x_n : 0, 7.0f), dw(w_n, 7.0f), dx_ref(x_n), dw_ref(w_n);
  ASSERT_TRUE(
      kernel.backward(x.bits.data(), w.bits.data(), dy.bits.data(), s, with_dx ? dx.data() : nullptr, dw.data(), false))
      << name;
  k::conv2d_backward_reference(x.wide.data(), w.wide.data(), dy.wide.data(), s, dx_ref.data(), dw_ref.data(),
                               static_cast<float*>(nullptr));
  expect_matches(dw, dw_ref, small_ints, "weight gradient, " + name);
  if (with_dx) expect_matches(dx, dx_ref, small_ints, "input gradient, " + name);
}

const Conv2dShape kShapes[] = {
    conv_shape(3, 8, 9, 7, 16, 3, 1, 1, 1),  // 3x3, padding 1, odd sizes
    conv_shape(20, 1, 12, 12, 32, 3, 1, 1, 1),  // one input channel (K = 9); 20 images: 2 per weight-gradient block
    conv_shape(2, 24, 11, 13, 40, 3, 2, 1, 1),  // stride 2 on odd sizes
    conv_shape(2, 9, 10, 10, 9, 3, 1, 2, 2),  // dilation 2
    conv_shape(2, 10, 9, 9, 33, 5, 1, 2, 1),  // 5x5
    conv_shape(3, 40, 6, 5, 24, 1, 1, 0, 1),  // 1x1, read in place
    conv_shape(2, 64, 7, 7, 64, 3, 1, 1, 1),  // the reference CNN's second layer's channels
    conv_shape(3, 45, 6, 11, 70, 3, 1, 0, 1),  // channels off the tiles, no padding
    conv_shape(2, 16, 5, 9, 8, 2, 1, 1, 1),  // an even kernel
    conv_shape(2, 12, 5, 37, 20, 3, 1, 1, 1),  // rows wider than 16 (the implicit kernel copies 16 at a time)
};

#define SKIP_WITHOUT_BF16_GEMM() \
  if (!k::gemm_bf16_supported()) GTEST_SKIP() << "no bfloat16 GEMM here (the CPU, or MINIDL_CPU_CAPABILITY)"
#define SKIP_WITHOUT_AMX()           \
  if (!k::gemm_bf16_amx_supported()) \
  GTEST_SKIP() << "no AMX here (the CPU, or MINIDL_CPU_CAPABILITY): the implicit kernel returns false"

}  // namespace

TEST(CpuConvBf16, KernelsMatchReferenceBitForBitOnSmallIntegers) {
  SKIP_WITHOUT_BF16_GEMM();
  for (const Conv2dShape& s : kShapes)
    for (const Kernel* kernel : {&kDispatch, &kIm2col, &kImplicit}) {
      if (kernel == &kImplicit && !k::conv2d_bf16_implicit_applies(s)) continue;
      check(*kernel, s, true, true, true);
      check(*kernel, s, false, false, true);
    }
}

TEST(CpuConvBf16, KernelsMatchReferenceWithinRounding) {
  SKIP_WITHOUT_BF16_GEMM();
  for (const Conv2dShape& s : kShapes)
    for (const Kernel* kernel : {&kIm2col, &kImplicit}) {
      if (kernel == &kImplicit && !k::conv2d_bf16_implicit_applies(s)) continue;
      check(*kernel, s, true, true, false);
    }
}

// round_dx: each kernel stores dx rounded to bfloat16 precision — the bits of its unrounded dx
// rounded after (round_to_bf16_span) — and dw unchanged.
TEST(CpuConvBf16, RoundedInputGradientIsTheUnroundedOneRounded) {
  SKIP_WITHOUT_BF16_GEMM();
  for (const Conv2dShape& s : kShapes)
    for (const Kernel* kernel : {&kDispatch, &kIm2col, &kImplicit}) {
      if (kernel == &kImplicit && !k::conv2d_bf16_implicit_applies(s)) continue;
      const size_t x_n = static_cast<size_t>(s.N * s.C * s.H * s.W), w_n = static_cast<size_t>(s.O * s.C * s.kH * s.kW);
      const Bf16Values x(x_n, 11, false), w(w_n, 12, false),
          dy(static_cast<size_t>(s.N * s.O * s.H_out * s.W_out), 13, false);
      std::vector<float> dx(x_n), dw(w_n), dx_r(x_n, 7.0f), dw_r(w_n, 7.0f);
      ASSERT_TRUE(kernel->backward(x.bits.data(), w.bits.data(), dy.bits.data(), s, dx.data(), dw.data(), false));
      ASSERT_TRUE(kernel->backward(x.bits.data(), w.bits.data(), dy.bits.data(), s, dx_r.data(), dw_r.data(), true));
      k::round_to_bf16_span(dx.data(), dx.data(), static_cast<int64_t>(x_n));
      EXPECT_EQ(dx_r, dx) << kernel->name << ", " << what(s);
      EXPECT_EQ(dw_r, dw) << kernel->name << ", " << what(s);
    }
}

TEST(CpuConvBf16, SameBitsFor1And2Threads) {
  SKIP_WITHOUT_BF16_GEMM();
  const int saved = k::get_num_threads();
  // 19 blocks of 2 images, the last of 1; stride 1 (the implicit kernel where AMX runs) and 2 (im2col)
  for (const Conv2dShape& s : {conv_shape(37, 16, 9, 9, 24, 3, 1, 1, 1), conv_shape(37, 16, 9, 9, 24, 3, 2, 1, 1)}) {
    const size_t x_n = static_cast<size_t>(s.N * s.C * s.H * s.W), w_n = static_cast<size_t>(s.O * s.C * 9),
                 y_n = static_cast<size_t>(s.N * s.O * s.H_out * s.W_out);
    const Bf16Values x(x_n, 5, false), w(w_n, 6, false), dy(y_n, 7, false);
    std::vector<float> y[2], dx[2], dw[2];
    for (int t = 0; t < 2; ++t) {
      k::set_num_threads(t + 1);
      y[t].resize(y_n), dx[t].resize(x_n), dw[t].resize(w_n);
      ASSERT_TRUE(k::conv2d_bf16_forward(x.bits.data(), w.bits.data(), nullptr, s, y[t].data()));
      ASSERT_TRUE(k::conv2d_bf16_backward(x.bits.data(), w.bits.data(), dy.bits.data(), s, dx[t].data(), dw[t].data()));
    }
    k::set_num_threads(saved);
    EXPECT_EQ(y[0], y[1]) << what(s);
    EXPECT_EQ(dx[0], dx[1]) << what(s);
    EXPECT_EQ(dw[0], dw[1]) << what(s);
  }
}

// The bias gradient read from bfloat16 dy: conv2d_bias_grad's bits on the widened values.
TEST(CpuConvBf16, BiasGradientIsTheFloat32OneOfTheWidenedDy) {
  const Conv2dShape s = conv_shape(5, 3, 7, 9, 11, 3, 1, 1, 1);
  const Bf16Values dy(static_cast<size_t>(s.N * s.O * s.H_out * s.W_out), 8, false);
  std::vector<float> db(static_cast<size_t>(s.O)), expect(db.size());
  k::conv2d_bf16_bias_grad(dy.bits.data(), s, db.data());
  k::conv2d_bias_grad(dy.wide.data(), s, expect.data());
  EXPECT_EQ(db, expect);
}

// The implicit kernel: stride 1, one group, a kernel larger than 1x1, 8 or more input channels,
// padding within the dilated kernel's reach, AMX.
TEST(CpuConvBf16, ImplicitAppliesToItsShapesOnly) {
  SKIP_WITHOUT_AMX();
  EXPECT_TRUE(k::conv2d_bf16_implicit_applies(conv_shape(2, 32, 14, 14, 64, 3, 1, 1, 1)));
  EXPECT_TRUE(k::conv2d_bf16_implicit_applies(conv_shape(2, 9, 10, 10, 9, 3, 1, 2, 2)));
  EXPECT_FALSE(k::conv2d_bf16_implicit_applies(conv_shape(2, 32, 14, 14, 64, 3, 2, 1, 1))) << "stride 2";
  EXPECT_FALSE(k::conv2d_bf16_implicit_applies(conv_shape(2, 32, 14, 14, 64, 1, 1, 0, 1))) << "1x1";
  EXPECT_FALSE(k::conv2d_bf16_implicit_applies(conv_shape(2, 4, 14, 14, 64, 3, 1, 1, 1))) << "4 channels";
  EXPECT_FALSE(k::conv2d_bf16_implicit_applies(conv_shape(2, 32, 14, 14, 64, 3, 1, 3, 1))) << "padding 3 on 3x3";
  Conv2dShape grouped = conv_shape(2, 32, 8, 8, 32, 3, 1, 1, 1);
  grouped.groups = 2;
  EXPECT_FALSE(k::conv2d_bf16_implicit_applies(grouped));
  const std::vector<uint16_t> none(1);
  float out = 0;
  EXPECT_FALSE(k::conv2d_bf16_implicit_forward(none.data(), none.data(), nullptr, grouped, &out));
}

// An AMX bfloat16 GEMM, one group, and not the direct kernel's shape (3x3 stride 1, fewer than 8
// input channels: there the bf16 kernels lose to the float32 direct one).
TEST(CpuConvBf16, PaysForOneGroupOnAmxButNotForTheDirectShape) {
  const bool amx = k::gemm_bf16_amx_supported();
  EXPECT_EQ(k::conv2d_bf16_pays(conv_shape(2, 32, 14, 14, 64, 3, 1, 1, 1)), amx) << "3x3 stride 1 (implicit)";
  EXPECT_EQ(k::conv2d_bf16_pays(conv_shape(2, 32, 16, 16, 64, 3, 2, 1, 1)), amx) << "stride-2 3x3";
  EXPECT_EQ(k::conv2d_bf16_pays(conv_shape(2, 40, 6, 5, 24, 1, 1, 0, 1)), amx) << "1x1";
  EXPECT_EQ(k::conv2d_bf16_pays(conv_shape(2, 1, 28, 28, 64, 4, 4, 0, 1)), amx) << "4x4 stride-4 patches";
  EXPECT_FALSE(k::conv2d_bf16_pays(conv_shape(2, 1, 28, 28, 32, 3, 1, 1, 1))) << "the direct kernel's";
  Conv2dShape grouped = conv_shape(2, 8, 8, 8, 8, 3, 2, 1, 1);
  grouped.groups = 2;
  EXPECT_FALSE(k::conv2d_bf16_pays(grouped));
  grouped.groups = 8;
  EXPECT_FALSE(k::conv2d_bf16_pays(grouped));
}
