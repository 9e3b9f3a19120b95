// kernels/cpu/bf16_round_avx512.h — float32 -> bfloat16 rounding on 16 AVX-512 lanes: half.h's
// float_to_bf16 (round to nearest even, a NaN kept a quiet NaN), shared by the span conversions
// (half_avx512.cpp) and the rounded stores of the bfloat16 GEMMs (gemm_bf16_pack.h). It carries
// its own target attributes, so code built for any x86-64 level may include it; callers run it
// only where the CPU has AVX-512.
#pragma once
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

namespace minidl::kernels::cpu {

// Each lane's bfloat16 bits, in the low half of its 32-bit lane.
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512i round_bf16_bits(__m512i u) {
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);  // the kept part's lowest bit
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)), 16);
  // NaN (|x| above infinity's bits): the upper half with the quiet bit set
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x0040));
  return _mm512_mask_blend_epi32(nan, rounded, quiet);
}

// Each lane rounded to bfloat16 precision and kept float32: the bits above, widened back.
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512 round_bf16_ps(__m512 x) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(round_bf16_bits(_mm512_castps_si512(x)), 16));
}

}  // namespace minidl::kernels::cpu
#endif
