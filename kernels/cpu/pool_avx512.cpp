// kernels/cpu/pool_avx512.cpp — the AVX-512 row loop of the 2x2 max-pool (kernels/cpu/pool.h),
// compiled for AVX-512 whatever the build's -march and used only when the CPU has it (checked once
// at run time). 16 outputs per step: the two input rows are loaded (masked at the row's end), split
// into even and odd columns, and the four candidates compared in row-major order with the scalar
// loop's rule (a later candidate wins if greater, or a NaN while the best is not). The same for the
// fused batch norm + ReLU + max-pool (kernels/cpu/norm.h): its forward (recording the winner's
// place and a second array's value there) and its backward's input gradient, a plane per call.
// GCC 12 reports false "maybe-uninitialized" warnings inside its own AVX-512 headers.
// Written in __m512 intrinsics, not vec_math.h's lane types: the functions carry their own
// target("avx512f") attributes for the run-time dispatch (vec_math.h's helpers are compiled for
// the build's -march), and the loop needs masked loads, lane permutes (vpermt2ps) and mask
// registers for the winner's index, which the vector types do not express.
#include "minidl/kernels/cpu/cpu_features.h"
#include "minidl/kernels/cpu/pool.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace minidl::kernels::cpu::pool_detail {

#if defined(__x86_64__) && defined(__GNUC__)
namespace {
// best = v where v wins (greater, or a NaN while best is not), and bi = off there.
__attribute__((target("avx512f"))) inline void take_if_better(__m512& best, __m512i& bi, const __m512& v, int32_t off) {
  const __mmask16 take = _mm512_cmp_ps_mask(best, best, _CMP_ORD_Q) &
                         (_mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
  best = _mm512_mask_mov_ps(best, take, v);
  bi = _mm512_mask_mov_epi32(bi, take, _mm512_set1_epi32(off));
}

// One output row, float, 16 outputs per step (the last step masked).
__attribute__((target("avx512f"))) void row_avx512(const float* r0, const float* r1, float* y, int64_t* idx,
                                                   int64_t W_out, int64_t W, int64_t base) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512i lane2 = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14);
  for (int64_t ow = 0; ow < W_out; ow += 16) {
    const int64_t n = std::min<int64_t>(16, W_out - ow);
    const __mmask16 lo = static_cast<__mmask16>(n >= 8 ? 0xFFFF : (1u << (2 * n)) - 1);
    const __mmask16 hi = static_cast<__mmask16>(n <= 8 ? 0 : (1u << (2 * (n - 8))) - 1);
    const __mmask16 out = static_cast<__mmask16>((1u << n) - 1);
    const __m512 a0 = _mm512_maskz_loadu_ps(lo, r0 + 2 * ow), a1 = _mm512_maskz_loadu_ps(hi, r0 + 2 * ow + 16);
    const __m512 b0 = _mm512_maskz_loadu_ps(lo, r1 + 2 * ow), b1 = _mm512_maskz_loadu_ps(hi, r1 + 2 * ow + 16);
    __m512 best = _mm512_permutex2var_ps(a0, even, a1);
    __m512i bi = _mm512_setzero_si512();
    take_if_better(best, bi, _mm512_permutex2var_ps(a0, odd, a1), 1);
    take_if_better(best, bi, _mm512_permutex2var_ps(b0, even, b1), static_cast<int32_t>(W));
    take_if_better(best, bi, _mm512_permutex2var_ps(b0, odd, b1), static_cast<int32_t>(W + 1));
    _mm512_mask_storeu_ps(y + ow, out, best);
    // idx = base + 2 * (ow + lane) + bi, as int64, 8 lanes at a time
    const __m512i start = _mm512_add_epi64(_mm512_set1_epi64(base + 2 * ow), lane2);
    const __m512i i0 = _mm512_add_epi64(start, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(bi, 0)));
    const __m512i i1 = _mm512_add_epi64(_mm512_add_epi64(start, _mm512_set1_epi64(16)),
                                        _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(bi, 1)));
    _mm512_mask_storeu_epi64(idx + ow, static_cast<__mmask8>(out & 0xFF), i0);
    _mm512_mask_storeu_epi64(idx + ow + 8, static_cast<__mmask8>(out >> 8), i1);
  }
}

// take_if_better, also moving bx to xv where v wins.
__attribute__((target("avx512f"))) inline void take_if_better(__m512& best, __m512i& bi, __m512& bx, const __m512& v,
                                                              const __m512& xv, int32_t off) {
  const __mmask16 take = _mm512_cmp_ps_mask(best, best, _CMP_ORD_Q) &
                         (_mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
  best = _mm512_mask_mov_ps(best, take, v);
  bx = _mm512_mask_mov_ps(bx, take, xv);
  bi = _mm512_mask_mov_epi32(bi, take, _mm512_set1_epi32(off));
}

// 32 floats from p in even / odd column order (n = 16 outputs' worth, fewer at a row's end: the
// loads are masked to 2 * n floats).
struct EvenOdd {
  __m512 even, odd;
};
__attribute__((target("avx512f"))) inline EvenOdd load_even_odd(const float* p, __mmask16 lo, __mmask16 hi) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512 a = _mm512_maskz_loadu_ps(lo, p), b = _mm512_maskz_loadu_ps(hi, p + 16);
  return {_mm512_permutex2var_ps(a, even, b), _mm512_permutex2var_ps(a, odd, b)};
}

// The masks of a step of n (1..16) outputs: the first / second 16 inputs, the outputs.
struct StepMasks {
  __mmask16 lo, hi, out;
};
inline StepMasks step_masks(int64_t n) {
  return {static_cast<__mmask16>(n >= 8 ? 0xFFFF : (1u << (2 * n)) - 1),
          static_cast<__mmask16>(n <= 8 ? 0 : (1u << (2 * (n - 8))) - 1), static_cast<__mmask16>((1u << n) - 1)};
}

// One (H_out, W_out) plane of outputs from z and x (rows of W values).
__attribute__((target("avx512f"))) void arg_plane_avx512(const float* z, const float* x, int64_t W, int64_t H_out,
                                                         int64_t W_out, float* y, uint8_t* arg, float* x_at) {
  for (int64_t oh = 0; oh < H_out; ++oh) {
    const float* z0 = z + 2 * oh * W;
    const float* x0 = x + 2 * oh * W;
    const int64_t o = oh * W_out;
    for (int64_t ow = 0; ow < W_out; ow += 16) {
      const StepMasks k = step_masks(std::min<int64_t>(16, W_out - ow));
      const EvenOdd a = load_even_odd(z0 + 2 * ow, k.lo, k.hi), b = load_even_odd(z0 + W + 2 * ow, k.lo, k.hi);
      const EvenOdd xa = load_even_odd(x0 + 2 * ow, k.lo, k.hi), xb = load_even_odd(x0 + W + 2 * ow, k.lo, k.hi);
      __m512 best = a.even, bx = xa.even;
      __m512i bi = _mm512_setzero_si512();
      take_if_better(best, bi, bx, a.odd, xa.odd, 1);
      take_if_better(best, bi, bx, b.even, xb.even, 2);
      take_if_better(best, bi, bx, b.odd, xb.odd, 3);
      // the ReLU's bit: kept where best > 0 or NaN (not <= 0, unordered true), as relu_keeps
      bi = _mm512_mask_or_epi32(bi, _mm512_cmp_ps_mask(best, _mm512_setzero_ps(), _CMP_NLE_UQ), bi,
                                _mm512_set1_epi32(4));
      _mm512_mask_storeu_ps(y + o + ow, k.out, best);
      _mm512_mask_storeu_ps(x_at + o + ow, k.out, bx);
      _mm512_mask_cvtepi32_storeu_epi8(arg + o + ow, k.out, bi);
    }
  }
}

// One plane of the input gradient g (rows of W values; what no window covers is left alone).
__attribute__((target("avx512f,avx512bw,avx512vl"))) void relu_grad_plane_avx512(const float* dout, const uint8_t* arg,
                                                                                 int64_t W, int64_t H_out,
                                                                                 int64_t W_out, float* g) {
  const __m512i lo_idx = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi_idx = _mm512_add_epi32(lo_idx, _mm512_set1_epi32(8));
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t oh = 0; oh < H_out; ++oh) {
    float* g0 = g + 2 * oh * W;
    float* g1 = g0 + W;
    const int64_t o = oh * W_out;
    for (int64_t ow = 0; ow < W_out; ow += 16) {
      const StepMasks k = step_masks(std::min<int64_t>(16, W_out - ow));
      const __m512i packed = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k.out, arg + o + ow));
      const __m512i a = _mm512_and_si512(packed, _mm512_set1_epi32(3));  // the winner's place
      const __m512 d = _mm512_add_ps(zero, _mm512_maskz_loadu_ps(k.out, dout + o + ow));  // 0 + dout, as scattered
      // the ReLU's bit (set where out > 0 or NaN): dout kept, else 0
      const __m512 v = _mm512_mask_mov_ps(zero, _mm512_test_epi32_mask(packed, _mm512_set1_epi32(4)), d);
      const __m512 e0 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(a, _mm512_set1_epi32(0)), v);
      const __m512 o0 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(a, _mm512_set1_epi32(1)), v);
      const __m512 e1 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(a, _mm512_set1_epi32(2)), v);
      const __m512 o1 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(a, _mm512_set1_epi32(3)), v);
      _mm512_mask_storeu_ps(g0 + 2 * ow, k.lo, _mm512_permutex2var_ps(e0, lo_idx, o0));
      _mm512_mask_storeu_ps(g0 + 2 * ow + 16, k.hi, _mm512_permutex2var_ps(e0, hi_idx, o0));
      _mm512_mask_storeu_ps(g1 + 2 * ow, k.lo, _mm512_permutex2var_ps(e1, lo_idx, o1));
      _mm512_mask_storeu_ps(g1 + 2 * ow + 16, k.hi, _mm512_permutex2var_ps(e1, hi_idx, o1));
    }
  }
}
}  // namespace

bool max_pool2d_plane_2x2_arg_avx512(const float* z, const float* x, int64_t W, int64_t H_out, int64_t W_out, float* y,
                                     uint8_t* arg, float* x_at) {
  if (!cpu_has_avx512f()) return false;
  arg_plane_avx512(z, x, W, H_out, W_out, y, arg, x_at);
  return true;
}

bool relu_max_pool2d_grad_plane_2x2_avx512(const float* dout, const uint8_t* arg, int64_t W, int64_t H_out,
                                           int64_t W_out, float* g) {
  if (!cpu_has_avx512_bw_vl()) return false;
  relu_grad_plane_avx512(dout, arg, W, H_out, W_out, g);
  return true;
}

bool max_pool2d_row_2x2_avx512(const float* r0, const float* r1, float* y, int64_t* idx, int64_t W_out, int64_t W,
                               int64_t base) {
  if (!cpu_has_avx512f()) return false;
  row_avx512(r0, r1, y, idx, W_out, W, base);
  return true;
}
#else
bool max_pool2d_row_2x2_avx512(const float*, const float*, float*, int64_t*, int64_t, int64_t, int64_t) {
  return false;
}
bool max_pool2d_plane_2x2_arg_avx512(const float*, const float*, int64_t, int64_t, int64_t, float*, uint8_t*, float*) {
  return false;
}
bool relu_max_pool2d_grad_plane_2x2_avx512(const float*, const uint8_t*, int64_t, int64_t, int64_t, float*) {
  return false;
}
#endif

}  // namespace minidl::kernels::cpu::pool_detail
