// kernels/cpu/attention.cpp — the packed self-attention kernels of attention.h: each (b, h) pair's
// products done in vector registers on L1-resident scratch, without the general gemm().
//
// Every product of one head is C = alpha * A · B where C's rows and B's rows are W lanes wide
// (W = kLanes<T>: vec_math.h's Lanes<T>, 16 floats or 8 doubles) and A is read one element at a time and broadcast:
//   S   (L, L) = scale * q · kt     kt (D, L): k transposed once per head, keys in lanes
//                                   (float: the scale folded into kt as it is transposed)
//   ctx (L, D) = P · v              v's rows as they lie in qkv, D in lanes
//   dP  (L, L) = dctx · vt
//   dq = scale * dS · k    dk = scale * dS^T · q    dv = P^T · dctx    (dS^T, P^T: A read by columns)
// `tile` keeps an R x NV block of C in R * NV vector registers for the whole sum over k, which
// runs in order k = 0..K-1 for every element. When a row of S fits in 4 vectors (float, L <= 64:
// the ViT's 50 tokens), the softmax works on the rows of S while they are still in those registers
// and writes P straight out; the backward likewise turns its block of dP into dS in registers
// (`softmax_tile`, `softmax_backward_tile`). Longer rows go through scratch rows padded to a
// multiple of W. The softmax's sum and the backward's row sum are in T's lanes (float sums for
// float: against a float64 reference their results err as much as the double-sum reference's),
// added in a fixed order that depends only on L. k and v are transposed 16 x 16 floats
// at a time in registers. When D is not a multiple of W, the operands read as vector rows are
// copied into zero-padded scratch first and the results copied out. The scratch is one buffer
// per thread, grown when a call needs more and kept for the next call. Each head prefetches the
// next head's operands.
#include "minidl/kernels/cpu/attention.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <type_traits>

#include "minidl/kernels/cpu/vec_math.h"

namespace minidl::kernels::cpu {
namespace {

// exp(x) for x <= 0 on every lane: the vectorised polynomial for float (vec_math.h), std::exp
// for double (the float64 softmax's own function)
inline FloatLanes exp_lanes(FloatLanes x) { return exp_nonpositive(x); }
inline DoubleLanes exp_lanes(DoubleLanes x) {
  for (int l = 0; l < 8; ++l) x[l] = std::exp(x[l]);
  return x;
}

// Left alone, GCC folds the loads of B's row into each of the R FMAs that use it (R loads of a
// whole vector instead of one, the load ports then the limit); an empty asm that takes and
// gives back the register makes it load the row once.
template <class V> void keep_in_register([[maybe_unused]] V& v) {
#if defined(__AVX512F__)
  __asm__("" : "+v"(v));
#endif
}

// acc (R, NV * W) = A (R, K) · B (K, NV * W), A(r, k) at A[r * ars + k * aks], rows of B ldb
// apart: the block of C that `tile` stores, left in registers (callers inline it).
template <class T, int R, int NV>
inline void accumulate(const T* A, int64_t ars, int64_t aks, const T* B, int64_t ldb, int64_t K,
                       Lanes<T> (&acc)[R][NV]) {
  constexpr int64_t W = kLanes<T>;
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = Lanes<T>{};
  for (int64_t k = 0; k < K; ++k) {
    const T* a = A + k * aks;
    Lanes<T> b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      b[v] = load_lanes(B + k * ldb + v * W);
      keep_in_register(b[v]);
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const T ar = a[r * ars];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] += ar * b[v];
    }
  }
}

// C (R, NV * W) = alpha * A (R, K) · B (K, NV * W), rows of C ldc apart.
template <class T, int R, int NV>
void tile(const T* A, int64_t ars, int64_t aks, const T* B, int64_t ldb, int64_t K, T alpha, T* C, int64_t ldc) {
  constexpr int64_t W = kLanes<T>;
  Lanes<T> acc[R][NV];
  accumulate<T, R, NV>(A, ars, aks, B, ldb, K, acc);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) store_lanes(C + r * ldc + v * W, acc[r][v] * alpha);
}

// All M rows of C for NV vector columns: tiles of R rows (R * NV accumulators), then 8, 4, 2, 1.
// One vector column takes R = 10 (10 independent sums keep both FMA ports busy), and when M >= R
// is not a multiple of R the last tile is the R rows ending at M: it recomputes rows of the
// previous tile (the same sums in the same order, so the same bits) instead of running a short
// tile whose few sums wait on each other's FMA latency.
template <class T, int NV>
void panel(int64_t M, const T* A, int64_t ars, int64_t aks, const T* B, int64_t ldb, int64_t K, T alpha, T* C,
           int64_t ldc) {
  constexpr int R = NV == 1 ? 10 : 4;
  int64_t i = 0;
  for (; i + R <= M; i += R) tile<T, R, NV>(A + i * ars, ars, aks, B, ldb, K, alpha, C + i * ldc, ldc);
  if constexpr (NV == 1) {
    if (i > 0 && i < M) {
      tile<T, R, NV>(A + (M - R) * ars, ars, aks, B, ldb, K, alpha, C + (M - R) * ldc, ldc);
      return;
    }
    if (i + 8 <= M) {
      tile<T, 8, NV>(A + i * ars, ars, aks, B, ldb, K, alpha, C + i * ldc, ldc);
      i += 8;
    }
  }
  if constexpr (R > 4) {
    if (i + 4 <= M) {
      tile<T, 4, NV>(A + i * ars, ars, aks, B, ldb, K, alpha, C + i * ldc, ldc);
      i += 4;
    }
  }
  if (i + 2 <= M) {
    tile<T, 2, NV>(A + i * ars, ars, aks, B, ldb, K, alpha, C + i * ldc, ldc);
    i += 2;
  }
  if (i < M) tile<T, 1, NV>(A + i * ars, ars, aks, B, ldb, K, alpha, C + i * ldc, ldc);
}

// C (M, nv * W) = alpha * A (M, K) · B (K, nv * W), in column blocks of up to 4 vectors.
template <class T>
void products(int64_t M, int64_t nv, const T* A, int64_t ars, int64_t aks, const T* B, int64_t ldb, int64_t K,
              T alpha, T* C, int64_t ldc) {
  constexpr int64_t W = kLanes<T>;
  for (int64_t c = 0; c < nv; c += 4) {
    const T* b = B + c * W;
    T* out = C + c * W;
    switch (nv - c < 4 ? nv - c : 4) {
      case 1: panel<T, 1>(M, A, ars, aks, b, ldb, K, alpha, out, ldc); break;
      case 2: panel<T, 2>(M, A, ars, aks, b, ldb, K, alpha, out, ldc); break;
      case 3: panel<T, 3>(M, A, ars, aks, b, ldb, K, alpha, out, ldc); break;
      default: panel<T, 4>(M, A, ars, aks, b, ldb, K, alpha, out, ldc); break;
    }
  }
}

// dst (D, Lp) = alpha * src (L, D; rows ld apart) transposed, columns L.. zero. Float: 16 x 16
// blocks loaded as rows (masked past D, zero past L), transposed in registers and stored as
// rows; double: element by element.
template <class T>
void transpose_padded(const T* src, int64_t ld, int64_t L, int64_t D, T alpha, T* dst, int64_t Lp) {
  if constexpr (std::is_same_v<T, float>) {
    for (int64_t d0 = 0; d0 < D; d0 += 16) {
      const int64_t nd = D - d0 < 16 ? D - d0 : 16;
      for (int64_t j0 = 0; j0 < Lp; j0 += 16) {
        FloatLanes m[16];
#pragma GCC unroll 16
        for (int64_t jj = 0; jj < 16; ++jj) {  // rows past L: no lanes loaded
          const bool real = j0 + jj < L;
          m[jj] = load_first_lanes(src + (real ? j0 + jj : 0) * ld + d0, real ? nd : 0);
        }
        transpose16(m);
#pragma GCC unroll 16
        for (int64_t dd = 0; dd < 16; ++dd)
          if (dd < nd) store_lanes(dst + (d0 + dd) * Lp + j0, m[dd] * alpha);
      }
    }
  } else {
    for (int64_t d = 0; d < D; ++d) {
      T* row = dst + d * Lp;
      for (int64_t j = 0; j < L; ++j) row[j] = alpha * src[j * ld + d];
      for (int64_t j = L; j < Lp; ++j) row[j] = T(0);
    }
  }
}

// dst (L, Dp) = src (L, D; rows ld apart), columns D.. zero
template <class T> void pad_rows(const T* src, int64_t ld, int64_t L, int64_t D, T* dst, int64_t Dp) {
  for (int64_t j = 0; j < L; ++j) {
    std::memcpy(dst + j * Dp, src + j * ld, sizeof(T) * D);
    std::memset(dst + j * Dp + D, 0, sizeof(T) * (Dp - D));
  }
}

// dst (L, D; rows ld apart) = the first D columns of src (L, Dp)
template <class T> void unpad_rows(const T* src, int64_t Dp, int64_t L, int64_t D, T* dst, int64_t ld) {
  for (int64_t j = 0; j < L; ++j) std::memcpy(dst + j * ld, src + j * Dp, sizeof(T) * D);
}

// p (L) = softmax(x (nv vectors)), (nv - 1) * W < L <= nv * W; x's lanes L.. ignored, x
// overwritten. Numerically stable (the row max subtracted); all -inf gives NaN as in PyTorch.
// The sum is in T's lanes: the vectors added in order, then the lanes as a fixed tree.
// NV: nv when known at compile time (x in registers: always inlined, so that x stays there),
// 0 for scratch rows.
template <class T, int NV> [[gnu::always_inline]] inline void softmax_lanes(Lanes<T>* x, int64_t nv_, int64_t L, T* p) {
  constexpr int64_t W = kLanes<T>;
  const int64_t nv = NV ? NV : nv_;
  const int64_t tail = L - (nv - 1) * W;
  const T inf = std::numeric_limits<T>::infinity();
  x[nv - 1] = keep_first_lanes(x[nv - 1], tail, -inf);
  Lanes<T> mv = x[0];
  for (int64_t v = 1; v < nv; ++v) mv = x[v] > mv ? x[v] : mv;
  T m = horizontal_max(mv);
  if (std::isinf(m) && m < 0) m = T(0);  // all -inf: avoid (-inf) - (-inf) = NaN
  Lanes<T> sum = {};
  for (int64_t v = 0; v < nv; ++v) {
    x[v] = exp_lanes(x[v] - m);  // lanes L..: exp(-inf) = 0
    sum += x[v];
  }
  const T inv = T(1) / horizontal_sum(sum);
  for (int64_t v = 0; v + 1 < nv; ++v) store_lanes(p + v * W, x[v] * inv);
  store_first_lanes(p + (nv - 1) * W, x[nv - 1] * inv, tail);
}

// Rows i0..i0+R of P (rows L apart) = softmax of rows i0.. of S = q kt (kt already scaled), the
// R x NV block of S summed in registers as in `tile` and each row's softmax done there (NV
// vectors span L).
template <class T, int R, int NV>
void softmax_tile(const T* q, int64_t ld, const T* kt, int64_t Lp, int64_t D, int64_t L, T* p) {
  Lanes<T> acc[R][NV];
  accumulate<T, R, NV>(q, ld, 1, kt, Lp, D, acc);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) softmax_lanes<T, NV>(acc[r], NV, L, p + r * L);
}

// P (L, L) = softmax(q kt) for rows of NV vectors: tiles of 4 rows, then 2, then 1.
template <class T, int NV>
void softmax_panel(const T* q, int64_t ld, const T* kt, int64_t Lp, int64_t D, int64_t L, T* p) {
  int64_t i = 0;
  for (; i + 4 <= L; i += 4) softmax_tile<T, 4, NV>(q + i * ld, ld, kt, Lp, D, L, p + i * L);
  if (i + 2 <= L) {
    softmax_tile<T, 2, NV>(q + i * ld, ld, kt, Lp, D, L, p + i * L);
    i += 2;
  }
  if (i < L) softmax_tile<T, 1, NV>(q + i * ld, ld, kt, Lp, D, L, p + i * L);
}

// sum of d * p over nv vectors, the last one's lanes tail.. left out; in T's lanes, in a fixed
// order. For float it is a few ulps of the terms from the reference's double sum, which shows
// where dS = P * (dP - sum) cancels (peaked rows); test_cpu_attention.cpp bounds the effect on
// the gradients. NV as in softmax_lanes.
template <class T, int NV>
[[gnu::always_inline]] inline T row_dot(const Lanes<T>* d, const Lanes<T>* p, int64_t nv_, int64_t tail) {
  const int64_t nv = NV ? NV : nv_;
  Lanes<T> s = {};
  for (int64_t c = 0; c < nv; ++c) {
    Lanes<T> prod = d[c] * p[c];
    if (c == nv - 1) prod = keep_first_lanes(prod, tail, T(0));
    s += prod;
  }
  return horizontal_sum(s);
}

// Rows i0..i0+R of dS (rows Lp apart, all NV vectors stored) = P * (dP - rowsum(dP * P)), the
// R x NV block of dP = dctx vt summed in registers as in `tile`; P's rows read from p (rows L
// apart, nothing past L read).
template <class T, int R, int NV>
void softmax_backward_tile(const T* g, int64_t ldg, const T* vt, int64_t Lp, int64_t D, const T* p, int64_t L,
                           T* ds) {
  constexpr int64_t W = kLanes<T>;
  const int64_t tail = L - (NV - 1) * W;
  Lanes<T> acc[R][NV];
  accumulate<T, R, NV>(g, ldg, 1, vt, Lp, D, acc);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    Lanes<T> pr[NV];
#pragma GCC unroll 4
    for (int v = 0; v + 1 < NV; ++v) pr[v] = load_lanes(p + r * L + v * W);
    pr[NV - 1] = load_first_lanes(p + r * L + (NV - 1) * W, tail);
    const T sd = row_dot<T, NV>(acc[r], pr, NV, tail);
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) store_lanes(ds + r * Lp + v * W, pr[v] * (acc[r][v] - sd));
  }
}

// dS (L, Lp) from dctx, vt and P for rows of NV vectors: tiles of 4 rows, then 2, then 1.
template <class T, int NV>
void softmax_backward_panel(const T* g, int64_t ldg, const T* vt, int64_t Lp, int64_t D, const T* p, int64_t L,
                            T* ds) {
  int64_t i = 0;
  for (; i + 4 <= L; i += 4) softmax_backward_tile<T, 4, NV>(g + i * ldg, ldg, vt, Lp, D, p + i * L, L, ds + i * Lp);
  if (i + 2 <= L) {
    softmax_backward_tile<T, 2, NV>(g + i * ldg, ldg, vt, Lp, D, p + i * L, L, ds + i * Lp);
    i += 2;
  }
  if (i < L) softmax_backward_tile<T, 1, NV>(g + i * ldg, ldg, vt, Lp, D, p + i * L, L, ds + i * Lp);
}

// One buffer per thread, 64-byte aligned, grown on demand and kept.
struct ScratchBuffer {
  std::unique_ptr<void, decltype(&std::free)> data{nullptr, &std::free};
  size_t bytes = 0;
  void* get(size_t n) {
    if (n > bytes) {
      const size_t rounded = (n + 63) / 64 * 64;
      data.reset(std::aligned_alloc(64, rounded));
      if (!data) throw std::bad_alloc();
      bytes = rounded;
    }
    return data.get();
  }
};
template <class T> T* thread_scratch(int64_t elements) {
  thread_local ScratchBuffer buffer;
  return static_cast<T*>(buffer.get(static_cast<size_t>(elements) * sizeof(T)));
}

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// Whether rows of up to 4 vectors take the register paths (softmax_panel,
// softmax_backward_panel): float only; float64 keeps the scratch rows, whose sums round as they
// always have (the register path's unrolled row_dot would contract into FMAs).
template <class T> constexpr bool kRegisterRows = std::is_same_v<T, float>;

// One head: q, k, v (L, D) rows ld apart -> p (L, L), ctx (L, D) rows ldc apart.
template <class T>
void forward_head(const T* q, const T* k, const T* v, int64_t ld, int64_t L, int64_t D, T scale, T* p, T* ctx,
                  int64_t ldc, T* scratch) {
  constexpr int64_t W = kLanes<T>;
  const int64_t Lp = round_up(L, W), Dp = round_up(D, W), nl = Lp / W;
  T* kt = scratch;         // (D, Lp)
  T* s = kt + D * Lp;      // (L, Lp) off the register path
  T* vp = s + L * Lp;      // (L, Dp), when D % W != 0
  T* op = vp + L * Dp;     // (L, Dp), when D % W != 0
  // float: the scale applied to k as it is transposed (D * L multiplies, not L * L); float64: to
  // S as it always has been
  const T kt_scale = std::is_same_v<T, float> ? scale : T(1);
  transpose_padded(k, ld, L, D, kt_scale, kt, Lp);
  switch (kRegisterRows<T> ? nl : 0) {  // P = softmax(scale * q k^T)
    case 1: softmax_panel<T, 1>(q, ld, kt, Lp, D, L, p); break;
    case 2: softmax_panel<T, 2>(q, ld, kt, Lp, D, L, p); break;
    case 3: softmax_panel<T, 3>(q, ld, kt, Lp, D, L, p); break;
    case 4: softmax_panel<T, 4>(q, ld, kt, Lp, D, L, p); break;
    default:  // rows too long for registers, or float64: S in scratch first
      products(L, nl, q, ld, 1, kt, Lp, D, scale / kt_scale, s, Lp);
      for (int64_t i = 0; i < L; ++i) softmax_lanes<T, 0>(reinterpret_cast<Lanes<T>*>(s + i * Lp), nl, L, p + i * L);
  }
  if (D == Dp) {
    products(L, Dp / W, p, L, 1, v, ld, L, T(1), ctx, ldc);  // ctx = P v
  } else {
    pad_rows(v, ld, L, D, vp, Dp);
    products(L, Dp / W, p, L, 1, vp, Dp, L, T(1), op, Dp);
    unpad_rows(op, Dp, L, D, ctx, ldc);
  }
}
int64_t forward_scratch(int64_t L, int64_t D, int64_t W) {
  const int64_t Lp = round_up(L, W), Dp = round_up(D, W);
  return D * Lp + L * Lp + 2 * L * Dp;
}

// One head: q, k, v (L, D) rows ld apart, g = dctx (L, D) rows ldg apart, p (L, L) ->
// dq, dk, dv (L, D) rows ld apart.
template <class T>
void backward_head(const T* q, const T* k, const T* v, int64_t ld, const T* g, int64_t ldg, const T* p, int64_t L,
                   int64_t D, T scale, T* dq, T* dk, T* dv, T* scratch) {
  constexpr int64_t W = kLanes<T>;
  const int64_t Lp = round_up(L, W), Dp = round_up(D, W), nl = Lp / W, tail = L - (nl - 1) * W;
  T* vt = scratch;         // (D, Lp)
  T* ds = vt + D * Lp;     // (L, Lp) dP (off the register path), then dS
  T* pp = ds + L * Lp;     // (Lp) one row of P, off the register path
  T* pad = pp + Lp;        // 4 x (L, Dp) when D % W != 0: q, k, dctx, a result
  transpose_padded(v, ld, L, D, T(1), vt, Lp);
  switch (kRegisterRows<T> ? nl : 0) {  // dS = P * (dP - rowsum(dP * P)), dP = dctx v^T
    case 1: softmax_backward_panel<T, 1>(g, ldg, vt, Lp, D, p, L, ds); break;
    case 2: softmax_backward_panel<T, 2>(g, ldg, vt, Lp, D, p, L, ds); break;
    case 3: softmax_backward_panel<T, 3>(g, ldg, vt, Lp, D, p, L, ds); break;
    case 4: softmax_backward_panel<T, 4>(g, ldg, vt, Lp, D, p, L, ds); break;
    default:  // rows too long for registers, or float64: dP in scratch first, P's row copied into pp
      products(L, nl, g, ldg, 1, vt, Lp, D, T(1), ds, Lp);
      for (int64_t i = 0; i < L; ++i) {
        Lanes<T>* pr = reinterpret_cast<Lanes<T>*>(pp);
        Lanes<T>* dr = reinterpret_cast<Lanes<T>*>(ds + i * Lp);
        for (int64_t c = 0; c + 1 < nl; ++c) pr[c] = load_lanes(p + i * L + c * W);
        pr[nl - 1] = load_first_lanes(p + i * L + (nl - 1) * W, tail);
        const T sd = row_dot<T, 0>(dr, pr, nl, tail);
        for (int64_t c = 0; c < nl; ++c) dr[c] = pr[c] * (dr[c] - sd);
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
  auto result = [&](const T* A, int64_t ars, int64_t aks, const T* B, int64_t ldb, T alpha, T* dst) {
    if (D == Dp) {
      products(L, Dp / W, A, ars, aks, B, ldb, L, alpha, dst, ld);
    } else {
      products(L, Dp / W, A, ars, aks, B, ldb, L, alpha, out, Dp);
      unpad_rows(out, Dp, L, D, dst, ld);
    }
  };
  result(ds, Lp, 1, kb, ldq, scale, dq);  // dq = scale * dS k
  result(ds, 1, Lp, qb, ldq, scale, dk);  // dk = scale * dS^T q
  result(p, 1, L, gb, ldgb, T(1), dv);    // dv = P^T dctx
}
int64_t backward_scratch(int64_t L, int64_t D, int64_t W) {
  const int64_t Lp = round_up(L, W), Dp = round_up(D, W);
  return D * Lp + L * Lp + Lp + 4 * L * Dp;
}

// Asks for the cache lines of L rows of n elements, ld apart: the next head's operands, fetched
// while this head computes (parallel_for's chunks are single heads, so "next" is t + 1 whichever
// thread runs it). In a training step the operands come from memory, not cache, and their rows
// (3E or E elements apart) were each head's first loads to wait: 1-thread ViT attention ~10%
// faster. (Prefetching dqkv's lines for writing made it slower.)
template <class T> void prefetch_rows(const T* p, int64_t ld, int64_t L, int64_t n) {
  constexpr int64_t kLine = 64 / sizeof(T);
  for (int64_t j = 0; j < L; ++j)
    for (int64_t c = 0; c < n; c += kLine) __builtin_prefetch(p + j * ld + c);
}
// q, k and v of one head (E apart in its rows), as prefetch_rows asks for them
template <class T> void prefetch_qkv(const T* q, int64_t ld, int64_t E, int64_t L, int64_t D) {
  for (int64_t part = 0; part < 3; ++part) prefetch_rows(q + part * E, ld, L, D);
}

// Where head t = b * H + h starts in a (B, L, ...) tensor whose rows, ld apart, hold H heads of D.
inline int64_t head_offset(int64_t t, int64_t H, int64_t L, int64_t D, int64_t ld) {
  return t / H * L * ld + t % H * D;
}

template <class T>
void forward_impl(const T* qkv, int64_t B, int64_t L, int64_t H, int64_t D, T scale, T* P, T* ctx) {
  if (L == 0) return;
  const int64_t E = H * D, ld = 3 * E, need = forward_scratch(L, D, kLanes<T>);
  parallel_for(B * H, 1, [&](int64_t t0, int64_t t1) {
    T* scratch = thread_scratch<T>(need);
    for (int64_t t = t0; t < t1; ++t) {
      const T* q = qkv + head_offset(t, H, L, D, ld);
      if (t + 1 < B * H) prefetch_qkv(qkv + head_offset(t + 1, H, L, D, ld), ld, E, L, D);  // the next head's
      forward_head(q, q + E, q + 2 * E, ld, L, D, scale, P + t * L * L, ctx + head_offset(t, H, L, D, E), E, scratch);
    }
  });
}

template <class T>
void backward_impl(const T* qkv, const T* P, const T* dctx, int64_t B, int64_t L, int64_t H, int64_t D, T scale,
                   T* dqkv) {
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
      backward_head(q, q + E, q + 2 * E, ld, dctx + head_offset(t, H, L, D, E), E, P + t * L * L, L, D, scale, dq,
                    dq + E, dq + 2 * E, scratch);
    }
  });
}

}  // namespace

void packed_attention_forward(const float* qkv, int64_t B, int64_t L, int64_t H, int64_t D, float scale, float* P,
                              float* ctx) {
  forward_impl(qkv, B, L, H, D, scale, P, ctx);
}
void packed_attention_forward(const double* qkv, int64_t B, int64_t L, int64_t H, int64_t D, double scale, double* P,
                              double* ctx) {
  forward_impl(qkv, B, L, H, D, scale, P, ctx);
}
void packed_attention_backward(const float* qkv, const float* P, const float* dctx, int64_t B, int64_t L, int64_t H,
                               int64_t D, float scale, float* dqkv) {
  backward_impl(qkv, P, dctx, B, L, H, D, scale, dqkv);
}
void packed_attention_backward(const double* qkv, const double* P, const double* dctx, int64_t B, int64_t L,
                               int64_t H, int64_t D, double scale, double* dqkv) {
  backward_impl(qkv, P, dctx, B, L, H, D, scale, dqkv);
}

}  // namespace minidl::kernels::cpu
