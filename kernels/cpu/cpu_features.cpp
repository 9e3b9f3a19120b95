// kernels/cpu/cpu_features.cpp — the run-time CPU checks and MINIDL_CPU_CAPABILITY's cap on them
// (cpu_features.h).
#include "minidl/kernels/cpu/cpu_features.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#define MINIDL_CPU_SUPPORTS(feature) (__builtin_cpu_supports(feature) != 0)
#else
#define MINIDL_CPU_SUPPORTS(feature) false
#endif

namespace minidl::kernels::cpu {
namespace {

constexpr CpuCapability kAll[] = {CpuCapability::Default, CpuCapability::Avx512, CpuCapability::Avx512Bf16,
                                  CpuCapability::Amx};

CpuCapability read_cap() {
  const char* v = std::getenv("MINIDL_CPU_CAPABILITY");
  if (!v || !*v) return CpuCapability::Amx;  // unset or empty: everything
  for (CpuCapability c : kAll)
    if (std::strcmp(v, cpu_capability_name(c)) == 0) return c;
  std::fprintf(stderr, "minidl: MINIDL_CPU_CAPABILITY='%s' is not one of default, avx512, avx512_bf16, amx\n", v);
  std::exit(2);
}

// Read as the program starts (one thread, nothing done yet), so that a bad value stops it before
// any work rather than inside a kernel's parallel loop.
[[maybe_unused]] const bool cap_read_at_start = (cpu_capability_cap(), true);

}  // namespace

CpuCapability cpu_capability_cap() {
  static const CpuCapability cap = read_cap();
  return cap;
}

const char* cpu_capability_name(CpuCapability c) {
  switch (c) {
    case CpuCapability::Default:
      return "default";
    case CpuCapability::Avx512:
      return "avx512";
    case CpuCapability::Avx512Bf16:
      return "avx512_bf16";
    case CpuCapability::Amx:
      return "amx";
  }
  return "?";
}

bool cpu_has_avx512f() {
  static const bool have = cpu_capability_cap() >= CpuCapability::Avx512 && MINIDL_CPU_SUPPORTS("avx512f");
  return have;
}

bool cpu_has_avx512_bw_vl() {
  static const bool have = cpu_has_avx512f() && MINIDL_CPU_SUPPORTS("avx512bw") && MINIDL_CPU_SUPPORTS("avx512vl");
  return have;
}

bool cpu_has_avx512_bf16() {
  static const bool have =
      cpu_capability_cap() >= CpuCapability::Avx512Bf16 && cpu_has_avx512_bw_vl() && MINIDL_CPU_SUPPORTS("avx512bf16");
  return have;
}

bool cpu_allows_amx() { return cpu_capability_cap() >= CpuCapability::Amx; }

}  // namespace minidl::kernels::cpu
