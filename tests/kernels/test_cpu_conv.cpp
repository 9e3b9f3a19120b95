// tests/kernels/test_cpu_conv.cpp — the Winograd F(2x2, 3x3) convolution (kernels/cpu/
// conv2d_winograd.h) against im2col + GEMM (conv2d_forward_im2col / conv2d_backward_im2col in
// kernels/cpu/conv2d.h), forward with and without bias and the input gradient, for padding 0, 1
// and 2 and odd image sizes (ragged tiles at the edges), and the same bits with 1 and 2 threads.
// (tests/tensor/test_ops_conv.cpp checks the dispatching op against a naive direct convolution.)
#include <gtest/gtest.h>

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

// |a - b| <= tol * (1 + |b|) elementwise
void expect_close(const std::vector<float>& a, const std::vector<float>& b, double tol, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], tol * (1 + std::fabs(b[i]))) << what << ", element " << i;
}

}  // namespace

TEST(CpuConv, WinogradMatchesIm2colGemm) {
  // (N, C, H, W, O, pad): the reference CNN's second layer, odd sizes, every padding
  const int64_t cases[][6] = {{2, 32, 14, 14, 64, 1}, {3, 9, 7, 10, 12, 1}, {2, 8, 5, 6, 8, 0},
                              {1, 10, 6, 5, 9, 2},    {9, 8, 3, 3, 8, 1},   {2, 16, 3, 9, 11, 0}};
  for (const auto& c : cases) {
    const Conv2dShape s = shape(c[0], c[1], c[2], c[3], c[4], c[5]);
    ASSERT_TRUE(minidl::kernels::cpu::conv2d_uses_winograd(s));
    const size_t x_n = static_cast<size_t>(s.N * s.C * s.H * s.W), y_n = static_cast<size_t>(s.N * s.O * s.H_out * s.W_out);
    const std::vector<float> x = values(x_n, 1), w = values(static_cast<size_t>(s.O * s.C * 9), 2),
                             b = values(static_cast<size_t>(s.O), 3), dy = values(y_n, 4);
    for (const float* bias : {b.data(), static_cast<const float*>(nullptr)}) {
      std::vector<float> y(y_n, NAN), ref(y_n, NAN);
      minidl::kernels::cpu::conv2d_forward(x.data(), w.data(), bias, s, y.data());
      minidl::kernels::cpu::conv2d_forward_im2col(x.data(), w.data(), bias, s, ref.data());
      expect_close(y, ref, 2e-5, "forward");
    }
    std::vector<float> dx(x_n, NAN), dw(w.size()), db(b.size()), dx_ref(x_n), dw_ref(w.size()), db_ref(b.size());
    minidl::kernels::cpu::conv2d_backward(x.data(), w.data(), dy.data(), s, dx.data(), dw.data(), db.data());
    minidl::kernels::cpu::conv2d_backward_im2col(x.data(), w.data(), dy.data(), s, dx_ref.data(), dw_ref.data(),
                                                 db_ref.data());
    expect_close(dx, dx_ref, 2e-5, "dx");
    EXPECT_EQ(dw, dw_ref) << "dw: the same im2col + GEMM on both paths";
    EXPECT_EQ(db, db_ref);
  }
}

TEST(CpuConv, WinogradIsNotUsedOutsideItsShapes) {
  Conv2dShape s = shape(2, 8, 6, 6, 8, 1);
  EXPECT_TRUE(minidl::kernels::cpu::conv2d_uses_winograd(s));
  Conv2dShape t = s;
  t.C = 1;  // the reference CNN's first layer: im2col + GEMM
  EXPECT_FALSE(minidl::kernels::cpu::conv2d_uses_winograd(t));
  t = s;
  t.stride_h = 2;
  EXPECT_FALSE(minidl::kernels::cpu::conv2d_uses_winograd(t));
  t = s;
  t.groups = 2;
  EXPECT_FALSE(minidl::kernels::cpu::conv2d_uses_winograd(t));
  t = s;
  t.pad_w = 0;
  EXPECT_FALSE(minidl::kernels::cpu::conv2d_uses_winograd(t));
}

TEST(CpuConv, WinogradSameBitsFor1And2Threads) {
  const Conv2dShape s = shape(20, 16, 9, 9, 24, 1);  // 3 chunks of images
  const size_t x_n = static_cast<size_t>(s.N * s.C * s.H * s.W), y_n = static_cast<size_t>(s.N * s.O * s.H_out * s.W_out);
  const std::vector<float> x = values(x_n, 5), w = values(static_cast<size_t>(s.O * s.C * 9), 6),
                           b = values(static_cast<size_t>(s.O), 7), dy = values(y_n, 8);
  const int saved = minidl::kernels::cpu::get_num_threads();
  std::vector<float> y[2], dx[2];
  for (int t = 0; t < 2; ++t) {
    minidl::kernels::cpu::set_num_threads(t + 1);
    y[t].resize(y_n);
    dx[t].resize(x_n);
    std::vector<float> dw(w.size());
    minidl::kernels::cpu::conv2d_forward(x.data(), w.data(), b.data(), s, y[t].data());
    minidl::kernels::cpu::conv2d_backward(x.data(), w.data(), dy.data(), s, dx[t].data(), dw.data(),
                                          static_cast<float*>(nullptr));
  }
  minidl::kernels::cpu::set_num_threads(saved);
  EXPECT_EQ(y[0], y[1]);
  EXPECT_EQ(dx[0], dx[1]);
}
