// kernels/cpu/attention.cpp — the packed self-attention kernels of attention.h: each (b, h) pair's
// products done in vector registers on L1-resident scratch, without the general gemm().
//
// Every product of one head is C = alpha * A · B where C's rows and B's rows are W lanes wide
// (W = 16 floats or 8 doubles) and A is read one element at a time and broadcast:
//   S   (L, L) = scale * q · kt     kt (D, L): k transposed once per head, keys in lanes
//   ctx (L, D) = P · v              v's rows as they lie in qkv, D in lanes
//   dP  (L, L) = dctx · vt
//   dq = scale * dS · k    dk = scale * dS^T · q    dv = P^T · dctx    (dS^T, P^T: A read by columns)
// `tile` keeps an R x NV block of C in R * NV vector registers for the whole sum over k, which
// runs in order k = 0..K-1 for every element. Rows of S, P and dS live in scratch rows padded
// to a multiple of W; the softmax (and its backward) works on those rows in registers, tail
// lanes masked. When D is not a multiple of W, the operands read as vector rows are copied into
// zero-padded scratch first and the results copied out. The scratch is one buffer per thread,
// grown when a call needs more and kept for the next call.
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

template <class T> struct LaneTypes;
template <> struct LaneTypes<float> {
  using V = FloatLanes;
  using Mask = int32_t __attribute__((vector_size(64)));
  static constexpr Mask kIndex = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
};
template <> struct LaneTypes<double> {
  using V = DoubleLanes;
  using Mask = int64_t __attribute__((vector_size(64)));
  static constexpr Mask kIndex = {0, 1, 2, 3, 4, 5, 6, 7};
};
template <class T> using Vec = typename LaneTypes<T>::V;
template <class T> constexpr int64_t kW = 64 / sizeof(T);  // lanes per vector

template <class T> Vec<T> load(const T* p) {
  Vec<T> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T> void store(T* p, Vec<T> v) { std::memcpy(p, &v, sizeof v); }
template <class T> Vec<T> splat(T x) { return Vec<T>{} + x; }

// v with lanes n.. replaced by `fill` (0 < n <= W)
template <class T> Vec<T> keep_first(Vec<T> v, int64_t n, T fill) {
  using Elem = std::remove_cvref_t<decltype(LaneTypes<T>::kIndex[0])>;
  return LaneTypes<T>::kIndex < static_cast<Elem>(n) ? v : splat(fill);
}

// op over the lanes as a fixed tree of halves (the order depends on nothing but W)
template <class Op> float reduce_lanes(FloatLanes v, Op op) {
  v = op(v, __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
  v = op(v, __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11));
  v = op(v, __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13));
  v = op(v, __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14));
  return v[0];
}
template <class Op> double reduce_lanes(DoubleLanes v, Op op) {
  v = op(v, __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3));
  v = op(v, __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5));
  v = op(v, __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6));
  return v[0];
}
template <class T> T lanes_sum(Vec<T> v) {
  return reduce_lanes(v, [](Vec<T> a, Vec<T> b) { return a + b; });
}
template <class T> T lanes_max(Vec<T> v) {
  return reduce_lanes(v, [](Vec<T> a, Vec<T> b) { return a > b ? a : b; });
}

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

// C (R, NV * W) = alpha * A (R, K) · B (K, NV * W), A(r, k) at A[r * ars + k * aks], rows of B
// ldb apart, rows of C ldc apart.
template <class T, int R, int NV>
void tile(const T* A, int64_t ars, int64_t aks, const T* B, int64_t ldb, int64_t K, T alpha, T* C, int64_t ldc) {
  constexpr int64_t W = kW<T>;
  Vec<T> acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = Vec<T>{};
  for (int64_t k = 0; k < K; ++k) {
    const T* a = A + k * aks;
    Vec<T> b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      b[v] = load(B + k * ldb + v * W);
      keep_in_register(b[v]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const T ar = a[r * ars];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] += ar * b[v];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) store(C + r * ldc + v * W, acc[r][v] * alpha);
}

// All M rows of C for NV vector columns: tiles of R rows (R * NV accumulators), then 4, 2, 1.
template <class T, int NV>
void panel(int64_t M, const T* A, int64_t ars, int64_t aks, const T* B, int64_t ldb, int64_t K, T alpha, T* C,
           int64_t ldc) {
  constexpr int R = NV == 1 ? 8 : 4;
  int64_t i = 0;
  for (; i + R <= M; i += R) tile<T, R, NV>(A + i * ars, ars, aks, B, ldb, K, alpha, C + i * ldc, ldc);
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
  constexpr int64_t W = kW<T>;
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

// dst (D, Lp) = src (L, D; rows ld apart) transposed, columns L.. zero
template <class T> void transpose_padded(const T* src, int64_t ld, int64_t L, int64_t D, T* dst, int64_t Lp) {
  for (int64_t d = 0; d < D; ++d) {
    T* row = dst + d * Lp;
    for (int64_t j = 0; j < L; ++j) row[j] = src[j * ld + d];
    for (int64_t j = L; j < Lp; ++j) row[j] = T(0);
  }
}

// dst (padded to a multiple of W) = src (n), the lanes past n zero; vector copies (a call to
// memcpy per 50-element row costs more than the copy)
template <class T> void copy_padded_row(const T* src, int64_t n, T* dst) {
  constexpr int64_t W = kW<T>;
  int64_t i = 0;
  for (; i + W <= n; i += W) store(dst + i, load(src + i));
  if (i < n) {
    Vec<T> last = {};
    for (int64_t l = 0; i + l < n; ++l) last[l] = src[i + l];
    store(dst + i, last);
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

// v's lanes added to a double sum kept in two vectors (the softmax sums are in double)
inline void add_to_sum(FloatLanes v, DoubleLanes& lo, DoubleLanes& hi) { add_as_doubles(v, lo, hi); }
inline void add_to_sum(DoubleLanes v, DoubleLanes& lo, DoubleLanes&) { lo += v; }

// p (L) = softmax(x (L)); x is a scratch row padded to a multiple of W (its lanes L.. ignored,
// overwritten). Numerically stable (the row max subtracted); all -inf gives NaN as in PyTorch.
template <class T> void softmax_padded_row(T* x, int64_t L, T* p) {
  constexpr int64_t W = kW<T>;
  const int64_t nl = (L + W - 1) / W, tail = L - (nl - 1) * W;
  const T inf = std::numeric_limits<T>::infinity();
  Vec<T> mv = splat(-inf);
  for (int64_t v = 0; v < nl; ++v) {
    Vec<T> xv = load(x + v * W);
    if (v == nl - 1) xv = keep_first(xv, tail, -inf);
    mv = xv > mv ? xv : mv;
  }
  T m = lanes_max<T>(mv);
  if (std::isinf(m) && m < 0) m = T(0);  // all -inf: avoid (-inf) - (-inf) = NaN
  DoubleLanes lo = {}, hi = {};
  for (int64_t v = 0; v < nl; ++v) {
    Vec<T> e = exp_lanes(load(x + v * W) - m);
    if (v == nl - 1) e = keep_first(e, tail, T(0));
    store(x + v * W, e);
    add_to_sum(e, lo, hi);
  }
  const T inv = static_cast<T>(1.0 / lanes_sum<double>(lo + hi));
  for (int64_t v = 0; v + 1 < nl; ++v) store(p + v * W, load(x + v * W) * inv);
  const Vec<T> last = load(x + (nl - 1) * W) * inv;
  for (int64_t l = 0; l < tail; ++l) p[(nl - 1) * W + l] = last[l];
}

// sum of d[i] * p[i] over the first (nl - 1) * W + tail elements of two padded rows, in double
// as the reference softmax backward does (the difference dP - sum cancels)
inline double row_dot(const float* d, const float* p, int64_t nl, int64_t tail) {
  DoubleLanes lo = {}, hi = {};
  for (int64_t c = 0; c < nl; ++c) {
    FloatLanes dv = load(d + c * 16), pv = load(p + c * 16);
    if (c == nl - 1) dv = keep_first(dv, tail, 0.0f), pv = keep_first(pv, tail, 0.0f);
    lo += __builtin_convertvector(__builtin_shufflevector(dv, dv, 0, 1, 2, 3, 4, 5, 6, 7), DoubleLanes) *
          __builtin_convertvector(__builtin_shufflevector(pv, pv, 0, 1, 2, 3, 4, 5, 6, 7), DoubleLanes);
    hi += __builtin_convertvector(__builtin_shufflevector(dv, dv, 8, 9, 10, 11, 12, 13, 14, 15), DoubleLanes) *
          __builtin_convertvector(__builtin_shufflevector(pv, pv, 8, 9, 10, 11, 12, 13, 14, 15), DoubleLanes);
  }
  return lanes_sum<double>(lo + hi);
}
inline double row_dot(const double* d, const double* p, int64_t nl, int64_t tail) {
  DoubleLanes s = {};
  for (int64_t c = 0; c < nl; ++c) {
    DoubleLanes prod = load(d + c * 8) * load(p + c * 8);
    if (c == nl - 1) prod = keep_first(prod, tail, 0.0);
    s += prod;
  }
  return lanes_sum<double>(s);
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

// One head: q, k, v (L, D) rows ld apart -> p (L, L), ctx (L, D) rows ldc apart.
template <class T>
void forward_head(const T* q, const T* k, const T* v, int64_t ld, int64_t L, int64_t D, T scale, T* p, T* ctx,
                  int64_t ldc, T* scratch) {
  constexpr int64_t W = kW<T>;
  const int64_t Lp = round_up(L, W), Dp = round_up(D, W);
  T* kt = scratch;         // (D, Lp)
  T* s = kt + D * Lp;      // (L, Lp)
  T* vp = s + L * Lp;      // (L, Dp), when D % W != 0
  T* op = vp + L * Dp;     // (L, Dp), when D % W != 0
  transpose_padded(k, ld, L, D, kt, Lp);
  products(L, Lp / W, q, ld, 1, kt, Lp, D, scale, s, Lp);  // S = scale * q k^T
  for (int64_t i = 0; i < L; ++i) softmax_padded_row(s + i * Lp, L, p + i * L);
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
  constexpr int64_t W = kW<T>;
  const int64_t Lp = round_up(L, W), Dp = round_up(D, W), nl = Lp / W, tail = L - (nl - 1) * W;
  T* vt = scratch;         // (D, Lp)
  T* pp = vt + D * Lp;     // (L, Lp) P, zero-padded
  T* ds = pp + L * Lp;     // (L, Lp) dP, then dS
  T* pad = ds + L * Lp;    // 4 x (L, Dp) when D % W != 0: q, k, dctx, a result
  transpose_padded(v, ld, L, D, vt, Lp);
  products(L, nl, g, ldg, 1, vt, Lp, D, T(1), ds, Lp);  // dP = dctx v^T
  for (int64_t i = 0; i < L; ++i) {  // dS = P * (dP - rowsum(dP * P))
    T* pr = pp + i * Lp;
    T* dr = ds + i * Lp;
    copy_padded_row(p + i * L, L, pr);
    const T sd = static_cast<T>(row_dot(dr, pr, nl, tail));
    for (int64_t c = 0; c < nl; ++c) store(dr + c * W, load(pr + c * W) * (load(dr + c * W) - sd));
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
  result(pp, 1, Lp, gb, ldgb, T(1), dv);  // dv = P^T dctx
}
int64_t backward_scratch(int64_t L, int64_t D, int64_t W) {
  const int64_t Lp = round_up(L, W), Dp = round_up(D, W);
  return D * Lp + 2 * L * Lp + 4 * L * Dp;
}

template <class T>
void forward_impl(const T* qkv, int64_t B, int64_t L, int64_t H, int64_t D, T scale, T* P, T* ctx) {
  if (L == 0) return;
  const int64_t E = H * D, ld = 3 * E, need = forward_scratch(L, D, kW<T>);
  parallel_for(B * H, 1, [&](int64_t t0, int64_t t1) {
    T* scratch = thread_scratch<T>(need);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / H, h = t % H;
      const T* q = qkv + b * L * ld + h * D;
      forward_head(q, q + E, q + 2 * E, ld, L, D, scale, P + t * L * L, ctx + b * L * E + h * D, E, scratch);
    }
  });
}

template <class T>
void backward_impl(const T* qkv, const T* P, const T* dctx, int64_t B, int64_t L, int64_t H, int64_t D, T scale,
                   T* dqkv) {
  if (L == 0) return;
  const int64_t E = H * D, ld = 3 * E, need = backward_scratch(L, D, kW<T>);
  parallel_for(B * H, 1, [&](int64_t t0, int64_t t1) {
    T* scratch = thread_scratch<T>(need);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / H, h = t % H;
      const T* q = qkv + b * L * ld + h * D;
      T* dq = dqkv + b * L * ld + h * D;
      backward_head(q, q + E, q + 2 * E, ld, dctx + b * L * E + h * D, E, P + t * L * L, L, D, scale, dq, dq + E,
                    dq + 2 * E, scratch);
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
