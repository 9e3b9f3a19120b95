// tests/kernels/test_cpu_group_norm.cpp — the fused float group norm kernels
// (kernels/cpu/group_norm.h) against their plain double references: y, mean, rstd, dx, dweight,
// dbias for groups of one and several channels, planes whose length is and is not a multiple of
// 16 (the kernels' lanes), with and without weight / bias, inputs far from zero mean; the same
// bits with 1 and 2 threads; the ReLU's mask in the backward; and the reference against values
// worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "minidl/kernels/cpu/group_norm.h"
#include "minidl/kernels/cpu/parallel.h"
#include "tests/common/testing.h"

namespace {

namespace cpu = minidl::kernels::cpu;
using minidl::testing::values;

struct Shape {
  int64_t N, C, S, G;
};

std::string name(const Shape& s) {
  return "N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) + " S=" + std::to_string(s.S) +
         " G=" + std::to_string(s.G);
}

std::vector<float> inputs(size_t n, uint32_t seed, double scale, double offset) {
  std::vector<float> v = values(n, seed);
  for (float& x : v) x = static_cast<float>(offset + scale * x);
  return v;
}

// |a - b| <= atol + rtol * |b| everywhere, the worst reported
template <class A, class B>
void expect_close(const std::vector<A>& a, const std::vector<B>& b, double rtol, double atol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  size_t bad = 0, worst = 0;
  double worst_excess = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double excess = std::abs(double(a[i]) - double(b[i])) - (atol + rtol * std::abs(double(b[i])));
    if (!(excess <= 0)) {
      ++bad;
      if (!(excess <= worst_excess)) worst_excess = excess, worst = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": worst at " << worst << ": " << a[worst] << " vs reference " << b[worst];
}

struct Out {
  std::vector<float> y, mean, rstd, dx;
  std::vector<double> dw, db;
};

// relu: group norm + ReLU forward, and a backward that masks dy by the ReLU; relu_backward_off:
// the backward without the mask (on a dy masked by the caller)
Out run(const Shape& s, const std::vector<float>& x, const std::vector<float>& dy, const float* w, const float* b,
        bool fast, bool relu = false, bool relu_backward_off = false) {
  const size_t n = size_t(s.N * s.C * s.S), groups = size_t(s.N * s.G), C = size_t(s.C);
  Out o{std::vector<float>(n), std::vector<float>(groups), std::vector<float>(groups),
        std::vector<float>(n), std::vector<double>(C),     std::vector<double>(C)};
  std::vector<double> part(size_t(2 * s.N * s.C));
  const bool mask = relu && !relu_backward_off;
  if (fast) {
    cpu::group_norm_forward(x.data(), s.N, s.C, s.S, s.G, w, b, 1e-5, o.y.data(), o.mean.data(), o.rstd.data(), relu);
    cpu::group_norm_backward(dy.data(), x.data(), s.N, s.C, s.S, s.G, o.mean.data(), o.rstd.data(), w, o.dx.data(),
                             part.data(), o.dw.data(), o.db.data(), b, mask);
  } else {
    cpu::group_norm_forward_reference(x.data(), s.N, s.C, s.S, s.G, w, b, 1e-5, o.y.data(), o.mean.data(),
                                      o.rstd.data(), relu);
    cpu::group_norm_backward_reference(dy.data(), x.data(), s.N, s.C, s.S, s.G, o.mean.data(), o.rstd.data(), w,
                                       o.dx.data(), o.dw.data(), o.db.data(), b, mask);
  }
  return o;
}

// One test case's inputs: x (offset and scaled), dy, and weight / bias (null without the affine)
struct Case {
  std::vector<float> x, dy, w, b;
  bool affine;
  const float* wp() const { return affine ? w.data() : nullptr; }
  const float* bp() const { return affine ? b.data() : nullptr; }
};
Case make_case(const Shape& s, double offset, bool affine, uint32_t seed, double weight_offset) {
  const size_t n = size_t(s.N * s.C * s.S);
  return {inputs(n, seed, 1.5, offset), inputs(n, seed + 1, 1.0, 0.0),
          inputs(size_t(s.C), seed + 2, 1.0, weight_offset), inputs(size_t(s.C), seed + 3, 1.0, 0.0), affine};
}

}  // namespace

// Tolerances: y and dx are written as x * a + b in float from double coefficients, so they err by
// a few float ulps of the larger of x * a and b (|mean| * rstd here up to 3), not of the result.
TEST(CpuGroupNorm, FloatMatchesReference) {
  const Shape shapes[] = {{2, 16, 784, 4}, {3, 6, 49, 3}, {1, 8, 7, 1}, {2, 4, 33, 4}, {4, 64, 1, 8}, {1, 2, 16, 2}};
  for (const Shape& s : shapes)
    for (const double offset : {0.0, 3.0})
      for (const bool affine : {true, false}) {
        const Case k = make_case(s, offset, affine, 1, 1.0);
        const Out ref = run(s, k.x, k.dy, k.wp(), k.bp(), false), got = run(s, k.x, k.dy, k.wp(), k.bp(), true);
        const std::string what = name(s) + " offset " + std::to_string(offset) + (affine ? " affine" : "");
        expect_close(got.mean, ref.mean, 1e-6, 1e-7, "mean " + what);
        expect_close(got.rstd, ref.rstd, 1e-6, 0, "rstd " + what);
        expect_close(got.y, ref.y, 1e-5, 4e-6, "y " + what);
        expect_close(got.dx, ref.dx, 1e-5, 2e-5, "dx " + what);
        expect_close(got.dw, ref.dw, 1e-9, 1e-9, "dweight " + what);
        expect_close(got.db, ref.db, 1e-12, 1e-12, "dbias " + what);
      }
}

TEST(CpuGroupNorm, SameBitsForOneAndTwoThreads) {
  const Shape s{8, 32, 196, 4};
  const size_t n = size_t(s.N * s.C * s.S);
  const std::vector<float> x = inputs(n, 5, 2.0, 0.5), dy = inputs(n, 6, 1.0, 0.0), w = inputs(32, 7, 1.0, 1.0),
                           b = inputs(32, 8, 1.0, 0.0);
  const int saved = cpu::get_num_threads();
  cpu::set_num_threads(1);
  const Out one = run(s, x, dy, w.data(), b.data(), true);
  cpu::set_num_threads(2);
  const Out two = run(s, x, dy, w.data(), b.data(), true);
  cpu::set_num_threads(saved);
  EXPECT_EQ(std::memcmp(one.y.data(), two.y.data(), n * sizeof(float)), 0) << "y";
  EXPECT_EQ(std::memcmp(one.dx.data(), two.dx.data(), n * sizeof(float)), 0) << "dx";
  EXPECT_EQ(std::memcmp(one.dw.data(), two.dw.data(), 32 * sizeof(double)), 0) << "dweight";
  EXPECT_EQ(std::memcmp(one.db.data(), two.db.data(), 32 * sizeof(double)), 0) << "dbias";
}

// With a ReLU after the group norm, the backward masks dy where the forward's output is <= 0 (it
// rebuilds that output from x): the same bits as the backward without the mask on dy masked by
// the output the forward wrote, as relu_backward masks it. Fast kernels and reference, inputs
// centred and offset, with and without the affine (the bias moves the mask).
TEST(CpuGroupNorm, ReluBackwardMasksWhereTheForwardsOutputIsNotPositive) {
  const Shape shapes[] = {{2, 16, 784, 4}, {3, 6, 49, 3}, {2, 4, 33, 4}, {4, 64, 1, 8}};
  for (const Shape& s : shapes)
    for (const double offset : {0.0, 3.0})
      for (const bool affine : {true, false})
        for (const bool fast : {true, false}) {
          const size_t n = size_t(s.N * s.C * s.S);
          const Case k = make_case(s, offset, affine, 9, 0.5);
          const Out fused = run(s, k.x, k.dy, k.wp(), k.bp(), fast, true);
          std::vector<float> masked(n);
          size_t dropped = 0;
          for (size_t i = 0; i < n; ++i) {
            masked[i] = cpu::relu_grad_bits(fused.y[i], k.dy[i]);
            dropped += fused.y[i] <= 0;
          }
          const Out plain = run(s, k.x, masked, k.wp(), k.bp(), fast, true, true);
          const std::string what = name(s) + " offset " + std::to_string(offset) + (affine ? " affine" : "") +
                                   (fast ? " fast" : " reference");
          EXPECT_GT(dropped, n / 5) << what;  // the mask is not all ones
          EXPECT_LT(dropped, n - n / 5) << what;
          EXPECT_EQ(std::memcmp(fused.dx.data(), plain.dx.data(), n * sizeof(float)), 0) << "dx " << what;
          EXPECT_EQ(std::memcmp(fused.dw.data(), plain.dw.data(), size_t(s.C) * sizeof(double)), 0)
              << "dweight " << what;
          EXPECT_EQ(std::memcmp(fused.db.data(), plain.db.data(), size_t(s.C) * sizeof(double)), 0) << "dbias " << what;
        }
}

// One group of two channels of two values, x = (1, 2 | 3, 6), weight (2, -1), bias (0, 1), eps 0:
// mean 3, variance (4 + 1 + 0 + 9) / 4 = 3.5, xhat = (-2, -1, 0, 3) / sqrt(3.5). With dy = (1, 0 | 0, 1):
// dbias = (1, 1), dweight = (xhat0, xhat3) = (-2, 3) / sqrt(3.5); g = dy * w = (2, 0, 0, -1),
// mean(g) = 0.25, mean(g * xhat) = (-4 - 3) / (4 sqrt(3.5)), dx = rstd (g - 0.25 - xhat mean(g xhat)).
TEST(CpuGroupNorm, ReferenceMatchesHandComputedValues) {
  const double x[] = {1, 2, 3, 6}, w[] = {2, -1}, b[] = {0, 1}, dy[] = {1, 0, 0, 1};
  double y[4], mean, rstd, dx[4], dw[2], db[2];
  cpu::group_norm_forward_reference(x, 1, 2, 2, 1, w, b, 0.0, y, &mean, &rstd);
  const double r = 1 / std::sqrt(3.5), xhat[] = {-2 * r, -r, 0, 3 * r};
  EXPECT_DOUBLE_EQ(mean, 3);
  EXPECT_DOUBLE_EQ(rstd, r);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], xhat[i] * w[i / 2] + b[i / 2], 1e-15) << i;
  cpu::group_norm_backward_reference(dy, x, 1, 2, 2, 1, &mean, &rstd, w, dx, dw, db);
  const double g[] = {2, 0, 0, -1}, mgx = (-4 * r - 3 * r) / 4;
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(dx[i], r * (g[i] - 0.25 - xhat[i] * mgx), 1e-15) << i;
  EXPECT_NEAR(dw[0], -2 * r, 1e-15);
  EXPECT_NEAR(dw[1], 3 * r, 1e-15);
  EXPECT_DOUBLE_EQ(db[0], 1);
  EXPECT_DOUBLE_EQ(db[1], 1);
}
