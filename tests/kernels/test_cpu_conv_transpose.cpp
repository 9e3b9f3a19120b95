// tests/kernels/test_cpu_conv_transpose.cpp — the transposed convolution's fast path for kernel ==
// stride (kernels/cpu/conv_transpose2d.h: one GEMM per image and a scatter; the gather and two
// GEMMs) against its reference (conv2d's col2im input gradient, forward and weight gradient):
// y with and without bias, dx (wanted or not), dw and db, in float and double, for kernels 2 and 3
// (also 3x2), odd image sizes, U-Net's two upsamplings and more images than weight-gradient
// blocks; which shapes take the path; the same bits with 1 and 2 threads; and dy as a slice of a
// larger gradient's channels.
// (tests/autograd/test_layers.cpp checks the op's gradients by float64 finite differences.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "minidl/kernels/cpu/conv_transpose2d.h"
#include "minidl/kernels/cpu/parallel.h"
#include "tests/common/testing.h"

namespace {

using minidl::kernels::cpu::Conv2dShape;
using minidl::kernels::cpu::conv_transpose2d_uses_nonoverlapping;
using minidl::testing::values;

// The transposed convolution x (N, C_in, H_in, W_in) -> y (N, C_out, kH H_in, kW W_in) with stride
// (kH, kW), given as the convolution y -> x
Conv2dShape upsampling(int64_t N, int64_t C_in, int64_t H_in, int64_t W_in, int64_t C_out, int64_t kH, int64_t kW) {
  return {N, C_out, kH * H_in, kW * W_in, C_in, kH, kW, 1, kH, kW, 0, 0, 1, 1, H_in, W_in};
}

// |a - b| <= tol * scale elementwise, scale = max |b| + 1 (the sums behind each element are bounded by it)
template <class T> void expect_close(const std::vector<T>& a, const std::vector<T>& b, double tol, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  double scale = 1;
  for (T v : b) scale = std::max(scale, 1.0 + std::fabs(static_cast<double>(v)));
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol * scale) << what << ", element " << i;
}

struct Sizes {
  size_t x, w, y, b;
};
Sizes sizes(const Conv2dShape& s) {
  return {static_cast<size_t>(s.N * s.O * s.H_out * s.W_out), static_cast<size_t>(s.O * s.C * s.kH * s.kW),
          static_cast<size_t>(s.N * s.C * s.H * s.W), static_cast<size_t>(s.C)};
}

// The fast path against the reference on seeded values: y (with and without bias), dx (wanted or
// not), dw and db
template <class T> void expect_matches_reference(const Conv2dShape& s, double tol) {
  SCOPED_TRACE(::testing::Message() << "N " << s.N << " C_in " << s.O << " " << s.H_out << "x" << s.W_out << " C_out "
                                    << s.C << " kernel " << s.kH << "x" << s.kW
                                    << (sizeof(T) == 8 ? " double" : " float"));
  ASSERT_TRUE(conv_transpose2d_uses_nonoverlapping(s));
  namespace k = minidl::kernels::cpu;
  auto typed = [](const std::vector<float>& v) { return std::vector<T>(v.begin(), v.end()); };
  const Sizes n = sizes(s);
  const std::vector<T> x = typed(values(n.x, 1)), w = typed(values(n.w, 2)), b = typed(values(n.b, 3)),
                       dy = typed(values(n.y, 4));
  for (const T* bias : {b.data(), static_cast<const T*>(nullptr)}) {
    std::vector<T> y(n.y, NAN), ref(n.y, NAN);
    k::conv_transpose2d_forward(x.data(), w.data(), bias, s, y.data());
    k::conv_transpose2d_forward_reference(x.data(), w.data(), bias, s, ref.data());
    expect_close(y, ref, tol, bias ? "y" : "y without bias");
  }
  std::vector<T> dx_ref(n.x, NAN), dw_ref(n.w, NAN), db_ref(n.b, NAN);
  k::conv_transpose2d_backward_reference(x.data(), w.data(), dy.data(), s, dx_ref.data(), dw_ref.data(), db_ref.data());
  for (bool with_dx : {true, false}) {
    std::vector<T> dx(n.x, NAN), dw(n.w, NAN), db(n.b, NAN);
    k::conv_transpose2d_backward(x.data(), w.data(), dy.data(), static_cast<int64_t>(n.y) / s.N, s,
                                 with_dx ? dx.data() : nullptr, dw.data(), db.data());
    if (with_dx) expect_close(dx, dx_ref, tol, "dx");
    expect_close(dw, dw_ref, tol, "dw");
    EXPECT_EQ(db, db_ref);  // conv2d_bias_grad on both paths
  }
}

}  // namespace

TEST(CpuConvTranspose, NonoverlappingMatchesReference) {
  // (N, C_in, H_in, W_in, C_out, kH, kW): U-Net's up2 and up1 (every GEMM side >= 16: the packed
  // GEMM), odd sizes with kernels 2, 3 and 3x2 (sides under 16: gemm()), more images than blocks
  const int64_t cases[][7] = {{2, 64, 7, 7, 32, 2, 2}, {2, 32, 14, 14, 16, 2, 2}, {2, 5, 3, 5, 7, 2, 2},
                              {3, 4, 5, 3, 6, 3, 3},   {2, 16, 7, 9, 24, 3, 3},   {2, 3, 3, 4, 5, 3, 2},
                              {37, 4, 3, 3, 2, 2, 2}};
  for (const auto& c : cases) {
    const Conv2dShape s = upsampling(c[0], c[1], c[2], c[3], c[4], c[5], c[6]);
    expect_matches_reference<float>(s, 2e-5);
    expect_matches_reference<double>(s, 1e-12);
  }
}

TEST(CpuConvTranspose, NonoverlappingOnlyWhereKernelEqualsStride) {
  const Conv2dShape s = upsampling(2, 8, 5, 5, 4, 2, 2);
  EXPECT_TRUE(conv_transpose2d_uses_nonoverlapping(s));
  Conv2dShape t = s;
  t.stride_w = 1, t.W = 6;  // stride 1: the outputs overlap
  EXPECT_FALSE(conv_transpose2d_uses_nonoverlapping(t));
  t = s;
  t.pad_h = 1, t.H = 8;  // padding crops the output
  EXPECT_FALSE(conv_transpose2d_uses_nonoverlapping(t));
  t = s;
  t.W = 11;  // output_padding 1: a column no input reaches
  EXPECT_FALSE(conv_transpose2d_uses_nonoverlapping(t));
  t = s;
  t.dil_h = 2, t.H = 12;
  EXPECT_FALSE(conv_transpose2d_uses_nonoverlapping(t));
  t = s;
  t.groups = 2;
  EXPECT_FALSE(conv_transpose2d_uses_nonoverlapping(t));
  t = s;
  t.kH = 3, t.H = 11;  // kernel 3, stride 2
  EXPECT_FALSE(conv_transpose2d_uses_nonoverlapping(t));
}

TEST(CpuConvTranspose, NonoverlappingSameBitsFor1And2Threads) {
  // 20 images: 10 weight-gradient blocks, several chunks of images in the forward
  namespace k = minidl::kernels::cpu;
  for (const Conv2dShape& s : {upsampling(20, 32, 7, 7, 16, 2, 2), upsampling(20, 5, 5, 3, 7, 3, 3)}) {
    const Sizes n = sizes(s);
    const std::vector<float> x = values(n.x, 5), w = values(n.w, 6), b = values(n.b, 7), dy = values(n.y, 8);
    const int saved = k::get_num_threads();
    std::vector<float> y[2], dx[2], dw[2], db[2];
    for (int t = 0; t < 2; ++t) {
      k::set_num_threads(t + 1);
      y[t].resize(n.y), dx[t].resize(n.x), dw[t].resize(n.w), db[t].resize(n.b);
      k::conv_transpose2d_forward(x.data(), w.data(), b.data(), s, y[t].data());
      k::conv_transpose2d_backward(x.data(), w.data(), dy.data(), static_cast<int64_t>(n.y) / s.N, s, dx[t].data(),
                                   dw[t].data(), db[t].data());
    }
    k::set_num_threads(saved);
    EXPECT_EQ(y[0], y[1]);
    EXPECT_EQ(dx[0], dx[1]);
    EXPECT_EQ(dw[0], dw[1]);
    EXPECT_EQ(db[0], db[1]);
  }
}

TEST(CpuConvTranspose, GradientOfAChannelSliceIsReadInPlace) {
  // dy as channels [C_out, 2 C_out) of a (N, 3 C_out, H, W) gradient (torch.cat's backward): the
  // same gradients as from its contiguous copy, on the fast path (read in place) and the general
  // one (kernel 3, stride 2: copied first)
  namespace k = minidl::kernels::cpu;
  Conv2dShape general = upsampling(3, 4, 3, 5, 6, 3, 3);
  general.stride_h = general.stride_w = 2, general.H = 7, general.W = 11;
  for (const Conv2dShape& s : {upsampling(3, 4, 3, 5, 6, 2, 2), general}) {
    SCOPED_TRACE(::testing::Message() << "kernel " << s.kH << " stride " << s.stride_h);
    const Sizes n = sizes(s);
    const int64_t image = s.C * s.H * s.W;
    const std::vector<float> x = values(n.x, 9), w = values(n.w, 10), wide = values(n.y * 3, 11);
    std::vector<float> dy(n.y);  // the slice, packed
    for (int64_t i = 0; i < s.N; ++i) std::copy_n(wide.begin() + (3 * i + 1) * image, image, dy.begin() + i * image);
    std::vector<float> dx(n.x, NAN), dw(n.w, NAN), db(n.b, NAN), dx_ref(n.x, NAN), dw_ref(n.w, NAN), db_ref(n.b, NAN);
    k::conv_transpose2d_backward(x.data(), w.data(), wide.data() + image, 3 * image, s, dx.data(), dw.data(),
                                 db.data());
    k::conv_transpose2d_backward(x.data(), w.data(), dy.data(), image, s, dx_ref.data(), dw_ref.data(), db_ref.data());
    EXPECT_EQ(dx, dx_ref);
    EXPECT_EQ(dw, dw_ref);
    EXPECT_EQ(db, db_ref);
  }
}
