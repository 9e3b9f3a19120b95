// kernels/cpu/half_span.h — float32 <-> bfloat16 over contiguous spans: the conversion autocast
// runs once per operand before a bfloat16 GEMM (kernels/cpu/gemm_bf16.h), 16 lanes at a time.
//
//   float_to_bf16_span(x, y, n):  y[i] = float_to_bf16(x[i])   (round to nearest, ties to even)
//   bf16_to_float_span(h, y, n):  y[i] = bf16_to_float(h[i])   (exact)
//   round_to_bf16_span(x, y, n):  y[i] = bf16_to_float(float_to_bf16(x[i]))   (both, one pass:
//                                 autocast's rounding of an operand a float32 kernel multiplies)
//
// The narrowing kernel (half_avx512.cpp) does half.h's integer rounding on 16 lanes with AVX-512
// (add 0x7fff plus the kept part's lowest bit, keep the upper half; NaN lanes keep their sign and
// payload and become quiet) and packs the 16 results with one vpmovdw; it is used only when the
// CPU has AVX-512 (F, BW, VL; checked once at run time). Not vcvtneps2bf16: that instruction flushes
// subnormal inputs to zero, the scalar rounding does not. Every bit equals
// float_to_bf16_span_reference, the per-element loop over half.h (tests/kernels/test_cpu_half_span.cpp).
// None splits work across threads: callers parallelise over spans.
#pragma once
#include <cstdint>

namespace minidl::kernels::cpu {

void float_to_bf16_span(const float* x, uint16_t* y, int64_t n);
void float_to_bf16_span_reference(const float* x, uint16_t* y, int64_t n);  // float_to_bf16 per element
void bf16_to_float_span(const uint16_t* h, float* y, int64_t n);  // a shift per element (vectorises as written)
void round_to_bf16_span(const float* x, float* y, int64_t n);  // y may be x
void round_to_bf16_span_reference(const float* x, float* y, int64_t n);  // the two conversions per element

}  // namespace minidl::kernels::cpu
