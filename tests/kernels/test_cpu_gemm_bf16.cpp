// tests/kernels/test_cpu_gemm_bf16.cpp — the bfloat16 GEMM (kernels/cpu/gemm_bf16.h): the reference
// loop against exact sums of small-integer products, then each packed kernel (AVX512_BF16, AMX)
// against the reference — bit for bit on small integers (every sum exact, so any misplaced operand
// shows), within float32 rounding on general values — over 1x1x1, odd K, M and N off the 14x32
// and 32x32 tiles, all four transpose combinations, leading dimensions wider than the rows (the
// gaps of C untouched), several K blocks and two column blocks, alpha and beta (0: C is
// write-only, a NaN there is ignored), K = 0 and alpha = 0, and the same bits with 1 and 2
// threads; the row sums of a transposed A taken while packing it; and gemm_bf16 runs the AMX
// kernel where the CPU has it. A kernel's tests are skipped,
// saying so, on a CPU without its extension (the kernel then returns false).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "minidl/kernels/cpu/gemm_bf16.h"
#include "minidl/kernels/cpu/half.h"
#include "minidl/kernels/cpu/parallel.h"
#include "tests/common/testing.h"

namespace {

using minidl::kernels::cpu::bf16_to_float;
using minidl::kernels::cpu::float_to_bf16;
using minidl::kernels::cpu::gemm_bf16_reference;

// A packed kernel: its name, the function, and whether it runs on this CPU.
using GemmFn = bool (*)(int64_t, int64_t, int64_t, const uint16_t*, int64_t, bool, const uint16_t*, int64_t, bool,
                        float*, int64_t, float, float, bool);
using GemmBiasFn = bool (*)(int64_t, int64_t, int64_t, const uint16_t*, int64_t, bool, const uint16_t*, int64_t, bool,
                            const float*, float*, int64_t, bool);
using GemmRowSumsFn = bool (*)(int64_t, int64_t, int64_t, const uint16_t*, int64_t, bool, const uint16_t*, int64_t,
                               bool, float*, int64_t, float*);
struct Kernel {
  const char* name;
  GemmFn gemm;
  GemmBiasFn gemm_bias;
  GemmRowSumsFn gemm_row_sums;
  bool (*supported)();
  int64_t k_step_2100;  // the length of its K blocks when K = 2100 (5 blocks of at most 512)
};
const Kernel kKernels[] = {
    {"avx512bf16", minidl::kernels::cpu::gemm_bf16_avx512, minidl::kernels::cpu::gemm_bf16_avx512_bias,
     minidl::kernels::cpu::gemm_bf16_avx512_row_sums, minidl::kernels::cpu::gemm_bf16_avx512_supported, 424},
    {"amx", minidl::kernels::cpu::gemm_bf16_amx, minidl::kernels::cpu::gemm_bf16_amx_bias,
     minidl::kernels::cpu::gemm_bf16_amx_row_sums, minidl::kernels::cpu::gemm_bf16_amx_supported, 448}};

struct Case {
  int64_t M, N, K;
};

constexpr float kSentinel = 12345.0f;  // fills the gaps between rows of C (ldc > N)

// n bf16 values: pseudo-random floats in [-1, 1) (testing::values) rounded to bf16, or integers in [-6, 6] when small_ints
std::vector<uint16_t> bf16_values(size_t n, uint32_t stream, bool small_ints) {
  std::vector<uint16_t> out(n);
  const std::vector<float> v = minidl::testing::values(n, stream);
  for (size_t i = 0; i < n; ++i) out[i] = float_to_bf16(small_ints ? std::round(6.0f * v[i]) : v[i]);
  return out;
}

// One product, shapes as stored: A (M, K) or (K, M), B (K, N) or (N, K), each row `pad` elements
// wider, and C (M, N + pad) whose gaps hold kSentinel (and NaNs at two corners when beta == 0).
struct Operands {
  int64_t M, N, K, lda, ldb, ldc;
  bool ta, tb;
  std::vector<uint16_t> A, B;
  std::vector<float> C;
  Operands(const Case& c, bool ta_, bool tb_, int64_t pad, bool small_ints, float beta)
      : M(c.M),
        N(c.N),
        K(c.K),
        lda((ta_ ? c.M : c.K) + pad),
        ldb((tb_ ? c.K : c.N) + pad),
        ldc(c.N + pad),
        ta(ta_),
        tb(tb_) {
    A = bf16_values(static_cast<size_t>((ta ? K : M) * lda), 1, small_ints);
    B = bf16_values(static_cast<size_t>((tb ? N : K) * ldb), 2, small_ints);
    C = minidl::testing::values(static_cast<size_t>(M * ldc), 3);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < ldc; ++j) {
        float& x = C[static_cast<size_t>(i * ldc + j)];
        x = j >= N ? kSentinel : small_ints ? std::round(8.0f * x) : x;
      }
    if (beta == 0.0f && M > 0 && N > 0) C[0] = C[static_cast<size_t>((M - 1) * ldc + N - 1)] = std::nanf("");
  }
  float a(int64_t i, int64_t k) const { return bf16_to_float(A[static_cast<size_t>(ta ? k * lda + i : i * lda + k)]); }
  float b(int64_t k, int64_t j) const { return bf16_to_float(B[static_cast<size_t>(tb ? j * ldb + k : k * ldb + j)]); }
  std::string what(float alpha, float beta) const {
    return std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) + " ta " + std::to_string(ta) +
           " tb " + std::to_string(tb) + " lda " + std::to_string(lda) + " ldb " + std::to_string(ldb) + " alpha " +
           std::to_string(alpha) + " beta " + std::to_string(beta);
  }
};

// A packed kernel against gemm_bf16_reference on one case: the same bits on small integers, otherwise
// within the rounding of two float32 sums of the same exact products in different orders (each
// at most about K units of 2^-24 times the sum of |products| from the exact sum).
void check(GemmFn gemm, const Case& c, bool ta, bool tb, float alpha, float beta, int64_t pad, bool small_ints) {
  const Operands op(c, ta, tb, pad, small_ints, beta);
  std::vector<float> fast = op.C, ref = op.C;
  ASSERT_TRUE(gemm(op.M, op.N, op.K, op.A.data(), op.lda, ta, op.B.data(), op.ldb, tb, fast.data(), op.ldc, alpha, beta,
                   false));
  gemm_bf16_reference(op.M, op.N, op.K, op.A.data(), op.lda, ta, op.B.data(), op.ldb, tb, ref.data(), op.ldc, alpha,
                      beta);
  for (int64_t i = 0; i < op.M; ++i) {
    for (int64_t j = 0; j < op.N; ++j) {
      const size_t at = static_cast<size_t>(i * op.ldc + j);
      const std::string where = op.what(alpha, beta) + " at (" + std::to_string(i) + ", " + std::to_string(j) + ")";
      ASSERT_FALSE(std::isnan(fast[at])) << where;
      if (small_ints) {
        ASSERT_EQ(fast[at], ref[at]) << where;
        continue;
      }
      double mag = 0;
      for (int64_t k = 0; k < op.K; ++k) mag += std::fabs(double(op.a(i, k)) * double(op.b(k, j)));
      const double old = beta == 0.0f ? 0.0 : std::fabs(double(beta) * double(op.C[at]));
      const double tol = std::ldexp(2.0 * double(op.K) + 8.0, -24) * (std::fabs(double(alpha)) * mag + old);
      ASSERT_NEAR(fast[at], ref[at], tol) << where;
    }
    for (int64_t j = op.N; j < op.ldc; ++j)
      ASSERT_EQ(fast[static_cast<size_t>(i * op.ldc + j)], kSentinel) << op.what(alpha, beta) << ", gap of row " << i;
  }
}

class PackedGemmBf16 : public ::testing::TestWithParam<Kernel> {
 protected:
  void SetUp() override {
    if (!GetParam().supported())
      GTEST_SKIP() << "no " << GetParam().name << " here (the CPU, or MINIDL_CPU_CAPABILITY): gemm_bf16_"
                   << GetParam().name << " returns false, nothing to test";
  }
  GemmFn gemm() const { return GetParam().gemm; }
};

}  // namespace

TEST(CpuGemmBf16, ReferenceIsExactOnSmallIntegers) {
  // integers in [-6, 6] are exact in bf16, and sums of up to 300 of their products exact in float32
  for (const Case& c : {Case{1, 1, 1}, Case{7, 5, 3}, Case{15, 33, 17}, Case{4, 9, 300}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 0.5f}) {
          const Operands op(c, ta, tb, 2, true, beta);
          std::vector<float> C = op.C;
          gemm_bf16_reference(op.M, op.N, op.K, op.A.data(), op.lda, ta, op.B.data(), op.ldb, tb, C.data(), op.ldc,
                              2.0f, beta);
          for (int64_t i = 0; i < op.M; ++i)
            for (int64_t j = 0; j < op.ldc; ++j) {
              const size_t at = static_cast<size_t>(i * op.ldc + j);
              if (j >= op.N) {
                ASSERT_EQ(C[at], kSentinel) << op.what(2.0f, beta) << ", gap of row " << i;
                continue;
              }
              int64_t sum = 0;
              for (int64_t k = 0; k < op.K; ++k)
                sum += static_cast<int64_t>(op.a(i, k)) * static_cast<int64_t>(op.b(k, j));
              const double expect = 2.0 * double(sum) + (beta == 0.0f ? 0.0 : 0.5 * double(op.C[at]));
              ASSERT_EQ(double(C[at]), expect) << op.what(2.0f, beta) << " at (" << i << ", " << j << ")";
            }
        }
}

TEST_P(PackedGemmBf16, MatchesReferenceBitForBitOnSmallIntegers) {
  // 1x1x1, odd K, ragged M and N around the 14x32 and 32x32 tiles, a 16-column panel, two K blocks
  // (the last odd), two column blocks; every transpose, wider leading dimensions, alpha and beta
  const Case cases[] = {{1, 1, 1},    {14, 32, 8},   {15, 33, 17}, {13, 16, 9},  {5, 47, 1},
                        {29, 20, 70}, {30, 50, 601}, {3, 4200, 5}, {33, 31, 64}, {80, 65, 97}};
  for (const Case& c : cases)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (int64_t pad : {0, 3}) {
          check(gemm(), c, ta, tb, 1.0f, 0.0f, pad, true);
          check(gemm(), c, ta, tb, -2.0f, 0.5f, pad, true);
        }
}

TEST_P(PackedGemmBf16, MatchesReferenceWithinRounding) {
  const Case cases[] = {{1, 1, 1},  {7, 5, 3},      {14, 32, 8},   {15, 33, 17}, {17, 16, 9},
                        {5, 47, 1}, {64, 196, 288}, {288, 49, 64}, {130, 20, 70}};
  for (const Case& c : cases)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 1.0f, -0.5f}) check(gemm(), c, ta, tb, beta == 1.0f ? -0.75f : 1.0f, beta, 0, false);
  // wider leading dimensions; three K blocks, the last odd; two column blocks of the packed B
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check(gemm(), {21, 45, 13}, ta, tb, 1.0f, 0.5f, 3, false);
      check(gemm(), {19, 40, 1101}, ta, tb, 1.0f, 0.0f, 1, false);
      check(gemm(), {3, 4200, 5}, ta, tb, 1.0f, 0.25f, 0, false);
    }
}

TEST_P(PackedGemmBf16, EmptyKOrZeroAlphaScalesC) {
  const std::vector<uint16_t> A = bf16_values(12, 4, false), B = bf16_values(12, 5, false);
  for (float beta : {0.0f, 1.0f, 3.0f}) {
    const std::vector<float> C0 = minidl::testing::values(12, 6);
    std::vector<float> C = C0;
    if (beta == 0.0f) C[5] = std::numeric_limits<float>::quiet_NaN();
    ASSERT_TRUE(gemm()(3, 4, 0, A.data(), 1, false, B.data(), 4, false, C.data(), 4, 1.0f, beta, false));
    for (size_t i = 0; i < C.size(); ++i) EXPECT_EQ(C[i], beta * C0[i]) << "K = 0, beta " << beta << ", element " << i;
    C = C0;
    ASSERT_TRUE(gemm()(3, 4, 3, A.data(), 3, false, B.data(), 4, false, C.data(), 4, 0.0f, beta, false));
    for (size_t i = 0; i < C.size(); ++i)
      EXPECT_EQ(C[i], beta * C0[i]) << "alpha 0, beta " << beta << ", element " << i;
  }
}

TEST_P(PackedGemmBf16, SameBitsFor1And2Threads) {
  const int saved = minidl::kernels::cpu::get_num_threads();
  // several row blocks and K blocks (the last odd), every transpose
  for (const Case& c : {Case{300, 70, 1101}, Case{100, 200, 600}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const Operands op(c, ta, tb, 0, false, 0.5f);
        std::vector<float> one = op.C, two = op.C;
        minidl::kernels::cpu::set_num_threads(1);
        ASSERT_TRUE(gemm()(op.M, op.N, op.K, op.A.data(), op.lda, ta, op.B.data(), op.ldb, tb, one.data(), op.ldc, 1.0f,
                           0.5f, false));
        minidl::kernels::cpu::set_num_threads(2);
        ASSERT_TRUE(gemm()(op.M, op.N, op.K, op.A.data(), op.lda, ta, op.B.data(), op.ldb, tb, two.data(), op.ldc, 1.0f,
                           0.5f, false));
        for (size_t i = 0; i < one.size(); ++i) ASSERT_EQ(one[i], two[i]) << op.what(1.0f, 0.5f) << ", element " << i;
      }
  minidl::kernels::cpu::set_num_threads(saved);
}

// round_bf16 stores each result rounded to bfloat16 precision: the bits of the same product stored
// in float32 and then rounded (half.h), on ragged tiles, several K blocks (rounded after the last
// only), beta != 0, with a bias, and the K = 0 / alpha = 0 products; the gaps of C untouched. The
// reference too.
TEST_P(PackedGemmBf16, RoundedStoreIsTheFloat32ResultRounded) {
  auto rounded = [](float x) { return bf16_to_float(float_to_bf16(x)); };
  for (const Case& c : {Case{15, 33, 17}, Case{33, 31, 64}, Case{30, 50, 601}, Case{19, 40, 1101}, Case{4, 5, 0}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 0.5f})
          for (float alpha : {1.0f, 0.0f}) {
            const Operands op(c, ta, tb, 3, false, beta);
            std::vector<float> plain = op.C, round = op.C, ref_plain = op.C, ref_round = op.C;
            ASSERT_TRUE(gemm()(op.M, op.N, op.K, op.A.data(), op.lda, ta, op.B.data(), op.ldb, tb, plain.data(), op.ldc,
                               alpha, beta, false));
            ASSERT_TRUE(gemm()(op.M, op.N, op.K, op.A.data(), op.lda, ta, op.B.data(), op.ldb, tb, round.data(), op.ldc,
                               alpha, beta, true));
            gemm_bf16_reference(op.M, op.N, op.K, op.A.data(), op.lda, ta, op.B.data(), op.ldb, tb, ref_plain.data(),
                                op.ldc, alpha, beta, false);
            gemm_bf16_reference(op.M, op.N, op.K, op.A.data(), op.lda, ta, op.B.data(), op.ldb, tb, ref_round.data(),
                                op.ldc, alpha, beta, true);
            for (int64_t i = 0; i < op.M; ++i)
              for (int64_t j = 0; j < op.ldc; ++j) {
                const size_t at = static_cast<size_t>(i * op.ldc + j);
                const std::string where =
                    op.what(alpha, beta) + " at (" + std::to_string(i) + ", " + std::to_string(j) + ")";
                ASSERT_EQ(round[at], j < op.N ? rounded(plain[at]) : kSentinel) << where;
                ASSERT_EQ(ref_round[at], j < op.N ? rounded(ref_plain[at]) : kSentinel) << where;
              }
            if (beta == 0.0f && alpha == 1.0f) {  // the bias's sums, rounded the same way
              const std::vector<float> bias = minidl::testing::values(static_cast<size_t>(c.N), 9);
              std::vector<float> bias_plain = op.C, bias_round = op.C;
              ASSERT_TRUE(GetParam().gemm_bias(op.M, op.N, op.K, op.A.data(), op.lda, ta, op.B.data(), op.ldb, tb,
                                               bias.data(), bias_plain.data(), op.ldc, false));
              ASSERT_TRUE(GetParam().gemm_bias(op.M, op.N, op.K, op.A.data(), op.lda, ta, op.B.data(), op.ldb, tb,
                                               bias.data(), bias_round.data(), op.ldc, true));
              for (size_t at = 0; at < bias_plain.size(); ++at)
                ASSERT_EQ(bias_round[at],
                          static_cast<int64_t>(at) % op.ldc < op.N ? rounded(bias_plain[at]) : kSentinel)
                    << op.what(alpha, beta) << " with a bias, element " << at;
            }
            // and the rounding did something: most results are not bfloat16 numbers
            if (op.K > 0 && alpha != 0.0f) {
              ASSERT_NE(round, plain) << op.what(alpha, beta);
            }
          }
}

// C = op(A) op(B) + bias: the reference product plus the bias row, bit for bit on small integers
// (every sum exact), within rounding otherwise; K = 0 leaves the bias rows; the gaps untouched.
TEST_P(PackedGemmBf16, BiasStartsEverySum) {
  for (bool small_ints : {true, false})
    for (const Case& c : {Case{1, 1, 1}, Case{33, 31, 64}, Case{80, 65, 97}, Case{15, 33, 17}, Case{30, 50, 601}})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          const Operands op(c, ta, tb, 3, small_ints, 0.0f);
          std::vector<float> bias = minidl::testing::values(static_cast<size_t>(c.N), 9);
          if (small_ints)
            for (float& v : bias) v = std::round(8.0f * v);
          std::vector<float> fast = op.C, ref = op.C;
          ASSERT_TRUE(GetParam().gemm_bias(op.M, op.N, op.K, op.A.data(), op.lda, ta, op.B.data(), op.ldb, tb,
                                           bias.data(), fast.data(), op.ldc, false));
          gemm_bf16_reference(op.M, op.N, op.K, op.A.data(), op.lda, ta, op.B.data(), op.ldb, tb, ref.data(), op.ldc,
                              1.0f, 0.0f);
          for (int64_t i = 0; i < op.M; ++i) {
            for (int64_t j = 0; j < op.N; ++j) {
              const size_t at = static_cast<size_t>(i * op.ldc + j);
              const float expect = ref[at] + bias[static_cast<size_t>(j)];
              const std::string where =
                  op.what(1.0f, 0.0f) + " at (" + std::to_string(i) + ", " + std::to_string(j) + ")";
              if (small_ints)
                ASSERT_EQ(fast[at], expect) << where;
              else
                ASSERT_NEAR(fast[at], expect, std::ldexp(2.0 * double(op.K) + 8.0, -24) * (double(op.K) + 1)) << where;
            }
            for (int64_t j = op.N; j < op.ldc; ++j)
              ASSERT_EQ(fast[static_cast<size_t>(i * op.ldc + j)], kSentinel)
                  << op.what(1.0f, 0.0f) << ", gap of row " << i;
          }
        }
  const std::vector<uint16_t> A = bf16_values(12, 4, false), B = bf16_values(12, 5, false);
  const std::vector<float> bias = {1.5f, -2.0f, 0.25f, 8.0f};
  std::vector<float> C(12, std::nanf(""));
  ASSERT_TRUE(GetParam().gemm_bias(3, 4, 0, A.data(), 1, false, B.data(), 4, false, bias.data(), C.data(), 4, false));
  for (size_t i = 0; i < C.size(); ++i) EXPECT_EQ(C[i], bias[i % 4]) << "K = 0, element " << i;
}

// The row sums of a transposed A, gathered while it is packed: bit for bit the reference's
// sequential double sums (general values: the order is k's), with C the bits of the kernel's plain
// product; with several K blocks, two column blocks (N > 4096: the sums are taken once), 1 and 2
// threads, rows off every tile. An untransposed A, or an empty product, is refused.
TEST_P(PackedGemmBf16, RowSumsOfATransposedAAreTheReferenceSums) {
  namespace k = minidl::kernels::cpu;
  const int saved = k::get_num_threads();
  for (const Case& c : {Case{1, 1, 1}, Case{14, 32, 7}, Case{33, 17, 1201}, Case{64, 49, 2000}, Case{5, 4100, 40}})
    for (bool tb : {false, true})
      for (int threads : {1, 2}) {
        k::set_num_threads(threads);
        const Operands op(c, true, tb, 3, false, 0.0f);
        std::vector<float> fast = op.C, plain = op.C, ref = op.C, sums(static_cast<size_t>(c.M), kSentinel),
                           ref_sums(static_cast<size_t>(c.M));
        ASSERT_TRUE(GetParam().gemm_row_sums(op.M, op.N, op.K, op.A.data(), op.lda, true, op.B.data(), op.ldb, tb,
                                             fast.data(), op.ldc, sums.data()));
        ASSERT_TRUE(gemm()(op.M, op.N, op.K, op.A.data(), op.lda, true, op.B.data(), op.ldb, tb, plain.data(), op.ldc,
                           1.0f, 0.0f, false));
        k::gemm_bf16_row_sums_reference(op.M, op.N, op.K, op.A.data(), op.lda, true, op.B.data(), op.ldb, tb,
                                        ref.data(), op.ldc, ref_sums.data());
        const std::string what = op.what(1.0f, 0.0f) + " threads " + std::to_string(threads);
        for (int64_t i = 0; i < op.M; ++i) ASSERT_EQ(sums[size_t(i)], ref_sums[size_t(i)]) << what << ", row " << i;
        for (size_t i = 0; i < fast.size(); ++i) ASSERT_EQ(fast[i], plain[i]) << what << ", C element " << i;
      }
  k::set_num_threads(saved);
  const Operands op({4, 5, 6}, false, false, 0, false, 1.0f);  // (no NaNs planted in C)
  std::vector<float> C = op.C, sums(4);
  EXPECT_FALSE(GetParam().gemm_row_sums(4, 5, 6, op.A.data(), op.lda, false, op.B.data(), op.ldb, false, C.data(), 5,
                                        sums.data()))
      << "an untransposed A";
  EXPECT_FALSE(GetParam().gemm_row_sums(4, 5, 0, op.A.data(), 4, true, op.B.data(), 5, false, C.data(), 5, sums.data()))
      << "K = 0";
  EXPECT_EQ(C, op.C) << "C untouched when refused";
}

INSTANTIATE_TEST_SUITE_P(Kernels, PackedGemmBf16, ::testing::ValuesIn(kKernels),
                         [](const ::testing::TestParamInfo<Kernel>& info) { return std::string(info.param.name); });

// gemm_bf16 is the AMX kernel where the CPU has AMX, else the AVX512_BF16 one (the same bits as the
// kernel it chose), else false.
TEST(CpuGemmBf16, ChoosesAmxWhereTheCpuHasIt) {
  namespace k = minidl::kernels::cpu;
  const Operands op({70, 45, 300}, false, true, 0, false, 0.0f);
  std::vector<float> chosen = op.C, expect = op.C;
  const bool ran = k::gemm_bf16(op.M, op.N, op.K, op.A.data(), op.lda, false, op.B.data(), op.ldb, true, chosen.data(),
                                op.ldc, 1.0f, 0.0f);
  ASSERT_EQ(ran, k::gemm_bf16_supported());
  ASSERT_EQ(k::gemm_bf16_supported(), k::gemm_bf16_amx_supported() || k::gemm_bf16_avx512_supported());
  if (!ran)
    GTEST_SKIP() << "neither AMX nor AVX512_BF16 here (the CPU, or MINIDL_CPU_CAPABILITY): gemm_bf16 returns false";
  const GemmFn expected_kernel = k::gemm_bf16_amx_supported() ? k::gemm_bf16_amx : k::gemm_bf16_avx512;
  ASSERT_TRUE(expected_kernel(op.M, op.N, op.K, op.A.data(), op.lda, false, op.B.data(), op.ldb, true, expect.data(),
                              op.ldc, 1.0f, 0.0f, false));
  for (size_t i = 0; i < chosen.size(); ++i) ASSERT_EQ(chosen[i], expect[i]) << "element " << i;
}

// Each kernel runs a small C over many K blocks (a weight gradient) split over its K blocks on two
// threads, the partial products added in K order afterwards: the bits of the same K blocks run
// one after another, here as one call per block (each a single K block: K <= 512), the first with
// alpha and beta (or the bias), the others adding into C (beta 1), rounded in the last. K = 2100
// makes 5 blocks (of 448 on AMX, the last 308; of 424 on AVX512_BF16, the last 404); rows and
// columns off the tiles; 1 and 2 threads.
TEST_P(PackedGemmBf16, SplitOverKGivesTheBitsOfItsKBlocksOneAfterAnother) {
  namespace k = minidl::kernels::cpu;
  const int saved = k::get_num_threads();
  const int64_t step = GetParam().k_step_2100;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const auto& [alpha, beta, round, with_bias] :
           {std::tuple{1.0f, 0.0f, false, false}, std::tuple{0.5f, 2.0f, true, false},
            std::tuple{1.0f, 0.0f, false, true}, std::tuple{1.0f, 0.0f, true, true}})
        for (int threads : {1, 2}) {
          k::set_num_threads(threads);
          const Operands op({70, 50, 2100}, ta, tb, 3, false, beta);
          const std::vector<float> bias = minidl::testing::values(50, 9);
          std::vector<float> split = op.C, blocks = op.C;
          if (with_bias)
            ASSERT_TRUE(GetParam().gemm_bias(op.M, op.N, op.K, op.A.data(), op.lda, ta, op.B.data(), op.ldb, tb,
                                             bias.data(), split.data(), op.ldc, round));
          else
            ASSERT_TRUE(gemm()(op.M, op.N, op.K, op.A.data(), op.lda, ta, op.B.data(), op.ldb, tb, split.data(), op.ldc,
                               alpha, beta, round));
          for (int64_t pc = 0; pc < op.K; pc += step) {
            const int64_t kc = std::min(step, op.K - pc);
            const uint16_t* a = op.A.data() + (ta ? pc * op.lda : pc);  // op(A)'s columns pc ..
            const uint16_t* b = op.B.data() + (tb ? pc : pc * op.ldb);  // op(B)'s rows pc ..
            const bool last = pc + kc == op.K;
            if (pc == 0 && with_bias)
              ASSERT_TRUE(GetParam().gemm_bias(op.M, op.N, kc, a, op.lda, ta, b, op.ldb, tb, bias.data(), blocks.data(),
                                               op.ldc, round && last));
            else
              ASSERT_TRUE(gemm()(op.M, op.N, kc, a, op.lda, ta, b, op.ldb, tb, blocks.data(), op.ldc, alpha,
                                 pc == 0 ? beta : 1.0f, round && last));
          }
          for (size_t i = 0; i < split.size(); ++i)
            ASSERT_EQ(std::memcmp(&split[i], &blocks[i], sizeof(float)), 0)
                << op.what(alpha, beta) << " round " << round << " bias " << with_bias << " threads " << threads
                << ", element " << i << ": " << split[i] << " vs " << blocks[i];
        }
  k::set_num_threads(saved);
}
