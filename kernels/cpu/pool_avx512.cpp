// kernels/cpu/pool_avx512.cpp — the AVX-512 row loop of the 2x2 max-pool (kernels/cpu/pool.h),
// compiled for AVX-512 whatever the build's -march and used only when the CPU has it (checked once
// at run time). 16 outputs per step: the two input rows are loaded (masked at the row's end), split
// into even and odd columns, and the four candidates compared in row-major order with the scalar
// loop's rule (a later candidate wins if greater, or a NaN while the best is not).
// GCC 12 reports false "maybe-uninitialized" warnings inside its own AVX-512 headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
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
}  // namespace

bool max_pool2d_row_2x2_avx512(const float* r0, const float* r1, float* y, int64_t* idx, int64_t W_out, int64_t W,
                               int64_t base) {
  static const bool have = __builtin_cpu_supports("avx512f");
  if (!have) return false;
  row_avx512(r0, r1, y, idx, W_out, W, base);
  return true;
}
#else
bool max_pool2d_row_2x2_avx512(const float*, const float*, float*, int64_t*, int64_t, int64_t, int64_t) {
  return false;
}
#endif

}  // namespace minidl::kernels::cpu::pool_detail
