// kernels/cpu/gemm.h — general matrix multiply on the CPU: a packed AVX-512 kernel for float
// (gemm_avx512.cpp) when the CPU has AVX-512F, Eigen's GEMM otherwise and for double (gemm.cpp),
// a register-blocked loop for small products, and gemm_reference, the plain triple loop.
//
//   C (M, N) = alpha * op(A) (M, K) · op(B) (K, N) + beta * C
//
// All matrices are row-major with a leading dimension (the distance in elements between rows):
//   op(A) = A      when trans_a == false: A is stored (M, K), lda >= K
//   op(A) = A^T    when trans_a == true:  A is stored (K, M), lda >= M
// (same for B: stored (K, N) with ldb >= N, or (N, K) with ldb >= K when trans_b). C is (M, N),
// ldc >= N. A transposed 2-d view of a row-major matrix is exactly "stored transposed", so views
// are multiplied without copies. beta == 0 means C is write-only (its old contents, even NaN,
// are ignored). Threads: kernels::cpu::set_num_threads; the result is bit-identical for any
// thread count (work is split over blocks of C, or over K blocks whose partial products are then
// added in the order one thread adds the blocks).
#pragma once
#include <cstdint>

namespace minidl::kernels::cpu {

void gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool trans_a, const float* B, int64_t ldb,
          bool trans_b, float* C, int64_t ldc, float alpha = 1.0f, float beta = 0.0f);

void gemm(int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, bool trans_a, const double* B, int64_t ldb,
          bool trans_b, double* C, int64_t ldc, double alpha = 1.0, double beta = 0.0);

// C (M, N) = op(A) · op(B) + bias broadcast over the rows (bias: N values; a linear layer's
// y = x W^T + b). The packed kernel adds the bias where it first writes C, so there is no extra
// pass over C; the other paths fill C with the bias rows and accumulate the product into it.
void gemm_bias(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool trans_a, const float* B, int64_t ldb,
               bool trans_b, const float* bias, float* C, int64_t ldc);
void gemm_bias(int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, bool trans_a, const double* B,
               int64_t ldb, bool trans_b, const double* bias, double* C, int64_t ldc);

// C (M, N) = op(A) · op(B), and row_sums (M) = the sums of op(A)'s rows, each added up in double
// in k order (the packed kernel: within each K block, the blocks' sums then in K order), then
// rounded: with A = dy (rows, out) transposed and B = x (rows, in), a linear
// layer's weight and bias gradients (dW = dy^T x, db = dy's column sums) from one pass over dy.
// The packed kernel sums the values it multiplies when A is transposed; the other paths run
// gemm() and then a plain loop over op(A) (gemm_row_sums_reference).
void gemm_row_sums(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool trans_a, const float* B,
                   int64_t ldb, bool trans_b, float* C, int64_t ldc, float* row_sums);
void gemm_row_sums(int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, bool trans_a, const double* B,
                   int64_t ldb, bool trans_b, double* C, int64_t ldc, double* row_sums);
// gemm() and then the row sums in a plain loop (each in double, k in order): the reference.
void gemm_row_sums_reference(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool trans_a, const float* B,
                             int64_t ldb, bool trans_b, float* C, int64_t ldc, float* row_sums);

// The plain reference every path is tested against: the triple loop over i, j, k, each element
// of op(A) op(B) summed in double in k order, then C = alpha * sum + beta * C rounded once
// (beta == 0: C write-only). Single-threaded; O(M N K) with no blocking (slow past ~10^8 flops).
void gemm_reference(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool trans_a, const float* B,
                    int64_t ldb, bool trans_b, float* C, int64_t ldc, float alpha = 1.0f, float beta = 0.0f);
void gemm_reference(int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, bool trans_a, const double* B,
                    int64_t ldb, bool trans_b, double* C, int64_t ldc, double alpha = 1.0, double beta = 0.0);

// The fast float paths gemm() chooses between, callable directly by tests and benchmarks (same
// arguments and semantics as gemm). They differ from gemm_reference by blocking for the caches
// (panels of A and B packed so the inner loop streams through L1) and by keeping a block of C in
// vector registers for the whole sum over k; they sum in float.
// Eigen's single-threaded blocked kernel on fixed tiles of C: gemm()'s path for double and on
// CPUs without AVX-512F, kept callable as the second fast implementation the packed kernel is
// compared with (bench_gemm's "Eigen" column).
void gemm_eigen(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool trans_a, const float* B, int64_t ldb,
                bool trans_b, float* C, int64_t ldc, float alpha, float beta);
// The packed AVX-512 kernel; returns false (C untouched) when the CPU lacks AVX-512F. bias: as
// gemm_bias (N values added to every row of C), or null. row_sums: as gemm_row_sums (M values),
// or null; asked of an untransposed A, or of an empty or alpha = 0 product, it returns false.
bool gemm_avx512(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool trans_a, const float* B,
                 int64_t ldb, bool trans_b, float* C, int64_t ldc, float alpha, float beta, const float* bias = nullptr,
                 float* row_sums = nullptr);

}  // namespace minidl::kernels::cpu
