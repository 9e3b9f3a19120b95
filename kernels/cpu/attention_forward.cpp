// kernels/cpu/attention_forward.cpp — packed_attention_forward (attention.h): per (b, h) pair,
// S = scale * q k^T, P = softmax(S) (causal: keys j <= i only), ctx = P v, all in vector
// registers on L1-resident scratch (attention_tiles.h), without the general gemm().
//
// When a row of S fits in 4 vectors (float, L <= 64: the ViT's 50 tokens, the GPT's 64), the
// softmax works on the rows of S while they are still in the registers of the product and
// writes P straight out (`softmax_tile`); longer rows, and float64, go through scratch rows
// padded to a multiple of W. A causal head computes only the key vectors that a block of rows
// can see (rows i0..i1 need keys < i1: about half of S, block by block) and writes P's zeros
// above the diagonal without computing them; ctx = P v then sums each row block's keys < i1
// only. Each head prefetches the next head's operands.
#include <algorithm>

#include "minidl/kernels/cpu/attention.h"
#include "minidl/kernels/cpu/attention_tiles.h"

namespace minidl::kernels::cpu {
namespace {
using namespace attention_tiles;

// Rows i0..i0+R of P (rows L apart) = softmax of rows i0.. of S = q kt (kt already scaled), the
// R x NV block of S summed in registers as in `tile` and each row's softmax done there (NV
// vectors span the keys these rows see: all L, or causal, i0 + R).
template <class T, int R, int NV>
[[gnu::noinline]] void softmax_tile(const T* q, int64_t ld, const T* kt, int64_t Lp, int64_t D, int64_t L, int64_t i0,
                                    bool causal, T* p) {
  Lanes<T> acc[R][NV];
  accumulate<T, R, NV>(q, ld, 1, kt, Lp, D, acc);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) softmax_lanes<T, NV>(acc[r], NV, causal ? i0 + r + 1 : L, L, p + r * L);
}

// P (L, L) = softmax(q kt) for rows of nl <= 4 vectors: tiles of 4 rows, then 2, then 1.
template <class T>
void softmax_panel(int64_t nl, const T* q, int64_t ld, const T* kt, int64_t Lp, int64_t D, int64_t L, bool causal,
                   T* p) {
  constexpr int64_t W = kLanes<T>;
  for_each_row_block(L, [&](auto r, int64_t i) {
    constexpr int R = decltype(r)::value;
    const int64_t seen = causal ? (std::min(i + R, L) + W - 1) / W : nl;  // key vectors these rows see
    with_vectors(seen, [&](auto nv) {
      softmax_tile<T, R, decltype(nv)::value>(q + i * ld, ld, kt, Lp, D, L, i, causal, p + i * L);
    });
  });
}

// One head: q, k, v (L, D) rows ld apart -> p (L, L), ctx (L, D) rows ldc apart.
template <class T>
void forward_head(const T* q, const T* k, const T* v, int64_t ld, int64_t L, int64_t D, T scale, bool causal, T* p,
                  T* ctx, int64_t ldc, T* scratch) {
  constexpr int64_t W = kLanes<T>;
  const int64_t Lp = round_up(L, W), Dp = round_up(D, W), nl = Lp / W;
  T* kt = scratch;  // (D, Lp)
  T* s = kt + D * Lp;  // (L, Lp) off the register path
  T* vp = s + L * Lp;  // (L, Dp), when D % W != 0
  T* op = vp + L * Dp;  // (L, Dp), when D % W != 0
  // float: the scale applied to k as it is transposed (D * L multiplies, not L * L); float64: to
  // S as it always has been
  const T kt_scale = std::is_same_v<T, float> ? scale : T(1);
  transpose_padded(k, ld, L, D, kt_scale, kt, Lp);
  if (kRegisterRows<T> && nl <= 4) {  // P = softmax(scale * q k^T)
    softmax_panel(nl, q, ld, kt, Lp, D, L, causal, p);
  } else {  // rows too long for registers, or float64: S in scratch first (causal: W rows at a time)
    const int64_t block = causal ? W : L;
    for (int64_t i0 = 0; i0 < L; i0 += block)
      products(std::min(block, L - i0), causal ? i0 / W + 1 : nl, q + i0 * ld, ld, 1, kt, Lp, D, scale / kt_scale,
               s + i0 * Lp, Lp);
    for (int64_t i = 0; i < L; ++i) {
      const int64_t n = causal ? i + 1 : L;
      softmax_lanes<T, 0>(reinterpret_cast<Lanes<T>*>(s + i * Lp), (n + W - 1) / W, n, L, p + i * L);
    }
  }
  const Terms terms = causal ? Terms::UpToRow : Terms::All;
  if (D == Dp) {
    products(L, Dp / W, p, L, 1, v, ld, L, T(1), ctx, ldc, terms);  // ctx = P v
  } else {
    pad_rows(v, ld, L, D, vp, Dp);
    products(L, Dp / W, p, L, 1, vp, Dp, L, T(1), op, Dp, terms);
    unpad_rows(op, Dp, L, D, ctx, ldc);
  }
}
int64_t forward_scratch(int64_t L, int64_t D, int64_t W) {
  const int64_t Lp = round_up(L, W), Dp = round_up(D, W);
  return D * Lp + L * Lp + 2 * L * Dp;
}

template <class T>
void forward_impl(const T* qkv, int64_t B, int64_t L, int64_t H, int64_t D, T scale, T* P, T* ctx, bool causal) {
  if (L == 0) return;
  const int64_t E = H * D, ld = 3 * E, need = forward_scratch(L, D, kLanes<T>);
  parallel_for(B * H, 1, [&](int64_t t0, int64_t t1) {
    T* scratch = thread_scratch<T>(need);
    for (int64_t t = t0; t < t1; ++t) {
      const T* q = qkv + head_offset(t, H, L, D, ld);
      if (t + 1 < B * H) prefetch_qkv(qkv + head_offset(t + 1, H, L, D, ld), ld, E, L, D);  // the next head's
      forward_head(q, q + E, q + 2 * E, ld, L, D, scale, causal, P + t * L * L, ctx + head_offset(t, H, L, D, E), E,
                   scratch);
    }
  });
}

}  // namespace

void packed_attention_forward(const float* qkv, int64_t B, int64_t L, int64_t H, int64_t D, float scale, float* P,
                              float* ctx, bool causal) {
  forward_impl(qkv, B, L, H, D, scale, P, ctx, causal);
}
void packed_attention_forward(const double* qkv, int64_t B, int64_t L, int64_t H, int64_t D, double scale, double* P,
                              double* ctx, bool causal) {
  forward_impl(qkv, B, L, H, D, scale, P, ctx, causal);
}

}  // namespace minidl::kernels::cpu
