// kernels/cpu/half_avx512.cpp — the span conversions of half_span.h: float32 -> bfloat16 (and its
// round trip back to float32) on 16 lanes with AVX-512 (compiled for it whatever the build's -march, used only when the CPU has it),
// the per-element reference and the widening loop.
// Written in __m512 intrinsics, not vec_math.h's lane types: the kernel carries its own
// target("avx512f,avx512bw,avx512vl") attributes for the run-time dispatch (vec_math.h's helpers are compiled for
// the build's -march), and needs vpmovdw's 32 -> 16-bit narrowing and masked tail stores.
#include "minidl/kernels/cpu/half_span.h"

#include "minidl/kernels/cpu/bf16_round_avx512.h"
#include "minidl/kernels/cpu/cpu_features.h"
#include "minidl/kernels/cpu/half.h"
#include "minidl/kernels/cpu/prefetch.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace minidl::kernels::cpu {

void float_to_bf16_span_reference(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = float_to_bf16(x[i]);
}

void round_to_bf16_span_reference(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_float(float_to_bf16(x[i]));
}

void bf16_to_float_span(const uint16_t* h, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_float(h[i]);
}

#if defined(__x86_64__) && defined(__GNUC__)
namespace {

__attribute__((target("avx512f,avx512bw,avx512vl"))) __m256i round_16(__m512i u) {
  return _mm512_cvtepi32_epi16(round_bf16_bits(u));  // vpmovdw: keep the low 16 bits
}

// The same rounding, widened back: the bfloat16 bits in the upper half of each float32 lane.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void round_to_bf16_avx512(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, round_bf16_ps(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, round_bf16_ps(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void float_to_bf16_avx512(const float* x, uint16_t* y, int64_t n) {
  // x is often a product's output that has left the caches: each block of kPrefetchBlock asks for
  // the lines kPrefetchAhead floats on (prefetch.h; written out, as a lambda would not carry this
  // function's target attributes)
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    if (i % kPrefetchBlock == 0) prefetch_elements(x + i + kPrefetchAhead, kPrefetchBlock);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i),
                        round_16(_mm512_loadu_si512(reinterpret_cast<const void*>(x + i))));
  }
  if (i < n) {  // the tail: masked load and store
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm256_mask_storeu_epi16(y + i, m, round_16(_mm512_maskz_loadu_epi32(m, x + i)));
  }
}

}  // namespace

void float_to_bf16_span(const float* x, uint16_t* y, int64_t n) {
  if (cpu_has_avx512_bw_vl())
    float_to_bf16_avx512(x, y, n);
  else
    float_to_bf16_span_reference(x, y, n);
}

void round_to_bf16_span(const float* x, float* y, int64_t n) {
  if (cpu_has_avx512_bw_vl())
    round_to_bf16_avx512(x, y, n);
  else
    round_to_bf16_span_reference(x, y, n);
}
#else
void float_to_bf16_span(const float* x, uint16_t* y, int64_t n) { float_to_bf16_span_reference(x, y, n); }
void round_to_bf16_span(const float* x, float* y, int64_t n) { round_to_bf16_span_reference(x, y, n); }
#endif

}  // namespace minidl::kernels::cpu
