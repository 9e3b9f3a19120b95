// kernels/cpu/attention_backward.cpp — packed_attention_backward (attention.h): per (b, h) pair,
// dP = dctx v^T, dS = P * (dP - rowsum(dP * P)), dq = scale * dS k, dk = scale * dS^T q,
// dv = P^T dctx, in vector registers on L1-resident scratch (attention_tiles.h), without the
// general gemm().
//
// When a row of dP fits in 4 vectors (float, L <= 64), its block of dP turns into dS while still
// in the registers of the product (`softmax_backward_tile`); longer rows, and float64, go through
// scratch rows. A causal head computes dP only for the key vectors that a block of rows sees and
// stores dS's zeros above the diagonal without computing them; the three products then skip the
// zero terms of P and dS (attention_tiles.h's Terms): dq sums keys k < i1 of rows i0..i1, dk and
// dv sum queries from i0 on (reading the zeros of P and dS above the diagonal inside a tile).
// Each head prefetches the next head's operands.
#include <algorithm>

#include "minidl/kernels/cpu/attention.h"
#include "minidl/kernels/cpu/attention_tiles.h"

namespace minidl::kernels::cpu {
namespace {
using namespace attention_tiles;

// Rows i0..i0+R of dS (rows Lp apart, all nl vectors stored) = P * (dP - rowsum(dP * P)), the
// R x NV block of dP = dctx vt summed in registers as in `tile` (NV vectors span the keys these
// rows see: all L, or causal, i0 + R; dS's vectors NV..nl zero); P's rows read from p (rows L
// apart, nothing past the keys a row sees read).
template <class T, int R, int NV>
[[gnu::noinline]] void softmax_backward_tile(const T* g, int64_t ldg, const T* vt, int64_t Lp, int64_t D, const T* p,
                                             int64_t L, int64_t i0, bool causal, int64_t nl, T* ds) {
  constexpr int64_t W = kLanes<T>;
  Lanes<T> acc[R][NV];
  accumulate<T, R, NV>(g, ldg, 1, vt, Lp, D, acc);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const int64_t n = causal ? i0 + r + 1 : L;
    Lanes<T> pr[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) pr[v] = v + 2 < NV ? load_lanes(p + r * L + v * W) : load_prefix(p + r * L, v, n);
    const T sd = row_dot<T, NV>(acc[r], pr, NV, n);
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) store_lanes(ds + r * Lp + v * W, pr[v] * (acc[r][v] - sd));
    for (int64_t v = NV; v < nl; ++v) store_lanes(ds + r * Lp + v * W, Lanes<T>{});
  }
}

// dS (L, Lp) from dctx, vt and P for rows of nl <= 4 vectors: tiles of 4 rows, then 2, then 1.
template <class T>
void softmax_backward_panel(int64_t nl, const T* g, int64_t ldg, const T* vt, int64_t Lp, int64_t D, const T* p,
                            int64_t L, bool causal, T* ds) {
  constexpr int64_t W = kLanes<T>;
  for_each_row_block(L, [&](auto r, int64_t i) {
    constexpr int R = decltype(r)::value;
    const int64_t seen = causal ? (std::min(i + R, L) + W - 1) / W : nl;  // key vectors these rows see
    with_vectors(seen, [&](auto nv) {
      softmax_backward_tile<T, R, decltype(nv)::value>(g + i * ldg, ldg, vt, Lp, D, p + i * L, L, i, causal, nl,
                                                       ds + i * Lp);
    });
  });
}

// One head: q, k, v (L, D) rows ld apart, g = dctx (L, D) rows ldg apart, p (L, L) ->
// dq, dk, dv (L, D) rows ld apart.
template <class T>
void backward_head(const T* q, const T* k, const T* v, int64_t ld, const T* g, int64_t ldg, const T* p, int64_t L,
                   int64_t D, T scale, bool causal, T* dq, T* dk, T* dv, T* scratch) {
  constexpr int64_t W = kLanes<T>;
  const int64_t Lp = round_up(L, W), Dp = round_up(D, W), nl = Lp / W;
  T* vt = scratch;  // (D, Lp)
  T* ds = vt + D * Lp;  // (L, Lp) dP (off the register path), then dS
  T* pp = ds + L * Lp;  // (Lp) one row of P, off the register path
  T* pad = pp + Lp;  // 4 x (L, Dp) when D % W != 0: q, k, dctx, a result
  transpose_padded(v, ld, L, D, T(1), vt, Lp);
  if (kRegisterRows<T> && nl <= 4) {  // dS = P * (dP - rowsum(dP * P)), dP = dctx v^T
    softmax_backward_panel(nl, g, ldg, vt, Lp, D, p, L, causal, ds);
  } else {  // rows too long for registers, or float64: dP in scratch first (causal: W rows at a time)
    const int64_t block = causal ? W : L;
    for (int64_t i0 = 0; i0 < L; i0 += block)
      products(std::min(block, L - i0), causal ? i0 / W + 1 : nl, g + i0 * ldg, ldg, 1, vt, Lp, D, T(1), ds + i0 * Lp,
               Lp);
    for (int64_t i = 0; i < L; ++i) {  // P's row copied into pp
      const int64_t n = causal ? i + 1 : L, nv = (n + W - 1) / W;
      Lanes<T>* pr = reinterpret_cast<Lanes<T>*>(pp);
      Lanes<T>* dr = reinterpret_cast<Lanes<T>*>(ds + i * Lp);
      for (int64_t c = 0; c < nv; ++c)
        pr[c] = c + 1 < nv ? load_lanes(p + i * L + c * W) : load_prefix(p + i * L, c, n);
      const T sd = row_dot<T, 0>(dr, pr, nv, n);
      for (int64_t c = 0; c < nv; ++c) dr[c] = pr[c] * (dr[c] - sd);
      for (int64_t c = nv; c < nl; ++c) dr[c] = Lanes<T>{};
    }
  }
  const T *qb = q, *kb = k, *gb = g;
  int64_t ldq = ld, ldgb = ldg;
  T* out = pad + 3 * L * Dp;
  if (D != Dp) {
    pad_rows(q, ld, L, D, pad, Dp);
    pad_rows(k, ld, L, D, pad + L * Dp, Dp);
    pad_rows(g, ldg, L, D, pad + 2 * L * Dp, Dp);
    qb = pad, kb = pad + L * Dp, gb = pad + 2 * L * Dp, ldq = Dp, ldgb = Dp;
  }
  // result (L, D) = alpha * A · B, straight into dst when D % W == 0
  auto result = [&](const T* A, int64_t ars, int64_t aks, const T* B, int64_t ldb, T alpha, Terms terms, T* dst) {
    if (D == Dp) {
      products(L, Dp / W, A, ars, aks, B, ldb, L, alpha, dst, ld, terms);
    } else {
      products(L, Dp / W, A, ars, aks, B, ldb, L, alpha, out, Dp, terms);
      unpad_rows(out, Dp, L, D, dst, ld);
    }
  };
  const Terms lower = causal ? Terms::UpToRow : Terms::All, upper = causal ? Terms::FromRow : Terms::All;
  result(ds, Lp, 1, kb, ldq, scale, lower, dq);  // dq = scale * dS k
  result(ds, 1, Lp, qb, ldq, scale, upper, dk);  // dk = scale * dS^T q
  result(p, 1, L, gb, ldgb, T(1), upper, dv);  // dv = P^T dctx
}
int64_t backward_scratch(int64_t L, int64_t D, int64_t W) {
  const int64_t Lp = round_up(L, W), Dp = round_up(D, W);
  return D * Lp + L * Lp + Lp + 4 * L * Dp;
}

template <class T>
void backward_impl(const T* qkv, const T* P, const T* dctx, int64_t B, int64_t L, int64_t H, int64_t D, T scale,
                   T* dqkv, bool causal) {
  if (L == 0) return;
  const int64_t E = H * D, ld = 3 * E, need = backward_scratch(L, D, kLanes<T>);
  parallel_for(B * H, 1, [&](int64_t t0, int64_t t1) {
    T* scratch = thread_scratch<T>(need);
    for (int64_t t = t0; t < t1; ++t) {
      const T* q = qkv + head_offset(t, H, L, D, ld);
      T* dq = dqkv + head_offset(t, H, L, D, ld);
      if (t + 1 < B * H) {  // the next head's q, k, v and dctx
        prefetch_qkv(qkv + head_offset(t + 1, H, L, D, ld), ld, E, L, D);
        prefetch_rows(dctx + head_offset(t + 1, H, L, D, E), E, L, D);
      }
      backward_head(q, q + E, q + 2 * E, ld, dctx + head_offset(t, H, L, D, E), E, P + t * L * L, L, D, scale, causal,
                    dq, dq + E, dq + 2 * E, scratch);
    }
  });
}

}  // namespace

void packed_attention_backward(const float* qkv, const float* P, const float* dctx, int64_t B, int64_t L, int64_t H,
                               int64_t D, float scale, float* dqkv, bool causal) {
  backward_impl(qkv, P, dctx, B, L, H, D, scale, dqkv, causal);
}
void packed_attention_backward(const double* qkv, const double* P, const double* dctx, int64_t B, int64_t L, int64_t H,
                               int64_t D, double scale, double* dqkv, bool causal) {
  backward_impl(qkv, P, dctx, B, L, H, D, scale, dqkv, causal);
}

}  // namespace minidl::kernels::cpu
