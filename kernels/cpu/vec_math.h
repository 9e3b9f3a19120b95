// kernels/cpu/vec_math.h — the one vector vocabulary of the CPU kernels, and the vectorised math
// written in it:
//   - lane types: FloatLanes (16 floats), DoubleLanes (8 doubles), IntLanes / LongLanes (their
//     lane indices), all 64 bytes, as GCC / Clang vector types (one AVX-512 register; the
//     compiler lowers them to AVX2 or SSE2 pairs or quads on other targets); Lanes<T>, kLanes<T>
//     and lane_index<T>() for kernels written once for float and double;
//   - load_lanes / store_lanes (whole vectors), load_first_lanes / store_first_lanes (the first n
//     lanes, masked: nothing past p + n is touched), keep_first_lanes, splat;
//   - horizontal_sum / horizontal_max (reduce_lanes: a fixed tree of halves), transpose16 (a
//     16 x 16 block of floats transposed in registers), even_lanes / odd_lanes / interleave and
//     lanes_from (two-source permutes);
//   - float exp and erf as straight-line arithmetic (no library calls, no branches), so that loops
//     calling them vectorise, a vectorised double sum, and max / sum / dot / sum-of-exp reductions
//     for short float rows. The float64 paths keep std::exp / std::erf.
// fma is written as a * b + c (under gnu++20, GCC's -ffp-contract=fast makes it one FMA where the
// target has them, the same way in every kernel). Only code that needs an instruction
// these types cannot express (masked loads, vscalefps, bf16 dot products) uses intrinsics.
// exp / erf are checked against std::exp / std::erf over dense grids by
// tests/tensor/test_cpu_fast_paths.cpp (exp within 4 ulp, erf within 5e-7 absolute);
// transpose16 and the masked loads by tests/kernels/test_cpu_vec_math.cpp.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "minidl/kernels/cpu/prefetch.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace minidl::kernels::cpu {

// ---- lane types ----
// Kept inline: passed by value across a non-inline call, a 64-byte vector's calling convention
// would depend on -march.
using FloatLanes = float __attribute__((vector_size(64)));
using DoubleLanes = double __attribute__((vector_size(64)));
using IntLanes = int32_t __attribute__((vector_size(64)));  // a comparison of FloatLanes gives these
using LongLanes = int64_t __attribute__((vector_size(64)));  // ... of DoubleLanes these

template <class T> struct LaneTraits;
template <> struct LaneTraits<float> {
  using Type = FloatLanes;
  using Index = IntLanes;
  static constexpr IntLanes kIndex = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
};
template <> struct LaneTraits<double> {
  using Type = DoubleLanes;
  using Index = LongLanes;
  static constexpr LongLanes kIndex = {0, 1, 2, 3, 4, 5, 6, 7};
};
template <class T> using Lanes = typename LaneTraits<T>::Type;  // FloatLanes or DoubleLanes
template <class T> constexpr int64_t kLanes = 64 / sizeof(T);  // 16 or 8
template <class T> constexpr typename LaneTraits<T>::Index lane_index() { return LaneTraits<T>::kIndex; }  // 0, 1, ...

template <class T> Lanes<T> splat(T x) { return Lanes<T>{} + x; }
// Every lane = *p, exactly (-0.0 stays -0.0, where splat adds it to +0.0): one broadcast, which
// the compiler folds into an FMA's memory operand.
inline FloatLanes broadcast_lanes(const float* p) {
  const FloatLanes v = {*p};
  return __builtin_shufflevector(v, v, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
}
inline DoubleLanes broadcast_lanes(const double* p) {
  const DoubleLanes v = {*p};
  return __builtin_shufflevector(v, v, 0, 0, 0, 0, 0, 0, 0, 0);
}
inline FloatLanes load_lanes(const float* p) {
  FloatLanes v;
  std::memcpy(&v, p, sizeof v);  // unaligned
  return v;
}
inline DoubleLanes load_lanes(const double* p) {
  DoubleLanes v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store_lanes(float* p, FloatLanes v) { std::memcpy(p, &v, sizeof v); }
inline void store_lanes(double* p, DoubleLanes v) { std::memcpy(p, &v, sizeof v); }

// The first n lanes (0 <= n <= kLanes<T>) of the vector at p, the others zero / only those
// stored. With AVX-512 one masked load or store, which touches nothing past p + n (a row's end may
// be the buffer's end); otherwise a lane loop.
template <class T> Lanes<T> load_first_lanes(const T* p, int64_t n) {
#if defined(__AVX512F__)
  if constexpr (sizeof(T) == 4) {
    return Lanes<T>(_mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p));
  } else {
    return Lanes<T>(_mm512_maskz_loadu_pd(static_cast<__mmask8>((1u << n) - 1), p));
  }
#else
  Lanes<T> v = {};
  for (int64_t l = 0; l < n; ++l) v[l] = p[l];
  return v;
#endif
}
template <class T> void store_first_lanes(T* p, Lanes<T> v, int64_t n) {
#if defined(__AVX512F__)
  if constexpr (sizeof(T) == 4) {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), v);
  } else {
    _mm512_mask_storeu_pd(p, static_cast<__mmask8>((1u << n) - 1), v);
  }
#else
  for (int64_t l = 0; l < n; ++l) p[l] = v[l];
#endif
}
// v with lanes n.. replaced by `fill` (0 <= n <= kLanes<T>)
template <class T> Lanes<T> keep_first_lanes(Lanes<T> v, int64_t n, T fill) {
  using Index = typename LaneTraits<T>::Index;
  return lane_index<T>() < static_cast<std::remove_cvref_t<decltype(Index{}[0])>>(n) ? v : splat(fill);
}

// op over the lanes as a fixed tree of halves (the order depends on nothing but the width):
// lanes l and l + 8 first, then l and l + 4, ... . The horizontal sum and max of the kernels.
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
template <class V> auto horizontal_sum(V v) {
  return reduce_lanes(v, [](V a, V b) { return a + b; });
}
template <class V> auto horizontal_max(V v) {
  return reduce_lanes(v, [](V a, V b) { return a > b ? a : b; });
}

// ---- 16 x 16 transpose in registers ----
// Rows a and b of a 16 x 16 block whose row indices differ in bit S (a's bit clear) swap the
// lanes that differ from them in that bit: a's lanes with bit S set take b's lanes with it
// clear, and back. Done for S = 8, 4, 2, 1 over all row pairs, row and lane indices have traded
// every bit: the block is transposed (16 two-vector shuffles a step, no memory round trip).
template <int S> void exchange_lanes(FloatLanes& a, FloatLanes& b) {
  FloatLanes x, y;
  if constexpr (S == 8) {
    x = __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
    y = __builtin_shufflevector(a, b, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  } else if constexpr (S == 4) {
    x = __builtin_shufflevector(a, b, 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
    y = __builtin_shufflevector(a, b, 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
  } else if constexpr (S == 2) {
    x = __builtin_shufflevector(a, b, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
    y = __builtin_shufflevector(a, b, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
  } else {
    x = __builtin_shufflevector(a, b, 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
    y = __builtin_shufflevector(a, b, 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
  }
  a = x, b = y;
}
template <int S> void exchange_all(FloatLanes (&m)[16]) {
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i)
    if (!(i & S)) exchange_lanes<S>(m[i], m[i + S]);
}
// m[i][k] -> m[k][i]
inline void transpose16(FloatLanes (&m)[16]) {
  exchange_all<8>(m);
  exchange_all<4>(m);
  exchange_all<2>(m);
  exchange_all<1>(m);
}

// The even and the odd lanes of the 32 floats lo, hi (a stride-2 row split in two); and back
inline FloatLanes even_lanes(FloatLanes lo, FloatLanes hi) {
  return __builtin_shufflevector(lo, hi, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
}
inline FloatLanes odd_lanes(FloatLanes lo, FloatLanes hi) {
  return __builtin_shufflevector(lo, hi, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
}
inline void interleave(FloatLanes even, FloatLanes odd, FloatLanes& lo, FloatLanes& hi) {
  lo = __builtin_shufflevector(even, odd, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  hi = __builtin_shufflevector(even, odd, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
}

// The 16 floats from lane `shift` (0 <= shift <= 16) of the 32 in lo, then hi: a run of a row that
// starts anywhere, from the two whole vectors around it (one two-source permute with AVX-512),
// instead of an unaligned load that would straddle two recent stores and wait for them to reach
// the cache (store-to-load forwarding serves only a load inside one store).
// (GCC's __builtin_shuffle takes the lane indices at run time; Clang's __builtin_shufflevector
// only as constants, so Clang gets the AVX-512 permute itself, or a loop over the lanes.)
inline FloatLanes lanes_from(FloatLanes lo, FloatLanes hi, int64_t shift) {
  const IntLanes index = lane_index<float>() + static_cast<int32_t>(shift);
#if !defined(__clang__)
  return __builtin_shuffle(lo, hi, index);
#elif defined(__AVX512F__)
  return (FloatLanes)_mm512_permutex2var_ps((__m512)lo, (__m512i)index, (__m512)hi);
#else
  FloatLanes out;
  for (int l = 0; l < 16; ++l) out[l] = index[l] < 16 ? lo[index[l]] : hi[index[l] - 16];
  return out;
#endif
}

// exp(x) for x <= 0: 2^n * p(r), n = round(x / ln 2), r = x - n ln 2 (in two parts, Cody-Waite),
// p Cephes' degree-6 polynomial for expf. Below ln(FLT_MIN) the result flushes to 0 (exp(-inf)
// is 0); NaN stays NaN.
// The steps both forms below share, on one float or on 16 lanes (V = float or FloatLanes: the
// same operations in the same order): n = round(xc / ln 2), by the 1.5 * 2^23 trick (std::floor
// keeps GCC 12 from vectorising), and returns p(r).
template <class V> V exp_reduced(V xc, V& n) {
  n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  V r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  V p = V{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r + 1.0f;
}

inline float exp_nonpositive(float x) {
  constexpr float kLo = -87.33654475f;  // ln(FLT_MIN)
  float n;
  const float p = exp_reduced(x < kLo ? kLo : x, n);
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;  // 2^n as a float's bits, n in [-126, 0]
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);  // (std::bit_cast keeps GCC 12 from vectorising the loop)
  return x < kLo ? 0.0f : p * scale;
}

// erf(x): the odd/even 13/8-degree rational approximation Eigen uses for float
// (generic_fast_erf_float), on x clamped to [-4, 4] where fl(erf) is already +-1.
inline float erf_fast(float a) {
  const float x = a > 4.0f ? 4.0f : (a < -4.0f ? -4.0f : a);  // NaN compares false: stays NaN
  const float x2 = x * x;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 + -2.10102402082508e-06f;
  p = p * x2 + -5.69250639462346e-05f;
  p = p * x2 + -7.34990630326855e-04f;
  p = p * x2 + -2.95459980854025e-03f;
  p = p * x2 + -1.60960333262415e-02f;
  p = p * x;
  float q = -1.45660718464996e-05f;
  q = q * x2 + -2.13374055278905e-04f;
  q = q * x2 + -1.68282697438203e-03f;
  q = q * x2 + -7.37332916720468e-03f;
  q = q * x2 + -1.42647390514189e-02f;
  return p / q;
}

// The two GELU (erf form) loops over contiguous floats, the math of kernels/functors.h's
// GeluErfOp / GeluErfBackward with the functions above (x and dy prefetched: prefetch.h).
inline void gelu_erf_span(const float* x, float* y, int64_t n) {
  blocks_prefetched(
      n,
      [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) y[i] = 0.5f * x[i] * (1.0f + erf_fast(x[i] * 0.70710678118654752440f));
      },
      x);
}
inline void gelu_erf_backward_span(const float* x, const float* dy, float* dx, int64_t n) {
  blocks_prefetched(
      n,
      [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          const float cdf = 0.5f * (1.0f + erf_fast(x[i] * 0.70710678118654752440f));
          const float pdf = 0.39894228040143267794f * exp_nonpositive(-0.5f * x[i] * x[i]);
          dx[i] = dy[i] * (cdf + x[i] * pdf);
        }
      },
      x, dy);
}

// sum over i < n of term(i), in double, as one vectorised reduction (`omp simd`: the compiler
// keeps one partial sum per vector lane and adds them at the end). The order is fixed when the
// library is compiled (by the vector width), never by the thread count.
template <class F> double simd_sum(int64_t n, F&& term) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(term(i));
  return s;
}

// Reductions over n contiguous floats for short rows (softmax's 50-key rows): 16 lanes at a time,
// the lanes then combined in a fixed order, the tail added last — the result depends only on n
// and the data. `omp simd` reductions spend more on their per-call setup and lane arrays than a
// 50-element row costs. max_span: NaNs may or may not win (callers make NaN rows NaN anyway).
// The 16 floats of v as two times 8 doubles.
inline void as_doubles(FloatLanes v, DoubleLanes& lo, DoubleLanes& hi) {
  lo = __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7), DoubleLanes);
  hi = __builtin_convertvector(__builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15), DoubleLanes);
}
// ... added into lo and hi.
inline void add_as_doubles(FloatLanes v, DoubleLanes& lo, DoubleLanes& hi) {
  DoubleLanes vlo, vhi;
  as_doubles(v, vlo, vhi);
  lo += vlo;
  hi += vhi;
}
// lo + hi, its 8 lanes then added in lane order (not reduce_lanes' tree: the layer norm's and the
// span reductions' results are defined by this order).
inline double lanes_sum(DoubleLanes lo, DoubleLanes hi) {
  const DoubleLanes t = lo + hi;
  double s = 0;
  for (int l = 0; l < 8; ++l) s += t[l];
  return s;
}

// exp_nonpositive above on 16 lanes at once: the same operations in the same order, written in
// vector types so that a caller holding a row in registers (the attention kernel's softmax)
// needs no store and reload around a vectorised loop. With AVX-512 the last step, p * 2^n, is
// one vscalefps: the same correctly rounded product without building 2^n's bits, and so no
// clamp of x either (its zero-masking makes the lanes below kLo 0 whatever their n).
inline FloatLanes exp_nonpositive(FloatLanes x) {
  constexpr float kLo = -87.33654475f;  // ln(FLT_MIN)
#if defined(__AVX512F__)
  const FloatLanes xc = x;
#else
  const FloatLanes xc = x < kLo ? FloatLanes{} + kLo : x;
#endif
  FloatLanes n;
  const FloatLanes p = exp_reduced(xc, n);
#if defined(__AVX512F__)
  const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kLo), _CMP_NLT_UQ);  // not x < kLo
  return FloatLanes(_mm512_maskz_scalef_ps(keep, p, n));
#else
  const IntLanes bits = (__builtin_convertvector(n, IntLanes) + 127) << 23;
  return x < kLo ? FloatLanes{} : p * __builtin_bit_cast(FloatLanes, bits);
#endif
}

inline float max_span(const float* p, int64_t n) {  // n >= 1
  float m = p[0];
  int64_t i = 0;
  if (n >= 16) {
    FloatLanes acc = load_lanes(p);
    for (i = 16; i + 16 <= n; i += 16) {
      const FloatLanes v = load_lanes(p + i);
      acc = v > acc ? v : acc;
    }
    m = acc[0];
    for (int l = 1; l < 16; ++l) m = acc[l] > m ? acc[l] : m;
  }
  for (; i < n; ++i) m = p[i] > m ? p[i] : m;
  return m;
}

// sum of p[i] in double
inline double sum_span(const float* p, int64_t n) {
  DoubleLanes lo = {}, hi = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) add_as_doubles(load_lanes(p + i), lo, hi);
  double s = lanes_sum(lo, hi);
  for (; i < n; ++i) s += static_cast<double>(p[i]);
  return s;
}

// sum of double(exp_nonpositive(p[i] - m)), m >= every p[i] (the row's max): a softmax's
// denominator without storing the exponentials
inline double sum_exp_span(const float* p, int64_t n, float m) {
  DoubleLanes lo = {}, hi = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) add_as_doubles(exp_nonpositive(load_lanes(p + i) - m), lo, hi);
  double s = lanes_sum(lo, hi);
  for (; i < n; ++i) s += static_cast<double>(exp_nonpositive(p[i] - m));
  return s;
}

// sum of double(a[i]) * double(b[i])
inline double dot_span(const float* a, const float* b, int64_t n) {
  DoubleLanes lo = {}, hi = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const FloatLanes va = load_lanes(a + i), vb = load_lanes(b + i);
    lo += __builtin_convertvector(__builtin_shufflevector(va, va, 0, 1, 2, 3, 4, 5, 6, 7), DoubleLanes) *
          __builtin_convertvector(__builtin_shufflevector(vb, vb, 0, 1, 2, 3, 4, 5, 6, 7), DoubleLanes);
    hi += __builtin_convertvector(__builtin_shufflevector(va, va, 8, 9, 10, 11, 12, 13, 14, 15), DoubleLanes) *
          __builtin_convertvector(__builtin_shufflevector(vb, vb, 8, 9, 10, 11, 12, 13, 14, 15), DoubleLanes);
  }
  double s = lanes_sum(lo, hi);
  for (; i < n; ++i) s += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return s;
}

}  // namespace minidl::kernels::cpu
