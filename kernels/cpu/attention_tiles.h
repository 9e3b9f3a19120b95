// kernels/cpu/attention_tiles.h — the pieces that attention_forward.cpp and
// attention_backward.cpp (the kernels of attention.h) share; included by those two files only.
//
// Every product of one head is C = alpha * A · B where C's rows and B's rows are W lanes wide
// (W = kLanes<T>: vec_math.h's Lanes<T>, 16 floats or 8 doubles) and A is read one element at a
// time and broadcast:
//   S   (L, L) = scale * q · kt     kt (D, L): k transposed once per head, keys in lanes
//                                   (float: the scale folded into kt as it is transposed)
//   ctx (L, D) = P · v              v's rows as they lie in qkv, D in lanes
//   dP  (L, L) = dctx · vt
//   dq = scale * dS · k    dk = scale * dS^T · q    dv = P^T · dctx    (dS^T, P^T: A read by columns)
// `tile` keeps an R x NV block of C in R * NV vector registers for the whole sum over k, which
// runs in order k = k0..k1-1 for every element (all of K, or for a causal head only the terms
// that are not zero: `Terms`). The softmax rows (`softmax_lanes`) and the backward's row sum
// (`row_dot`) are in T's lanes (float sums for float: against a float64 reference their results
// err as much as the double-sum reference's), added in a fixed order that depends only on L and
// the row. k and v are transposed 16 x 16 floats at a time in registers. When D is not a
// multiple of W, the operands read as vector rows are copied into zero-padded scratch first and
// the results copied out. The scratch is one buffer per thread, grown when a call needs more and
// kept for the next call.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "minidl/kernels/cpu/aligned_buffer.h"
#include "minidl/kernels/cpu/vec_math.h"

namespace minidl::kernels::cpu::attention_tiles {

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

// Which terms of C's row i the sum over k takes. A causal head's P and dS are zero above the
// diagonal (A(i, k) = 0 for k > i: UpToRow), and so P^T and dS^T below it (k < i: FromRow); a
// tile of rows i0..i1 then sums k < i1, or k >= i0, and skips the zero products of the other
// rows (those left inside the tile add zeros, which leaves every sum's bits as they were).
enum class Terms { All, UpToRow, FromRow };

// C's rows i..i+R (C = alpha * A · B, A(i, k) at A[i * ars + k * aks]) for NV vector columns,
// over the terms that `terms` keeps.
template <class T, int R, int NV>
void tile_rows(int64_t i, Terms terms, const T* A, int64_t ars, int64_t aks, const T* B, int64_t ldb, int64_t K,
               T alpha, T* C, int64_t ldc) {
  const int64_t k0 = terms == Terms::FromRow ? i : 0;
  const int64_t k1 = terms == Terms::UpToRow && i + R < K ? i + R : K;
  tile<T, R, NV>(A + i * ars + k0 * aks, ars, aks, B + k0 * ldb, ldb, k1 - k0, alpha, C + i * ldc, ldc);
}

// f(std::integral_constant<int, nv>{}) for nv = 1..4 (larger: 4), so that a vector count known only
// at run time picks a tile built for it.
template <class F> void with_vectors(int64_t nv, F&& f) {
  switch (nv) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 3:
      return f(std::integral_constant<int, 3>{});
    default:
      return f(std::integral_constant<int, 4>{});
  }
}

// The tiles of a product's M rows for NV vector columns, as f(std::integral_constant<int, R>{}, i)
// for the R rows from i: tiles of R (R * NV accumulators), then 8, 4, 2, 1. One vector column takes
// R = 10 (10 independent sums keep both FMA ports busy), and when M >= R is not a multiple of R
// the last tile is the R rows ending at M: it recomputes rows of the previous tile (the same sums
// in the same order, so the same bits) instead of running a short tile whose few sums wait on
// each other's latency.
template <int NV, class F> void for_each_tile(int64_t M, F&& f) {
  constexpr int R = NV == 1 ? 10 : 4;
  int64_t i = 0;
  for (; i + R <= M; i += R) f(std::integral_constant<int, R>{}, i);
  if constexpr (NV == 1) {
    if (i > 0 && i < M) {
      f(std::integral_constant<int, R>{}, M - R);
      return;
    }
    if (i + 8 <= M) {
      f(std::integral_constant<int, 8>{}, i);
      i += 8;
    }
  }
  if constexpr (R > 4) {
    if (i + 4 <= M) {
      f(std::integral_constant<int, 4>{}, i);
      i += 4;
    }
  }
  if (i + 2 <= M) {
    f(std::integral_constant<int, 2>{}, i);
    i += 2;
  }
  if (i < M) f(std::integral_constant<int, 1>{}, i);
}

// A product's nv vector columns in blocks of up to 4: f(std::integral_constant<int, NV>{}, c) for
// the NV columns from vector c.
template <class F> void for_each_column_block(int64_t nv, F&& f) {
  for (int64_t c = 0; c < nv; c += 4) with_vectors(nv - c < 4 ? nv - c : 4, [&](auto n) { f(n, c); });
}

// The softmax tiles of L rows: f(std::integral_constant<int, R>{}, i) for tiles of 4 rows, then 2,
// then 1 (each starting at an even row).
template <class F> void for_each_row_block(int64_t L, F&& f) {
  int64_t i = 0;
  for (; i + 4 <= L; i += 4) f(std::integral_constant<int, 4>{}, i);
  if (i + 2 <= L) {
    f(std::integral_constant<int, 2>{}, i);
    i += 2;
  }
  if (i < L) f(std::integral_constant<int, 1>{}, i);
}

// C (M, nv * W) = alpha * A (M, K) · B (K, nv * W), in the tiles above.
template <class T>
void products(int64_t M, int64_t nv, const T* A, int64_t ars, int64_t aks, const T* B, int64_t ldb, int64_t K, T alpha,
              T* C, int64_t ldc, Terms terms = Terms::All) {
  constexpr int64_t W = kLanes<T>;
  for_each_column_block(nv, [&](auto n, int64_t c) {
    constexpr int NV = decltype(n)::value;
    for_each_tile<NV>(M, [&](auto r, int64_t i) {
      tile_rows<T, decltype(r)::value, NV>(i, terms, A, ars, aks, B + c * W, ldb, K, alpha, C + c * W, ldc);
    });
  });
}

// dst (D, Lp) = alpha * src (L, D; rows ld apart) transposed, columns L.. zero. Float: 16 x 16
// blocks loaded as rows (masked past D, zero past L), transposed in registers and stored as
// rows; double: element by element.
template <class T> void transpose_padded(const T* src, int64_t ld, int64_t L, int64_t D, T alpha, T* dst, int64_t Lp) {
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
// Vector v of a row whose first n entries are read and the rest taken as zero (a masked load:
// none of row[n..] is touched).
template <class T> [[gnu::always_inline]] inline Lanes<T> load_prefix(const T* row, int64_t v, int64_t n) {
  constexpr int64_t W = kLanes<T>;
  const int64_t k = n - v * W;
  return load_first_lanes(row + v * W, k < 0 ? 0 : k < W ? k : W);
}

// p (len) = softmax of x's first n lanes (nv vectors, (nv - 2) * W < n <= len, (nv - 1) * W <
// len), zeros after them: x's lanes n.. ignored, x overwritten. n = len, or for a causal row i,
// i + 1, which in a tile of rows that straddles a vector boundary can leave the last vector
// all masked. Numerically stable (the row max subtracted); all -inf gives NaN as in PyTorch.
// The sum is in T's lanes: the vectors added in order, then the lanes as a fixed tree. NV: nv
// when known at compile time (x in registers: always inlined, so that x stays there), 0 for
// scratch rows. Leaves x holding the exponentials and returns the factor (1 / their sum) that
// scaled them into p, so that x[v] * it are p's values, bit for bit.
template <class T, int NV>
[[gnu::always_inline]] inline T softmax_lanes(Lanes<T>* x, int64_t nv_, int64_t n, int64_t len, T* p) {
  constexpr int64_t W = kLanes<T>;
  const int64_t nv = NV ? NV : nv_, last = (nv - 1) * W;
  const T inf = std::numeric_limits<T>::infinity();
  x[nv - 1] = keep_first_lanes(x[nv - 1], n - last, -inf);
  if (nv > 1 && n < last) x[nv - 2] = keep_first_lanes(x[nv - 2], n - last + W, -inf);
  Lanes<T> mv = x[0];
  for (int64_t v = 1; v < nv; ++v) mv = x[v] > mv ? x[v] : mv;
  T m = horizontal_max(mv);
  if (std::isinf(m) && m < 0) m = T(0);  // all -inf: avoid (-inf) - (-inf) = NaN
  Lanes<T> sum = {};
  for (int64_t v = 0; v < nv; ++v) {
    x[v] = exp_lanes(x[v] - m);  // lanes n..: exp(-inf) = 0
    sum += x[v];
  }
  const T inv = T(1) / horizontal_sum(sum);
  for (int64_t v = 0; v + 1 < nv; ++v) store_lanes(p + v * W, x[v] * inv);
  store_first_lanes(p + last, x[nv - 1] * inv, len - last < W ? len - last : W);
  for (int64_t j = nv * W; j < len; j += W)  // a causal row's keys past its vectors
    store_first_lanes(p + j, Lanes<T>{}, len - j < W ? len - j : W);
  return inv;
}

// sum of d * p over nv vectors, lanes n.. left out ((nv - 2) * W < n as in softmax_lanes); in
// T's lanes, in a fixed order. For float it is a few ulps of the terms from the reference's
// double sum, which shows where dS = P * (dP - sum) cancels (peaked rows);
// test_cpu_attention.cpp bounds the effect on the gradients. NV as in softmax_lanes.
template <class T, int NV>
[[gnu::always_inline]] inline T row_dot(const Lanes<T>* d, const Lanes<T>* p, int64_t nv_, int64_t n) {
  constexpr int64_t W = kLanes<T>;
  const int64_t nv = NV ? NV : nv_, last = (nv - 1) * W;
  Lanes<T> s = {};
  for (int64_t c = 0; c < nv; ++c) {
    Lanes<T> prod = d[c] * p[c];
    if (c == nv - 1) prod = keep_first_lanes(prod, n - last, T(0));
    if (c == nv - 2 && n < last) prod = keep_first_lanes(prod, n - last + W, T(0));
    s += prod;
  }
  return horizontal_sum(s);
}

// One buffer per thread (and element type), 64-byte aligned, grown on demand and kept.
template <class T> T* thread_scratch(int64_t elements) {
  thread_local AlignedBuffer<T> buffer;
  return buffer.get(static_cast<size_t>(elements));
}

inline int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// Whether rows of up to 4 vectors take the register paths (softmax_tile, softmax_backward_tile):
// float only; float64 keeps the scratch rows, whose sums round as they always have (the register
// path's unrolled row_dot would contract into FMAs).
template <class T> constexpr bool kRegisterRows = std::is_same_v<T, float>;

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

}  // namespace minidl::kernels::cpu::attention_tiles
