// kernels/cpu/half.h — the two 16-bit floating formats of mixed precision, as bit patterns, and
// their conversions to and from float32, rounding to nearest, ties to even.
//
//   bfloat16: 1 sign, 8 exponent, 7 mantissa bits — float32's range, 3 significant digits; the
//             upper half of a float32 (google brain float; PyTorch's torch.bfloat16).
//   float16:  1 sign, 5 exponent, 10 mantissa bits — IEEE 754 binary16 (torch.float16): largest
//             finite 65504, smallest normal 2^-14, subnormals down to 2^-24.
//
// Both widen exactly to float32. Narrowing rounds to nearest, ties to even; NaN stays NaN (quiet);
// float16 overflows to infinity from 65520 up (the first value that rounds past 65504) and
// keeps subnormals. These are the scalar references every vector conversion is tested against.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace minidl::kernels::cpu {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float float_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// ---- bfloat16 ----
inline float bf16_to_float(uint16_t h) { return float_from_bits(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN: keep it quiet
  // Add half an ulp of the result, plus one more when the kept part is odd (ties to even); the
  // carry may ripple into the exponent, which is the right answer (up to infinity).
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// ---- float16 (IEEE binary16) ----
inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return float_from_bits(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  if (exponent != 0) return float_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);  // zero or subnormal: m * 2^-24
  return sign ? -magnitude : magnitude;
}

inline uint16_t float_to_fp16(float f) {
  const uint32_t u = float_bits(f);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;  // |f|
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN (quiet)
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: infinity
  if (a >= 0x38800000u) {  // a normal float16: re-bias the exponent, round 23 -> 10 mantissa bits
    const uint32_t rebased = a - (112u << 23);
    return static_cast<uint16_t>(sign | ((rebased + 0xfffu + ((rebased >> 13) & 1u)) >> 13));
  }
  // Below 2^-14: a subnormal m * 2^-24 (m = 0 .. 1024, 1024 being the smallest normal). Shift the
  // full 24-bit significand right so that its units are 2^-24, rounding to nearest, ties to even.
  const uint32_t exponent = a >> 23;
  if (exponent < 102) return sign;  // below 2^-25: rounds to zero
  const uint32_t significand = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - exponent;  // 14 .. 24
  const uint32_t kept = significand >> shift;
  const uint32_t rest = significand & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  const uint32_t m = kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
  return static_cast<uint16_t>(sign | m);
}

}  // namespace minidl::kernels::cpu
