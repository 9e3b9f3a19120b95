// kernels/philox.h — Philox 4x32-10, the counter-based random generator of Salmon et al. (SC'11,
// "Parallel random numbers: as easy as 1, 2, 3"; the Random123 library). A 128-bit counter and a
// 64-bit key give four 32-bit random words; no state is carried between calls, so element i of a
// random tensor depends only on (seed, stream, i) — not on thread count, device, or rank.
// __host__ __device__: the CPU and CUDA kernels produce identical numbers.
#pragma once
#include <cstdint>

#include "minidl/kernels/functors.h"

namespace minidl::kernels {

struct Philox4x32 {
  uint32_t v[4];
};

MINIDL_HD void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

// The raw bijection: 10 rounds over (counter, key).
MINIDL_HD Philox4x32 philox4x32_10(Philox4x32 ctr, uint32_t k0, uint32_t k1) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += W0;
      k1 += W1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(M0, ctr.v[0], hi0, lo0);
    philox_mulhilo(M1, ctr.v[2], hi1, lo1);
    ctr = Philox4x32{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
  }
  return ctr;
}

// minidl's keying: key = seed, counter = (index, stream). Four words per (seed, stream, index).
MINIDL_HD Philox4x32 philox_at(uint64_t seed, uint64_t stream, uint64_t index) {
  Philox4x32 c{{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), static_cast<uint32_t>(stream),
                static_cast<uint32_t>(stream >> 32)}};
  return philox4x32_10(c, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// Uniform in [0, 1) with 24 random bits (float) or 53 (double).
MINIDL_HD float philox_uniform_float(uint32_t w) { return static_cast<float>(w >> 8) * (1.0f / 16777216.0f); }
MINIDL_HD double philox_uniform_double(uint32_t w0, uint32_t w1) {
  const uint64_t bits = (static_cast<uint64_t>(w0) << 21) ^ (w1 >> 11);
  return static_cast<double>(bits & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

// Element i of a uniform tensor: one Philox call per element, so any element is computable alone.
template <class T> MINIDL_HD T philox_uniform(uint64_t seed, uint64_t stream, uint64_t i) {
  const Philox4x32 r = philox_at(seed, stream, i);
  if constexpr (sizeof(T) == 4) {
    return static_cast<T>(philox_uniform_float(r.v[0]));
  } else {
    return static_cast<T>(philox_uniform_double(r.v[0], r.v[1]));
  }
}

// Element i of a standard normal tensor: Box–Muller on two uniforms from one Philox call.
template <class T> MINIDL_HD T philox_normal(uint64_t seed, uint64_t stream, uint64_t i) {
  const Philox4x32 r = philox_at(seed, stream, i);
  const double u1 = 1.0 - philox_uniform_double(r.v[0], r.v[1]);  // (0, 1]: log is finite
  const double u2 = philox_uniform_double(r.v[2], r.v[3]);
  return static_cast<T>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925 * u2));
}

}  // namespace minidl::kernels
