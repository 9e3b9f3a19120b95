// tests/kernels/test_cpu_attention_bf16.cpp — the packed attention with bfloat16 products
// (kernels/cpu/attention_bf16.cpp): a head worked by hand whose weights and gradients land
// between bfloat16 numbers (so the rounding of P and dS shows: exact values, fast kernel and
// reference); the fast kernels against their reference (gemm_bf16_reference per head) on the
// shapes of test_cpu_attention.cpp, unmasked and causal, within a bound derived per element from
// the operands; the same bits with 1 and 2 threads; and the kernels saying where they do not run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "minidl/kernels/cpu/attention.h"
#include "minidl/kernels/cpu/cpu_features.h"
#include "minidl/kernels/cpu/half.h"
#include "minidl/kernels/cpu/parallel.h"
#include "tests/common/testing.h"

namespace {

namespace cpu = minidl::kernels::cpu;
using minidl::testing::values;

#define SKIP_WITHOUT_BF16()                                                                                   \
  if (!cpu::packed_attention_bf16_supported())                                                                \
  GTEST_SKIP() << "no AVX512_BF16 kernels here (the CPU lacks AVX512_BF16, the build does not target it, or " \
                  "MINIDL_CPU_CAPABILITY caps it): autocast's attention takes the float32 kernels"

struct Shape {
  int64_t B, L, H, D;
};
std::string name(const Shape& s, bool causal) {
  return "B=" + std::to_string(s.B) + " L=" + std::to_string(s.L) + " H=" + std::to_string(s.H) +
         " D=" + std::to_string(s.D) + (causal ? " causal" : "");
}

struct Out {
  std::vector<float> P, ctx, dqkv;
};
Out run(bool reference, const Shape& s, const std::vector<float>& qkv, const std::vector<float>& dctx,
        const std::vector<float>* P_in, float scale, bool causal) {
  const int64_t E = s.H * s.D;
  Out o{std::vector<float>(size_t(s.B * s.H * s.L * s.L)), std::vector<float>(size_t(s.B * s.L * E)),
        std::vector<float>(size_t(s.B * s.L * 3 * E))};
  if (reference) {
    cpu::packed_attention_forward_bf16_reference(qkv.data(), s.B, s.L, s.H, s.D, scale, o.P.data(), o.ctx.data(),
                                                 causal);
  } else {
    EXPECT_TRUE(
        cpu::packed_attention_forward_bf16(qkv.data(), s.B, s.L, s.H, s.D, scale, o.P.data(), o.ctx.data(), causal));
  }
  const float* P = P_in ? P_in->data() : o.P.data();
  if (reference) {
    cpu::packed_attention_backward_bf16_reference(qkv.data(), P, dctx.data(), s.B, s.L, s.H, s.D, scale, o.dqkv.data(),
                                                  causal);
  } else {
    EXPECT_TRUE(cpu::packed_attention_backward_bf16(qkv.data(), P, dctx.data(), s.B, s.L, s.H, s.D, scale,
                                                    o.dqkv.data(), causal));
  }
  return o;
}

// One head, L = 3, D = 2, scale 1: q rows (0, 1) and k, v rows (1, 0), (0, 0), (0, 0), so every
// score is 0 and every weight 1/3; dctx rows (1, 0). Then dP_ij = [j == 0], rowsum(dP * P) = 1/3,
// dS_i0 = 1/3 * 2/3 = 2/9 and dS_ij = -1/9 for j > 0. In bfloat16, 1/3 = 0.333984375, 2/9 =
// 0.22265625, -1/9 = -0.111328125 (round to nearest), and with those:
//   ctx_i = (1/3)_bf16 v_0 = (0.333984375, 0)          (float32 products: 0.33333334)
//   dq_i  = (2/9)_bf16 k_0 = (0.22265625, 0)
//   dk_j  = 3 (dS_0j)_bf16 (0, 1): (0, 0.66796875), (0, -0.333984375) twice
//   dv_j  = 3 (1/3)_bf16 dctx_0 = (1.001953125, 0)
// Every product and sum is exact in float32, so kernel and reference give these bits.
TEST(CpuAttentionBf16, WeightsAndScoreGradientsAreRoundedToBfloat16ForTheProducts) {
  const Shape s{1, 3, 1, 2};
  // rows: q (2), k (2), v (2)
  const std::vector<float> qkv = {0, 1, 1, 0, 1, 0,  //
                                  0, 1, 0, 0, 0, 0,  //
                                  0, 1, 0, 0, 0, 0};
  const std::vector<float> dctx = {1, 0, 1, 0, 1, 0};
  const std::vector<float> ctx = {0.333984375f, 0, 0.333984375f, 0, 0.333984375f, 0};
  const std::vector<float> dqkv = {0.22265625f, 0, 0, 0.66796875f,   1.001953125f, 0,  //
                                   0.22265625f, 0, 0, -0.333984375f, 1.001953125f, 0,  //
                                   0.22265625f, 0, 0, -0.333984375f, 1.001953125f, 0};
  for (bool reference : {true, false}) {
    SCOPED_TRACE(reference ? "reference" : "kernel");
    if (!reference) SKIP_WITHOUT_BF16();
    const Out o = run(reference, s, qkv, dctx, nullptr, 1.0f, false);
    const char* what = reference ? "reference" : "kernel";
    for (float p : o.P) EXPECT_EQ(p, 1.0f / 3.0f) << what;
    EXPECT_EQ(o.ctx, ctx) << what;
    EXPECT_EQ(o.dqkv, dqkv) << what;
  }
}

// Bounds for C = alpha * op(A) op(B) as the kernels compute it from inputs that differ from the
// reference's only by float32 rounding: per element, 1e-5 of the sum of |terms| (the sums' order)
// plus 2^-8 of the largest |term| (one operand rounded to the neighbouring bfloat16 where its
// float32 value differed across a rounding boundary) plus atol.
struct Bound {
  std::vector<double> sum, max;
  double at(size_t i) const { return 1e-5 * sum[i] + std::ldexp(max[i], -8) + 1e-6; }
};
// terms |a(i, k) b(k, n)| for i < M, n < N, k < K, with a and b given as functions
template <class A, class B> Bound bound(int64_t M, int64_t N, int64_t K, A&& a, B&& b) {
  Bound out{std::vector<double>(size_t(M * N)), std::vector<double>(size_t(M * N))};
  for (int64_t i = 0; i < M; ++i)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        const double t = std::abs(a(i, k) * b(k, n));
        out.sum[size_t(i * N + n)] += t;
        out.max[size_t(i * N + n)] = std::max(out.max[size_t(i * N + n)], t);
      }
  return out;
}

void check_against_reference(bool causal) {
  SKIP_WITHOUT_BF16();
  const Shape shapes[] = {{2, 50, 4, 16}, {1, 1, 1, 16}, {3, 7, 2, 5},  {1, 17, 2, 32}, {2, 33, 1, 24},
                          {1, 65, 3, 8},  {1, 16, 2, 1}, {1, 9, 1, 48}, {1, 64, 2, 16}, {2, 49, 1, 16}};
  for (const Shape& s : shapes) {
    const int64_t E = s.H * s.D, L = s.L, D = s.D, ld = 3 * E;
    const float scale = static_cast<float>(1.0 / std::sqrt(double(D)));
    std::vector<float> qkv = values(size_t(s.B * L * 3 * E), 11), dctx = values(size_t(s.B * L * E), 12);
    for (float& x : qkv) x *= 3.0f;
    const std::string what = name(s, causal);
    const Out ref = run(true, s, qkv, dctx, nullptr, scale, causal);
    const Out got = run(false, s, qkv, dctx, &ref.P, scale, causal);  // the backward on the reference's P
    size_t bad = 0;
    auto expect = [&](float g, float r, double tol, const char* part, int64_t t, int64_t i, int64_t j) {
      if (std::isnan(g) && std::isnan(r)) return;
      if (!(std::abs(double(g) - double(r)) <= tol) && ++bad <= 5)
        ADD_FAILURE() << what << " " << part << " head " << t << " [" << i << ", " << j << "]: " << g
                      << " vs reference " << r << " (bound " << tol << ")";
    };
    for (int64_t t = 0; t < s.B * s.H; ++t) {
      const int64_t b = t / s.H, h = t % s.H;
      auto q = [&](int64_t i, int64_t d) { return double(qkv[size_t(b * L * ld + i * ld + h * D + d)]); };
      auto k = [&](int64_t i, int64_t d) { return q(i, d + E); };
      auto v = [&](int64_t i, int64_t d) { return q(i, d + 2 * E); };
      auto g = [&](int64_t i, int64_t d) { return double(dctx[size_t(b * L * E + i * E + h * D + d)]); };
      auto p = [&](int64_t i, int64_t j) { return double(ref.P[size_t((t * L + i) * L + j)]); };
      // |dS_ij| <= P_ij (|dP_ij| + sum_k P_ik |dP_ik|): the size of dS's terms, cancellation included
      std::vector<double> dp_abs(size_t(L * L)), ds_size(size_t(L * L));
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < L; ++j)
          for (int64_t d = 0; d < D; ++d) dp_abs[size_t(i * L + j)] += std::abs(g(i, d) * v(j, d));
      for (int64_t i = 0; i < L; ++i) {
        double row = 0;
        for (int64_t j = 0; j < L; ++j) row += p(i, j) * dp_abs[size_t(i * L + j)];
        for (int64_t j = 0; j < L; ++j) ds_size[size_t(i * L + j)] = p(i, j) * (dp_abs[size_t(i * L + j)] + row);
      }
      auto ds = [&](int64_t i, int64_t j) { return ds_size[size_t(i * L + j)]; };
      // P: softmax of S summed in another order; its own error as a float32 softmax's
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < L; ++j)
          expect(got.P[size_t((t * L + i) * L + j)], float(p(i, j)), 2e-6 + 1e-5 * p(i, j), "P", t, i, j);
      const Bound ctx_b = bound(L, D, L, p, v);
      const Bound dq_b = bound(L, D, L, ds, k), dk_b = bound(
                                                    L, D, L, [&](int64_t i, int64_t j) { return ds(j, i); }, q);
      const Bound dv_b = bound(
          L, D, L, [&](int64_t i, int64_t j) { return p(j, i); }, g);
      for (int64_t i = 0; i < L; ++i)
        for (int64_t d = 0; d < D; ++d) {
          const size_t e = size_t(i * D + d), c = size_t(b * L * E + i * E + h * D + d),
                       x = size_t(b * L * ld + i * ld + h * D + d);
          expect(got.ctx[c], ref.ctx[c], ctx_b.at(e), "ctx", t, i, d);
          expect(got.dqkv[x], ref.dqkv[x], scale * dq_b.at(e), "dq", t, i, d);
          expect(got.dqkv[x + E], ref.dqkv[x + E], scale * dk_b.at(e), "dk", t, i, d);
          expect(got.dqkv[x + 2 * E], ref.dqkv[x + 2 * E], dv_b.at(e), "dv", t, i, d);
        }
    }
    EXPECT_EQ(bad, 0u) << what;
    if (!causal) continue;
    for (int64_t t = 0; t < s.B * s.H; ++t)  // exact zeros above the diagonal
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = i + 1; j < L; ++j) ASSERT_EQ(got.P[size_t((t * L + i) * L + j)], 0.0f) << what;
  }
}

TEST(CpuAttentionBf16, MatchesReference) { check_against_reference(false); }
TEST(CpuAttentionBf16, CausalMatchesReference) { check_against_reference(true); }

// A bound that lets the rounding go is no test of it: the kernel's ctx against the float32
// products of the same weights (no rounding of P) differs by more than the bound on the ViT's
// shape, somewhere.
TEST(CpuAttentionBf16, DiffersFromFloat32ProductsOfTheSameWeights) {
  SKIP_WITHOUT_BF16();
  const Shape s{2, 50, 4, 16};
  const int64_t E = s.H * s.D;
  std::vector<float> qkv = values(size_t(s.B * s.L * 3 * E), 11);
  for (float& x : qkv) x = cpu::bf16_to_float(cpu::float_to_bf16(3.0f * x));  // q, k, v exact in bfloat16
  std::vector<float> P(size_t(s.B * s.H * s.L * s.L)), ctx(size_t(s.B * s.L * E)), ctx32(ctx.size());
  ASSERT_TRUE(cpu::packed_attention_forward_bf16(qkv.data(), s.B, s.L, s.H, s.D, 0.25f, P.data(), ctx.data()));
  cpu::packed_attention_forward(qkv.data(), s.B, s.L, s.H, s.D, 0.25f, P.data(), ctx32.data());
  double worst = 0;
  for (size_t i = 0; i < ctx.size(); ++i) worst = std::max(worst, std::abs(double(ctx[i]) - double(ctx32[i])));
  EXPECT_GT(worst, 1e-3) << "P does not look rounded to bfloat16 for P v";
}

TEST(CpuAttentionBf16, SameBitsForOneAndTwoThreads) {
  SKIP_WITHOUT_BF16();
  const Shape s{3, 50, 4, 16};
  const int64_t E = s.H * s.D;
  const std::vector<float> qkv = values(size_t(s.B * s.L * 3 * E), 5), dctx = values(size_t(s.B * s.L * E), 6);
  Out o[2];
  const int saved = cpu::get_num_threads();
  for (int threads : {1, 2}) {
    cpu::set_num_threads(threads);
    o[threads - 1] = run(false, s, qkv, dctx, nullptr, 0.25f, false);
  }
  cpu::set_num_threads(saved);
  EXPECT_EQ(o[0].P, o[1].P);
  EXPECT_EQ(o[0].ctx, o[1].ctx);
  EXPECT_EQ(o[0].dqkv, o[1].dqkv);
}

// Where the kernels do not run they say so and write nothing; where they run, they say that too.
TEST(CpuAttentionBf16, RunsExactlyWhereSupported) {
  std::vector<float> qkv(6, 1.0f), P(1, -7.0f), ctx(2, -7.0f), dqkv(6, -7.0f);
  const bool ran = cpu::packed_attention_forward_bf16(qkv.data(), 1, 1, 1, 2, 1.0f, P.data(), ctx.data());
  EXPECT_EQ(ran, cpu::packed_attention_bf16_supported());
  EXPECT_EQ(cpu::packed_attention_backward_bf16(qkv.data(), P.data(), ctx.data(), 1, 1, 1, 2, 1.0f, dqkv.data()), ran);
  if (!cpu::cpu_has_avx512_bf16()) {
    EXPECT_FALSE(ran);
  }
  if (!ran) {
    EXPECT_EQ(P[0], -7.0f);
    EXPECT_EQ(dqkv[0], -7.0f);
  } else {
    EXPECT_EQ(P[0], 1.0f);  // one key
    EXPECT_EQ(ctx[0], 1.0f);
  }
}

}  // namespace
