// kernels/cpu/cpu_features.h — the run-time CPU checks of the kernels that carry their own target
// attribute (the library may be built for any x86-64 level; such a kernel runs only where its
// check says the CPU has what it needs), and the cap a user puts on them, as PyTorch's
// ATEN_CPU_CAPABILITY caps its kernels:
//
//   MINIDL_CPU_CAPABILITY=default      none of these kernels: the portable code a CPU without AVX-512 runs
//   MINIDL_CPU_CAPABILITY=avx512       + the AVX-512F/BW/VL kernels (float32 GEMM, pooling, bf16 conversion)
//   MINIDL_CPU_CAPABILITY=avx512_bf16  + the AVX512_BF16 GEMM (bfloat16 products)
//   MINIDL_CPU_CAPABILITY=amx          + the AMX GEMM: everything, as when the variable is unset or empty
//
// so that one machine runs, tests and times what a CPU with less would (naming more than the CPU
// has gains nothing). The variable is read once, as the program starts; any other value stops the
// program there with a message naming it and exit status 2. Code the compiler vectorised for this
// machine's -march is not affected: only these run-time choices are.
#pragma once

namespace minidl::kernels::cpu {

// The target attribute of such a kernel: AVX-512F with BW (16-bit lanes) and VL (128/256-bit forms).
#define MINIDL_AVX512_BW_VL_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))

enum class CpuCapability { Default, Avx512, Avx512Bf16, Amx };

// The cap MINIDL_CPU_CAPABILITY sets (Amx when it is unset or empty).
CpuCapability cpu_capability_cap();
const char* cpu_capability_name(CpuCapability c);  // "default", "avx512", "avx512_bf16", "amx"

// Whether this CPU has them and the cap allows them (each asked once):
bool cpu_has_avx512f();  // AVX-512F; cap >= avx512
bool cpu_has_avx512_bw_vl();  // AVX-512F, BW and VL; cap >= avx512
bool cpu_has_avx512_bf16();  // AVX512_BF16 with BW and VL; cap >= avx512_bf16
bool cpu_allows_amx();  // cap >= amx (whether the CPU has AMX: gemm_bf16_amx_supported)

}  // namespace minidl::kernels::cpu
