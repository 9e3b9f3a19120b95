// kernels/cpu/attention.h — multi-head self-attention read straight from the packed projection.
//
// qkv (B, L, 3E) row-major holds q, k and v side by side, E = H * D. Head h of q in batch b is
// the (L, D) matrix at qkv + b*L*3E + h*D with leading dimension 3E (k at + E, v at + 2E), so
// the kernels read each head in place and write the context straight into (B, L, E) at column
// h*D: the head split and merge (reshape, permute, slice and their backward) copy nothing.
//   forward:  P (B, H, L, L) = softmax(scale * q k^T)   ctx (B, L, E) = P v
//             causal: query i attends to keys j <= i only (P zero above the diagonal)
//   backward: dP = dctx v^T   dv = P^T dctx   dS = P * (dP - rowsum(dP * P))
//             dq = scale * dS k   dk = scale * dS^T q     (into dqkv (B, L, 3E), q's/k's/v's columns)
// One (b, h) pair is one task on one thread; tasks write disjoint memory, so every result is
// the same whatever the thread count.
//
// packed_attention_forward / _backward (attention_forward.cpp, attention_backward.cpp, their
// shared tiles in attention_tiles.h) do each (b, h) pair's small products in L1-resident scratch
// with vector registers, without the general gemm(); the *_reference templates below compose
// gemm(), the causal mask and the softmax rows, and are what tests/kernels/test_cpu_attention.cpp
// checks the fast kernels against. The fast kernels are faster because products this small
// (50 x 16 by 16 x 50) cost less than gemm()'s per-call packing, because the softmax (and its
// backward) runs on S's rows while they are still in registers instead of in a second pass over
// memory (bench_attention times the two), and, causal, because they skip the masked half of
// every product instead of computing it and masking it.
#pragma once
#include <cstdint>
#include <limits>
#include <type_traits>

#include "minidl/kernels/cpu/gemm.h"
#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/cpu/softmax.h"

namespace minidl::kernels::cpu {

// qkv (B, L, 3E) -> P (B, H, L, L), ctx (B, L, E)
void packed_attention_forward(const float* qkv, int64_t B, int64_t L, int64_t H, int64_t D, float scale, float* P,
                              float* ctx, bool causal = false);
void packed_attention_forward(const double* qkv, int64_t B, int64_t L, int64_t H, int64_t D, double scale, double* P,
                              double* ctx, bool causal = false);
// qkv (B, L, 3E), P (B, H, L, L), dctx (B, L, E) -> dqkv (B, L, 3E). causal: P as the causal
// forward writes it, zero above the diagonal (those zeros are read, the rest of that half is not).
void packed_attention_backward(const float* qkv, const float* P, const float* dctx, int64_t B, int64_t L, int64_t H,
                               int64_t D, float scale, float* dqkv, bool causal = false);
void packed_attention_backward(const double* qkv, const double* P, const double* dctx, int64_t B, int64_t L, int64_t H,
                               int64_t D, double scale, double* dqkv, bool causal = false);

// The same attention with bfloat16 products (attention_bf16.cpp; autocast's, as PyTorch's autocast
// multiplies its matmuls' operands in bfloat16): every product's operands — q, k, v, dctx, and P
// and dS as the products read them — rounded to bfloat16 (round to nearest even; values that are
// bfloat16 numbers already stay as they are; the kernels flush float32 subnormals to zero, as
// vdpbf16ps reads them), float32 sums; S, the softmax, P as stored, dS's
// formula and the results float32. On AVX512_BF16 (vdpbf16ps: two products per float lane);
// false, nothing written, where the CPU lacks it or the build does not target it
// (packed_attention_bf16_supported). Causal as above.
bool packed_attention_bf16_supported();
bool packed_attention_forward_bf16(const float* qkv, int64_t B, int64_t L, int64_t H, int64_t D, float scale, float* P,
                                   float* ctx, bool causal = false);
bool packed_attention_backward_bf16(const float* qkv, const float* P, const float* dctx, int64_t B, int64_t L,
                                    int64_t H, int64_t D, float scale, float* dqkv, bool causal = false);
// Their references: each head's operands rounded into bfloat16 copies, gemm_bf16_reference for
// each product, softmax_row and softmax_backward_row between them (one thread).
void packed_attention_forward_bf16_reference(const float* qkv, int64_t B, int64_t L, int64_t H, int64_t D, float scale,
                                             float* P, float* ctx, bool causal = false);
void packed_attention_backward_bf16_reference(const float* qkv, const float* P, const float* dctx, int64_t B, int64_t L,
                                              int64_t H, int64_t D, float scale, float* dqkv, bool causal = false);

// The reference: gemm() on each head's strided views, the causal mask added to the scores
// (-inf above the diagonal) and softmax_row; `work` is (B, H, L, L) scratch for dP / dS. The
// backward needs no mask: softmax_backward_row gives dS = 0 where P = 0.
template <class T>
void packed_attention_forward_reference(const T* qkv, int64_t B, int64_t L, int64_t H, int64_t D, T scale, T* P, T* ctx,
                                        bool causal = false) {
  const int64_t E = H * D, ld = 3 * E;
  parallel_for(B * H, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / H, h = t % H;
      const T* q = qkv + b * L * ld + h * D;
      T* p = P + t * L * L;
      gemm(L, L, D, q, ld, false, q + E, ld, true, p, L, scale, T(0));  // scale * q k^T
      if (causal)
        for (int64_t i = 0; i < L; ++i)
          for (int64_t j = i + 1; j < L; ++j) p[i * L + j] = -std::numeric_limits<T>::infinity();
      for (int64_t i = 0; i < L; ++i) softmax_row(p + i * L, p + i * L, L, std::integral_constant<int64_t, 1>{}, false);
      gemm(L, D, L, p, L, false, q + 2 * E, ld, false, ctx + b * L * E + h * D, E);  // P v
    }
  });
}

template <class T>
void packed_attention_backward_reference(const T* qkv, const T* P, const T* dctx, int64_t B, int64_t L, int64_t H,
                                         int64_t D, T scale, T* work, T* dqkv) {  // causal or not
  const int64_t E = H * D, ld = 3 * E;
  parallel_for(B * H, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / H, h = t % H;
      const T* q = qkv + b * L * ld + h * D;
      const T* p = P + t * L * L;
      const T* g = dctx + b * L * E + h * D;
      T* dq = dqkv + b * L * ld + h * D;
      T* ds = work + t * L * L;
      gemm(L, L, D, g, E, false, q + 2 * E, ld, true, ds, L);  // dP = dctx v^T
      gemm(L, D, L, p, L, true, g, E, false, dq + 2 * E, ld);  // dv = P^T dctx
      for (int64_t i = 0; i < L; ++i)
        softmax_backward_row(p + i * L, ds + i * L, ds + i * L, L, std::integral_constant<int64_t, 1>{}, false);
      gemm(L, D, L, ds, L, false, q + E, ld, false, dq, ld, scale, T(0));  // dq = scale * dS k
      gemm(L, D, L, ds, L, true, q, ld, false, dq + E, ld, scale, T(0));  // dk = scale * dS^T q
    }
  });
}

}  // namespace minidl::kernels::cpu
