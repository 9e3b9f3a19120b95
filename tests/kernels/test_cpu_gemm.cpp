// tests/kernels/test_cpu_gemm.cpp — the packed AVX-512 float GEMM (kernels/cpu/gemm_avx512.cpp) and
// Eigen's path (gemm_eigen) against gemm_reference (the plain triple loop, here on float64 copies
// of the operands): all four transpose combinations, sizes that are not multiples of the 8x32 tile,
// K = 1 and K = 0, K past one K block and N past one column block, operands large enough for the
// micro-kernel's prefetching, alpha and beta (0: C is write-only, a NaN there is ignored; 1;
// other), leading dimensions wider than the matrices (the gaps stay untouched), and the same bits
// with 1 and 2 threads (a product split over its K blocks included). Skipped, saying so, on a CPU
// without AVX-512F (gemm() then never uses the kernel). gemm_bias (a bias added to every row of C)
// on every path; gemm_row_sums (the row sums of op(A) alongside the product) against
// gemm_row_sums_reference, on every path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "minidl/kernels/cpu/cpu_features.h"
#include "minidl/kernels/cpu/gemm.h"
#include "minidl/kernels/cpu/parallel.h"
#include "tests/common/testing.h"

namespace {

using minidl::testing::values;

using minidl::kernels::cpu::gemm_avx512;
using minidl::kernels::cpu::gemm_eigen;
using minidl::kernels::cpu::gemm_reference;

struct Case {
  int64_t M, N, K;
};

constexpr float kSentinel = 12345.0f;  // fills the gaps between rows of C (ldc > N)

// Runs gemm_avx512 and gemm_eigen on one case and checks both against gemm_reference in float64.
void check(const Case& c, bool ta, bool tb, float alpha, float beta, int64_t pad) {
  const int64_t M = c.M, N = c.N, K = c.K;
  // A stored (M, K) or (K, M); B stored (K, N) or (N, K); each row `pad` elements wider.
  const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
  const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = N + pad;
  const std::vector<float> A = values(static_cast<size_t>(a_rows * lda), 1),
                           B = values(static_cast<size_t>(b_rows * ldb), 2);
  std::vector<float> C0 = values(static_cast<size_t>(M * ldc), 3);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = N; j < ldc; ++j) C0[i * ldc + j] = kSentinel;
  if (beta == 0.0f && M > 0 && N > 0) C0[0] = C0[(M - 1) * ldc + N - 1] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> packed = C0, eigen = C0;
  ASSERT_TRUE(gemm_avx512(M, N, K, A.data(), lda, ta, B.data(), ldb, tb, packed.data(), ldc, alpha, beta));
  gemm_eigen(M, N, K, A.data(), lda, ta, B.data(), ldb, tb, eigen.data(), ldc, alpha, beta);
  // The reference, and the same loop over |A| and |B| for the size of the sum each element rounds.
  std::vector<double> Ad(A.begin(), A.end()), Bd(B.begin(), B.end()), ref(static_cast<size_t>(M * ldc)), mag = ref;
  for (size_t i = 0; i < C0.size(); ++i) ref[i] = C0[i];
  gemm_reference(M, N, K, Ad.data(), lda, ta, Bd.data(), ldb, tb, ref.data(), ldc, double(alpha), double(beta));
  for (double& v : Ad) v = std::fabs(v);
  for (double& v : Bd) v = std::fabs(v);
  gemm_reference(M, N, K, Ad.data(), lda, ta, Bd.data(), ldb, tb, mag.data(), ldc, 1.0, 0.0);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      const size_t at = static_cast<size_t>(i * ldc + j);
      const double old = beta == 0.0f ? 0.0 : beta * double(C0[at]);  // a NaN there is ignored
      const double tol = 1e-5 * (std::fabs(alpha) * mag[at] + std::fabs(old)) + 1e-7;
      ASSERT_NEAR(packed[at], ref[at], tol) << M << "x" << N << "x" << K << " ta " << ta << " tb " << tb << " alpha "
                                            << alpha << " beta " << beta << " at (" << i << ", " << j << ")";
      ASSERT_NEAR(eigen[at], ref[at], tol)
          << "Eigen, " << M << "x" << N << "x" << K << " at (" << i << ", " << j << ")";
    }
    for (int64_t j = N; j < ldc; ++j) ASSERT_EQ(packed[i * ldc + j], kSentinel) << "gap of row " << i << " written";
  }
}

}  // namespace

// The packed kernel runs only where AVX-512F does (capped by MINIDL_CPU_CAPABILITY).
#define SKIP_WITHOUT_AVX512F()                  \
  if (!minidl::kernels::cpu::cpu_has_avx512f()) \
  GTEST_SKIP() << "no AVX-512F here (the CPU, or MINIDL_CPU_CAPABILITY=default): gemm() uses Eigen"

TEST(CpuGemm, PackedMatchesNaiveLoopsAndEigen) {
  SKIP_WITHOUT_AVX512F();
  // tile multiples, ragged edges in M, N and K, single rows and columns, and the CNN's shapes
  const Case cases[] = {{8, 32, 8}, {1, 1, 1},      {7, 5, 3},     {9, 33, 17},  {17, 16, 9},
                        {5, 47, 1}, {64, 196, 288}, {288, 49, 64}, {130, 20, 70}};
  for (const Case& c : cases)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 1.0f, -0.5f}) check(c, ta, tb, beta == 1.0f ? -0.75f : 1.0f, beta, 0);
}

TEST(CpuGemm, PackedHandlesWideLeadingDimensionsAndBlockEdges) {
  SKIP_WITHOUT_AVX512F();
  // leading dimensions wider than the rows (the gaps between rows of C are never written)
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, 0.5f}) check({21, 45, 13}, ta, tb, 1.0f, beta, 3);
  // K = 1100: three K blocks (C = alpha * first + beta * C, then += each further block)
  for (float beta : {0.0f, 2.0f}) check({19, 40, 1100}, true, false, 1.0f, beta, 1);
  // N = 4200: two column blocks of the packed B
  check({3, 4200, 5}, false, true, 1.0f, 0.25f, 0);
  // rows of a transposed A short enough to be read in place (pad 3), and too far apart (pad 300:
  // packed), with the weight gradients' shape (K much larger than M and N) over several K blocks
  for (int64_t pad : {3, 300}) {
    check({40, 70, 30}, true, false, 1.0f, 0.5f, pad);
    check({24, 64, 700}, true, false, 1.0f, 0.0f, pad);
  }
  // op(A) and C together past 1 MB: the micro-kernel prefetches the next tile's rows (past the
  // last row of C too, which must stay harmless), ragged in M and N
  for (bool ta : {false, true})
    for (float beta : {0.0f, 0.5f}) check({1003, 200, 70}, ta, true, 1.0f, beta, 0);
}

TEST(CpuGemm, PackedWithEmptyKOrZeroAlphaScalesC) {
  SKIP_WITHOUT_AVX512F();
  const std::vector<float> A = values(12, 4), B = values(12, 5);
  for (float beta : {0.0f, 1.0f, 3.0f}) {
    std::vector<float> C = values(12, 6), C0 = C;
    C[5] = beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : C[5];
    ASSERT_TRUE(gemm_avx512(3, 4, 0, A.data(), 1, false, B.data(), 4, false, C.data(), 4, 1.0f, beta));
    for (size_t i = 0; i < C.size(); ++i) EXPECT_EQ(C[i], beta * C0[i]) << "K = 0, beta " << beta << ", element " << i;
    C = C0;
    ASSERT_TRUE(gemm_avx512(3, 4, 3, A.data(), 3, false, B.data(), 4, false, C.data(), 4, 0.0f, beta));
    for (size_t i = 0; i < C.size(); ++i)
      EXPECT_EQ(C[i], beta * C0[i]) << "alpha 0, beta " << beta << ", element " << i;
  }
}

TEST(CpuGemm, PackedSameBitsFor1And2Threads) {
  SKIP_WITHOUT_AVX512F();
  const int saved = minidl::kernels::cpu::get_num_threads();
  // several row blocks (the threads split C's rows) and K blocks; then few rows (the threads split
  // C's column panels, 7 of them, unevenly)
  for (const Case& c : {Case{300, 70, 600}, Case{100, 200, 600}})
    for (bool ta : {false, true}) {
      const int64_t M = c.M, N = c.N, K = c.K;
      const std::vector<float> A = values(static_cast<size_t>(M * K), 7), B = values(static_cast<size_t>(K * N), 8);
      std::vector<float> one = values(static_cast<size_t>(M * N), 9), two = one;
      minidl::kernels::cpu::set_num_threads(1);
      gemm_avx512(M, N, K, A.data(), ta ? M : K, ta, B.data(), N, false, one.data(), N, 1.0f, 0.5f);
      minidl::kernels::cpu::set_num_threads(2);
      gemm_avx512(M, N, K, A.data(), ta ? M : K, ta, B.data(), N, false, two.data(), N, 1.0f, 0.5f);
      for (size_t i = 0; i < one.size(); ++i) ASSERT_EQ(one[i], two[i]) << "element " << i << ", trans_a " << ta;
    }
  minidl::kernels::cpu::set_num_threads(saved);
}

// With two threads a small C over many K blocks is split over them (a weight gradient): its
// partial products are added in K order afterwards, as the loop over K blocks adds them. So the
// product equals, bit for bit, the same product run one K block at a time (K = 2100 is 9 blocks of
// 240, the last 180; each call below is one block: C = alpha * block + beta * C, then
// C = alpha * block + C), with alpha and beta, and with a bias (added with the first block).
TEST(CpuGemm, SplitOverKGivesTheBitsOfItsKBlocksOneAfterAnother) {
  SKIP_WITHOUT_AVX512F();
  const int saved = minidl::kernels::cpu::get_num_threads();
  const int64_t M = 70, N = 50, K = 2100, step = 240;
  const std::vector<float> bias = values(N, 16);
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const auto& [alpha, beta, with_bias] :
           {std::tuple{1.0f, 0.0f, false}, std::tuple{0.5f, 2.0f, false}, std::tuple{1.0f, 0.0f, true}})
        for (int threads : {1, 2}) {
          minidl::kernels::cpu::set_num_threads(threads);
          const int64_t lda = ta ? M : K, ldb = tb ? K : N;
          const std::vector<float> A = values(static_cast<size_t>(M * K), 17),
                                   B = values(static_cast<size_t>(K * N), 18);
          std::vector<float> split = values(static_cast<size_t>(M * N), 19), blocks = split;
          ASSERT_TRUE(gemm_avx512(M, N, K, A.data(), lda, ta, B.data(), ldb, tb, split.data(), N, alpha, beta,
                                  with_bias ? bias.data() : nullptr));
          for (int64_t pc = 0; pc < K; pc += step) {
            const int64_t kc = std::min(step, K - pc);
            const float* a = A.data() + (ta ? pc * lda : pc);  // op(A)'s columns pc ..
            const float* b = B.data() + (tb ? pc : pc * ldb);  // op(B)'s rows pc ..
            ASSERT_TRUE(gemm_avx512(M, N, kc, a, lda, ta, b, ldb, tb, blocks.data(), N, alpha, pc == 0 ? beta : 1.0f,
                                    with_bias && pc == 0 ? bias.data() : nullptr));
          }
          for (size_t i = 0; i < split.size(); ++i)
            ASSERT_EQ(std::memcmp(&split[i], &blocks[i], sizeof(float)), 0)
                << "ta " << ta << " tb " << tb << " alpha " << alpha << " beta " << beta << " bias " << with_bias
                << " threads " << threads << ", element " << i << ": " << split[i] << " vs " << blocks[i];
        }
  minidl::kernels::cpu::set_num_threads(saved);
}

// gemm_bias: C = op(A) op(B) + bias in every row, on the small-product loop, the packed kernel
// (several K blocks, ragged tiles, two column blocks) and, for double, Eigen's path, against
// gemm_reference in float64; C's old contents (a NaN included) are ignored. The packed
// kernel's bias with beta != 0 (C = product + beta C + bias) is checked too.
template <class T> void check_bias(const Case& c, bool ta, bool tb) {
  const int64_t M = c.M, N = c.N, K = c.K;
  const int64_t lda = ta ? M : K, ldb = tb ? K : N;
  const std::vector<float> Af = values(static_cast<size_t>(M * K), 4), Bf = values(static_cast<size_t>(K * N), 5);
  const std::vector<float> biasf = values(static_cast<size_t>(N), 6);
  const std::vector<T> A(Af.begin(), Af.end()), B(Bf.begin(), Bf.end()), bias(biasf.begin(), biasf.end());
  std::vector<T> C(static_cast<size_t>(M * N), T(7));
  C[0] = std::numeric_limits<T>::quiet_NaN();
  minidl::kernels::cpu::gemm_bias(M, N, K, A.data(), lda, ta, B.data(), ldb, tb, bias.data(), C.data(), N);
  // gemm_reference in float64 into the bias rows (beta = 1), and over |A|, |B| into |bias| rows
  std::vector<double> Ad(Af.begin(), Af.end()), Bd(Bf.begin(), Bf.end()), ref(C.size()), mag(C.size());
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) ref[i * N + j] = bias[j], mag[i * N + j] = std::fabs(double(bias[j]));
  gemm_reference(M, N, K, Ad.data(), lda, ta, Bd.data(), ldb, tb, ref.data(), N, 1.0, 1.0);
  for (double& v : Ad) v = std::fabs(v);
  for (double& v : Bd) v = std::fabs(v);
  gemm_reference(M, N, K, Ad.data(), lda, ta, Bd.data(), ldb, tb, mag.data(), N, 1.0, 1.0);
  for (int64_t i = 0; i < M * N; ++i)
    ASSERT_NEAR(C[i], ref[i], 1e-5 * mag[i] + 1e-7)
        << M << "x" << N << "x" << K << " ta " << ta << " tb " << tb << " at (" << i / N << ", " << i % N << ")";
}

TEST(CpuGemm, BiasIsAddedToEveryRowOnEveryPath) {
  const Case cases[] = {{7, 5, 3}, {130, 20, 70}, {19, 40, 1100}, {3, 4200, 5}, {200, 192, 64}, {33, 17, 64}};
  for (const Case& c : cases)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        check_bias<float>(c, ta, tb);
        check_bias<double>(c, ta, tb);
      }
}

TEST(CpuGemm, PackedBiasWithBetaAddsBothToC) {
  SKIP_WITHOUT_AVX512F();
  const int64_t M = 21, N = 45, K = 600;  // two K blocks: the bias goes in with the first only
  const std::vector<float> A = values(M * K, 8), B = values(K * N, 9), bias = values(N, 10), C0 = values(M * N, 11);
  std::vector<float> C = C0, ref = C0;
  ASSERT_TRUE(gemm_avx512(M, N, K, A.data(), K, false, B.data(), N, false, C.data(), N, 2.0f, 0.5f, bias.data()));
  gemm_eigen(M, N, K, A.data(), K, false, B.data(), N, false, ref.data(), N, 2.0f, 0.5f);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) ASSERT_NEAR(C[i * N + j], ref[i * N + j] + bias[j], 2e-4) << i << ", " << j;
}

// gemm_row_sums against its reference (gemm(), then each row of op(A) summed in double, k in order):
// the same bits for C (the same products in the same order) and for the sums (the fused kernel
// sums each K block in double from zero and adds the blocks' sums in K order, which here rounds
// to the same floats), on the small-product loop, the packed
// kernel (A transposed, read in place or packed; rows past a whole 8-row panel; one and three K
// blocks; 16-column and wider panels) and the fallback for an untransposed A; the same bits for 1
// and 2 threads; and the sums checked against float64 sums of the operand itself.
TEST(CpuGemm, RowSumsMatchThePlainLoopOnEveryPath) {
  const Case cases[] = {{7, 5, 3}, {64, 64, 6400}, {192, 64, 1100}, {21, 10, 700}, {130, 45, 70}, {9, 33, 17}};
  const int saved = minidl::kernels::cpu::get_num_threads();
  for (const Case& c : cases)
    for (bool ta : {false, true})
      for (int64_t pad : {0, 300}) {
        const int64_t M = c.M, N = c.N, K = c.K, lda = (ta ? M : K) + pad;
        const std::vector<float> A = values(static_cast<size_t>((ta ? K : M) * lda), 12),
                                 B = values(static_cast<size_t>(K * N), 13);
        std::vector<float> C(static_cast<size_t>(M * N)), sums(static_cast<size_t>(M));
        std::vector<float> C_ref = C, sums_ref = sums, C_two = C, sums_two = sums;
        minidl::kernels::cpu::set_num_threads(1);
        minidl::kernels::cpu::gemm_row_sums(M, N, K, A.data(), lda, ta, B.data(), N, false, C.data(), N, sums.data());
        minidl::kernels::cpu::gemm_row_sums_reference(M, N, K, A.data(), lda, ta, B.data(), N, false, C_ref.data(), N,
                                                      sums_ref.data());
        minidl::kernels::cpu::set_num_threads(2);
        minidl::kernels::cpu::gemm_row_sums(M, N, K, A.data(), lda, ta, B.data(), N, false, C_two.data(), N,
                                            sums_two.data());
        const std::string what = std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) + " ta " +
                                 std::to_string(ta) + " lda " + std::to_string(lda);
        for (size_t i = 0; i < C.size(); ++i) {
          ASSERT_EQ(C[i], C_ref[i]) << what << ", C element " << i;
          ASSERT_EQ(C_two[i], C[i]) << what << ", C element " << i << " with 2 threads";
        }
        for (int64_t i = 0; i < M; ++i) {
          double s = 0, mag = 0;
          for (int64_t k = 0; k < K; ++k) {
            const double v = ta ? A[k * lda + i] : A[i * lda + k];
            s += v, mag += std::fabs(v);
          }
          ASSERT_EQ(sums[i], sums_ref[i]) << what << ", row " << i;
          ASSERT_EQ(sums_two[i], sums[i]) << what << ", row " << i << " with 2 threads";
          ASSERT_NEAR(sums[i], s, 1e-6 * mag) << what << ", row " << i;
        }
      }
  minidl::kernels::cpu::set_num_threads(saved);
  // double: gemm() and the loop
  const std::vector<float> Af = values(40 * 30, 14), Bf = values(40 * 20, 15);
  const std::vector<double> A(Af.begin(), Af.end()), B(Bf.begin(), Bf.end());
  std::vector<double> C(30 * 20), sums(30);
  minidl::kernels::cpu::gemm_row_sums(30, 20, 40, A.data(), 30, true, B.data(), 20, false, C.data(), 20, sums.data());
  for (int64_t i = 0; i < 30; ++i) {
    double s = 0;
    for (int64_t k = 0; k < 40; ++k) s += A[k * 30 + i];
    ASSERT_EQ(sums[i], s) << "double, row " << i;
    for (int64_t j = 0; j < 20; ++j) {
      double ref = 0;
      for (int64_t k = 0; k < 40; ++k) ref += A[k * 30 + i] * B[k * 20 + j];
      ASSERT_NEAR(C[i * 20 + j], ref, 1e-12) << "double, (" << i << ", " << j << ")";
    }
  }
}
