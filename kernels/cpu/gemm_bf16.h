// kernels/cpu/gemm_bf16.h — matrix multiply of bfloat16 operands into a float32 result on the
// CPU: two packed kernels — AMX tiles (gemm_bf16_amx.cpp) and AVX512_BF16 vectors (gemm_bf16.cpp)
// — the choice between them, and the plain loop both are tested against.
//
//   C (M, N) = alpha * op(A) (M, K) · op(B) (K, N) + beta * C
//
// A and B hold bfloat16 bit patterns (kernels/cpu/half.h), C is float32. Layouts, leading
// dimensions and transposes as gemm() in gemm.h: all row-major; op(A) = A stored (M, K), lda >= K,
// or A^T stored (K, M), lda >= M when trans_a (the same for B: (K, N) with ldb >= N, or (N, K)
// with ldb >= K when trans_b); C (M, N), ldc >= N. beta == 0 means C is write-only (its old
// contents, even NaN, are ignored). round_bf16: C is stored rounded to bfloat16 precision (float32
// values that are bfloat16 numbers: half.h's rounding of the float32 result, without a pass of its
// own). Threads: kernels::cpu::set_num_threads; the result is bit-identical for any thread count
// (work is split over blocks of C, or over K blocks whose partial products are then added in the
// order one thread adds them).
#pragma once
#include <cstdint>

namespace minidl::kernels::cpu {

// The fastest kernel this CPU runs, chosen once: AMX where the CPU has AMX-BF16 and the kernel
// grants its tile state, else AVX512_BF16. Returns false, C untouched, where neither runs (the
// library itself may be built for any x86-64 level).
bool gemm_bf16(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool trans_a, const uint16_t* B,
               int64_t ldb, bool trans_b, float* C, int64_t ldc, float alpha = 1.0f, float beta = 0.0f,
               bool round_bf16 = false);

// C (M, N) = op(A) op(B) + bias (N values, added to every row); C is write-only. The bias is each
// sum's starting value, so C is written once (where C = bias, then C += the product, reads and
// writes it three times); round_bf16 as above. The same choice of kernel; false, C untouched,
// where neither runs.
bool gemm_bf16_bias(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool trans_a, const uint16_t* B,
                    int64_t ldb, bool trans_b, const float* bias, float* C, int64_t ldc, bool round_bf16 = false);

// C (M, N) = op(A) op(B), and row_sums (M) = the sums of op(A)'s rows, each added up in double in
// k order (the AMX kernel: each of its K blocks from zero in k order, then the blocks' sums in
// order), then rounded (gemm_row_sums in gemm.h): with A = dy (rows, out) transposed and B = x
// (rows, in), a bfloat16 linear layer's dW and db, the sums gathered while A is packed instead of
// in a pass over dy of their own. A transposed A only: false, C untouched, for an untransposed one,
// an empty product (M, N or K 0) or where neither kernel runs. The same choice of kernel as gemm_bf16; C as gemm_bf16 gives it.
bool gemm_bf16_row_sums(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool trans_a,
                        const uint16_t* B, int64_t ldb, bool trans_b, float* C, int64_t ldc, float* row_sums);

// Whether gemm_bf16 runs here (either kernel below does).
bool gemm_bf16_supported();

// The AVX512_BF16 kernel (one vdpbf16ps adds two bf16 products per float lane); false, C
// untouched, without AVX512_BF16, AVX512BW and AVX512VL.
bool gemm_bf16_avx512(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool trans_a, const uint16_t* B,
                      int64_t ldb, bool trans_b, float* C, int64_t ldc, float alpha = 1.0f, float beta = 0.0f,
                      bool round_bf16 = false);
bool gemm_bf16_avx512_bias(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool trans_a,
                           const uint16_t* B, int64_t ldb, bool trans_b, const float* bias, float* C, int64_t ldc,
                           bool round_bf16 = false);
bool gemm_bf16_avx512_row_sums(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool trans_a,
                               const uint16_t* B, int64_t ldb, bool trans_b, float* C, int64_t ldc, float* row_sums);
bool gemm_bf16_avx512_supported();

// The AMX kernel (one tdpbf16ps multiplies a 16x32 bf16 tile by a 32x16 one into a 16x16 float32
// tile); false, C untouched, without AMX-BF16 and AVX512BW/VL, or where Linux refuses the tile
// state (arch_prctl ARCH_REQ_XCOMP_PERM, asked once per process).
bool gemm_bf16_amx(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool trans_a, const uint16_t* B,
                   int64_t ldb, bool trans_b, float* C, int64_t ldc, float alpha = 1.0f, float beta = 0.0f,
                   bool round_bf16 = false);
bool gemm_bf16_amx_bias(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool trans_a,
                        const uint16_t* B, int64_t ldb, bool trans_b, const float* bias, float* C, int64_t ldc,
                        bool round_bf16 = false);
bool gemm_bf16_amx_row_sums(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool trans_a,
                            const uint16_t* B, int64_t ldb, bool trans_b, float* C, int64_t ldc, float* row_sums);
bool gemm_bf16_amx_supported();

// The plain triple loop a student writes first: each element of C is one float32 sum over k in
// order of the float32 products of the widened operands; then alpha and beta (and the rounding).
// The reference.
void gemm_bf16_reference(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool trans_a,
                         const uint16_t* B, int64_t ldb, bool trans_b, float* C, int64_t ldc, float alpha = 1.0f,
                         float beta = 0.0f, bool round_bf16 = false);
// gemm_bf16_reference, then each row of op(A) summed in a plain loop (in double, k in order).
void gemm_bf16_row_sums_reference(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool trans_a,
                                  const uint16_t* B, int64_t ldb, bool trans_b, float* C, int64_t ldc, float* row_sums);

}  // namespace minidl::kernels::cpu
