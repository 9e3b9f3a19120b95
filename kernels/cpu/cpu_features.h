// kernels/cpu/cpu_features.h — the run-time CPU check the AVX-512 kernels with byte/word and
// short-vector instructions share (the library may be built for any x86-64 level; such a kernel
// carries its own target attribute and runs only where this says the CPU has them).
#pragma once

namespace minidl::kernels::cpu {

// The target attribute of such a kernel: AVX-512F with BW (16-bit lanes) and VL (128/256-bit forms).
#define MINIDL_AVX512_BW_VL_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))

// Whether this CPU has AVX-512F, AVX-512BW and AVX-512VL (asked once).
inline bool cpu_has_avx512_bw_vl() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool have =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return have;
#else
  return false;
#endif
}

}  // namespace minidl::kernels::cpu
