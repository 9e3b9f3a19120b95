// kernels/cpu/gemm.cpp — gemm()'s dispatch, and the one translation unit that compiles Eigen's
// GEMM (see gemm.h). Float products go to the packed AVX-512 kernel (gemm_avx512.cpp) when the CPU
// has AVX-512F; Eigen's path below serves double and other CPUs. gemm_reference, the plain triple
// loop all of them are tested against, sits just before gemm_eigen.
//
// Determinism: Eigen's own multi-threaded GEMM picks its K-blocking from the thread count, which
// changes the order in which each output element's products are summed. Instead we cut C into
// fixed tiles (their size depends only on M, N, K), run Eigen's single-threaded blocked kernel on
// each tile, and spread the tiles over threads with parallel_for. Every element of C is then
// computed by the same code in the same order whatever the thread count: bit-identical results.
// Small products skip Eigen for a register-blocked loop (small_gemm below).
#include "minidl/kernels/cpu/gemm.h"

#include <Eigen/Core>
#include <algorithm>
#include <cstring>
#include <vector>

#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/cpu/vec_math.h"

namespace minidl::kernels::cpu {

namespace {

using Eigen::Index;

// C (m, n) += alpha * op(A) (m, k) · op(B) (k, n) on one tile, single-threaded Eigen kernel.
// LhsOrder/RhsOrder: RowMajor = stored as is, ColMajor = stored transposed.
template <class T, int LhsOrder, int RhsOrder>
void tile_kernel(Index m, Index n, Index k, const T* a, Index lda, const T* b, Index ldb, T* c, Index ldc, T alpha) {
  using namespace Eigen::internal;
  gemm_blocking_space<Eigen::RowMajor, T, T, Eigen::Dynamic, Eigen::Dynamic, Eigen::Dynamic> blocking(m, n, k, 1, true);
  general_matrix_matrix_product<Index, T, LhsOrder, false, T, RhsOrder, false, Eigen::RowMajor, 1>::run(
      m, n, k, a, lda, b, ldb, c, 1, ldc, alpha, blocking, nullptr);
}

// ---- small products: a register-blocked loop nest instead of Eigen ----
// Eigen's packing and blocking cost more than the arithmetic for the many small products of a
// convolution with few input channels (K = 9) or of attention heads (50x16 by 16x50). Here op(B)
// is copied into a (K, Np) buffer (Np = N rounded up to W = kLanes<T>, the lanes of one
// vec_math.h vector: 16 floats or 8 doubles; zero-padded), and each block of kSmallRows rows of C
// accumulates kSmallRows x W sums over k = 0..K-1 in order, in vector registers. Each C element
// is one in-order sum over k, whatever the threads: bit-identical for any thread count. Tested
// against gemm_reference by tests/tensor/test_cpu_fast_paths.cpp (SmallGemm).
constexpr int64_t kSmallRows = 4;
constexpr double kSmallFlops = 4e6;  // below this, one tile and no threads (as eigen_gemm)

template <class T, int64_t R>
void small_rows(int64_t i0, int64_t N, int64_t K, const T* A, int64_t sa_i, int64_t sa_k, const T* Bp, int64_t Np, T* C,
                int64_t ldc, T alpha, T beta) {
  constexpr int64_t W = kLanes<T>;
  for (int64_t j0 = 0; j0 < N; j0 += W) {
    Lanes<T> acc[R] = {};  // R row pieces of C, kept in registers
    for (int64_t k = 0; k < K; ++k) {
      const Lanes<T> b = load_lanes(Bp + k * Np + j0);
      for (int64_t r = 0; r < R; ++r) acc[r] += A[(i0 + r) * sa_i + k * sa_k] * b;
    }
    const int64_t n = std::min(W, N - j0);
    for (int64_t r = 0; r < R; ++r) {
      T out[W];
      store_lanes(out, acc[r]);
      T* c = C + (i0 + r) * ldc + j0;
      if (beta == T(0)) {
        for (int64_t j = 0; j < n; ++j) c[j] = alpha * out[j];
      } else {
        for (int64_t j = 0; j < n; ++j) c[j] = alpha * out[j] + beta * c[j];
      }
    }
  }
}

template <class T>
void small_gemm(int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, bool trans_a, const T* B, int64_t ldb,
                bool trans_b, T* C, int64_t ldc, T alpha, T beta) {
  const int64_t Np = (N + kLanes<T> - 1) / kLanes<T> * kLanes<T>;
  thread_local std::vector<T> packed;
  packed.assign(static_cast<size_t>(K * Np), T(0));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j < N; ++j) packed[static_cast<size_t>(k * Np + j)] = trans_b ? B[j * ldb + k] : B[k * ldb + j];
  const int64_t sa_i = trans_a ? 1 : lda, sa_k = trans_a ? lda : 1;  // op(A)(i, k) = A[i * sa_i + k * sa_k]
  int64_t i = 0;
  for (; i + kSmallRows <= M; i += kSmallRows)
    small_rows<T, kSmallRows>(i, N, K, A, sa_i, sa_k, packed.data(), Np, C, ldc, alpha, beta);
  for (; i < M; ++i) small_rows<T, 1>(i, N, K, A, sa_i, sa_k, packed.data(), Np, C, ldc, alpha, beta);
}

// Eigen's single-threaded kernel on fixed tiles of C, the tiles spread over threads.
template <class T>
void eigen_gemm(int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, bool trans_a, const T* B, int64_t ldb,
                bool trans_b, T* C, int64_t ldc, T alpha, T beta) {
  if (M <= 0 || N <= 0) return;
  // C = beta * C first (beta == 0: overwrite, ignoring NaNs already there).
  for (int64_t i = 0; i < M; ++i) {
    T* row = C + i * ldc;
    if (beta == T(0)) {
      std::fill(row, row + N, T(0));
    } else if (beta != T(1)) {
      for (int64_t j = 0; j < N; ++j) row[j] *= beta;
    }
  }
  if (K <= 0 || alpha == T(0)) return;

  // Tile sizes depend only on the problem, never on the thread count (see the file comment).
  const double flops = 2.0 * double(M) * double(N) * double(K);
  const int64_t mt = flops < kSmallFlops ? M : 256;  // small products: one tile, no threading overhead
  const int64_t nt = flops < kSmallFlops ? N : 512;
  const int64_t tiles_m = (M + mt - 1) / mt, tiles_n = (N + nt - 1) / nt;

  auto run_tile = [&](int64_t tile) {
    const int64_t i0 = (tile / tiles_n) * mt, j0 = (tile % tiles_n) * nt;
    const int64_t m = std::min(mt, M - i0), n = std::min(nt, N - j0);
    // op(A) rows i0.. : A stored (M, K) -> row offset i0*lda; stored (K, M) -> column offset i0.
    const T* a = trans_a ? A + i0 : A + i0 * lda;
    const T* b = trans_b ? B + j0 * ldb : B + j0;
    T* c = C + i0 * ldc + j0;
    constexpr int R = Eigen::RowMajor, Cm = Eigen::ColMajor;
    if (!trans_a && !trans_b)
      tile_kernel<T, R, R>(m, n, K, a, lda, b, ldb, c, ldc, alpha);
    else if (!trans_a && trans_b)
      tile_kernel<T, R, Cm>(m, n, K, a, lda, b, ldb, c, ldc, alpha);
    else if (trans_a && !trans_b)
      tile_kernel<T, Cm, R>(m, n, K, a, lda, b, ldb, c, ldc, alpha);
    else
      tile_kernel<T, Cm, Cm>(m, n, K, a, lda, b, ldb, c, ldc, alpha);
  };
  parallel_for(tiles_m * tiles_n, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) run_tile(t);
  });
}

template <class T> bool use_small_gemm(int64_t M, int64_t N, int64_t K, T alpha) {
  return M > 0 && N > 0 && K > 0 && alpha != T(0) && 2.0 * double(M) * double(N) * double(K) < kSmallFlops;
}

}  // namespace

namespace {
template <class T>
void triple_loop(int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, bool trans_a, const T* B, int64_t ldb,
                 bool trans_b, T* C, int64_t ldc, T alpha, T beta) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double sum = 0;  // op(A)(i, k) op(B)(k, j)
      for (int64_t k = 0; k < K; ++k)
        sum += double(trans_a ? A[k * lda + i] : A[i * lda + k]) * double(trans_b ? B[j * ldb + k] : B[k * ldb + j]);
      T& c = C[i * ldc + j];
      c = static_cast<T>(double(alpha) * sum + (beta == T(0) ? 0.0 : double(beta) * double(c)));
    }
}
}  // namespace

void gemm_reference(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool trans_a, const float* B,
                    int64_t ldb, bool trans_b, float* C, int64_t ldc, float alpha, float beta) {
  triple_loop(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, alpha, beta);
}
void gemm_reference(int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, bool trans_a, const double* B,
                    int64_t ldb, bool trans_b, double* C, int64_t ldc, double alpha, double beta) {
  triple_loop(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, alpha, beta);
}

void gemm_eigen(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool trans_a, const float* B, int64_t ldb,
                bool trans_b, float* C, int64_t ldc, float alpha, float beta) {
  eigen_gemm<float>(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, alpha, beta);
}

void gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool trans_a, const float* B, int64_t ldb,
          bool trans_b, float* C, int64_t ldc, float alpha, float beta) {
  if (use_small_gemm(M, N, K, alpha)) {
    small_gemm(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, alpha, beta);
  } else if (!gemm_avx512(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, alpha, beta)) {
    eigen_gemm<float>(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, alpha, beta);
  }
}

void gemm(int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, bool trans_a, const double* B, int64_t ldb,
          bool trans_b, double* C, int64_t ldc, double alpha, double beta) {
  if (use_small_gemm(M, N, K, alpha)) {
    small_gemm(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, alpha, beta);
  } else {
    eigen_gemm<double>(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, alpha, beta);
  }
}

namespace {
// C (M, N) = the bias in every row, then C += op(A) op(B) (beta = 1): gemm_bias's portable path.
template <class T>
void gemm_into_bias_rows(int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, bool trans_a, const T* B,
                         int64_t ldb, bool trans_b, const T* bias, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) std::copy(bias, bias + N, C + i * ldc);
  gemm(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, T(1), T(1));
}
}  // namespace

void gemm_bias(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool trans_a, const float* B, int64_t ldb,
               bool trans_b, const float* bias, float* C, int64_t ldc) {
  if (use_small_gemm(M, N, K, 1.0f) ||
      !gemm_avx512(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, 1.0f, 0.0f, bias))
    gemm_into_bias_rows(M, N, K, A, lda, trans_a, B, ldb, trans_b, bias, C, ldc);
}

void gemm_bias(int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, bool trans_a, const double* B,
               int64_t ldb, bool trans_b, const double* bias, double* C, int64_t ldc) {
  gemm_into_bias_rows(M, N, K, A, lda, trans_a, B, ldb, trans_b, bias, C, ldc);
}

namespace {
template <class T>
void gemm_then_row_sums(int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, bool trans_a, const T* B, int64_t ldb,
                        bool trans_b, T* C, int64_t ldc, T* row_sums) {
  gemm(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, T(1), T(0));
  for (int64_t i = 0; i < M; ++i) {
    double s = 0;  // op(A)(i, k) = A[i * lda + k], or A[k * lda + i] when trans_a
    for (int64_t k = 0; k < K; ++k) s += double(trans_a ? A[k * lda + i] : A[i * lda + k]);
    row_sums[i] = static_cast<T>(s);
  }
}
}  // namespace

void gemm_row_sums_reference(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool trans_a, const float* B,
                             int64_t ldb, bool trans_b, float* C, int64_t ldc, float* row_sums) {
  gemm_then_row_sums(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, row_sums);
}

void gemm_row_sums(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool trans_a, const float* B,
                   int64_t ldb, bool trans_b, float* C, int64_t ldc, float* row_sums) {
  if (use_small_gemm(M, N, K, 1.0f) ||
      !gemm_avx512(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, 1.0f, 0.0f, nullptr, row_sums))
    gemm_then_row_sums(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, row_sums);
}

void gemm_row_sums(int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, bool trans_a, const double* B,
                   int64_t ldb, bool trans_b, double* C, int64_t ldc, double* row_sums) {
  gemm_then_row_sums(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, row_sums);
}

}  // namespace minidl::kernels::cpu
