// tests/kernels/test_cpu_features.cpp — the run-time CPU checks and MINIDL_CPU_CAPABILITY's cap on
// them: each check is the CPU's feature under the cap; a cap turns off the kernels above it; a bad
// value stops a program as it starts, with exit status 2 and a message naming the value. The
// variable is read once as a program starts, so the capped cases run in a fresh copy of this
// program (GoogleTest's "threadsafe" death-test style re-executes it with this environment).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "minidl/kernels/cpu/cpu_features.h"
#include "minidl/kernels/cpu/gemm_bf16.h"
#include "tests/common/testing.h"

namespace {

namespace k = minidl::kernels::cpu;
using k::CpuCapability;
using minidl::testing::CpuCapabilityVariable;
using minidl::testing::expect_true_under_cpu_capability;

// AVX-512F, BW and VL (and AVX512_BF16 when asked): the features the capped checks combine.
bool cpu_has(bool avx512bf16) {
  const bool bw_vl =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return avx512bf16 ? bw_vl && __builtin_cpu_supports("avx512bf16") : bw_vl;
}

}  // namespace

// In this process: whatever the variable says (ctest also runs these programs capped).
TEST(CpuCapability, ChecksAreTheCpusFeaturesUnderTheCap) {
  const char* value = std::getenv("MINIDL_CPU_CAPABILITY");
  const CpuCapability cap = k::cpu_capability_cap();
  EXPECT_STREQ(k::cpu_capability_name(cap), value && *value ? value : "amx");
  EXPECT_EQ(k::cpu_has_avx512f(), cap >= CpuCapability::Avx512 && __builtin_cpu_supports("avx512f"));
  EXPECT_EQ(k::cpu_has_avx512_bw_vl(), cap >= CpuCapability::Avx512 && cpu_has(false));
  EXPECT_EQ(k::cpu_has_avx512_bf16(), cap >= CpuCapability::Avx512Bf16 && cpu_has(true));
  EXPECT_EQ(k::gemm_bf16_avx512_supported(), k::cpu_has_avx512_bf16());
  if (cap < CpuCapability::Amx) {
    EXPECT_FALSE(k::gemm_bf16_amx_supported());
  }
  if (cap < CpuCapability::Avx512Bf16) {
    EXPECT_FALSE(k::gemm_bf16_supported());
  }
}

TEST(CpuCapability, ACapTurnsOffTheKernelsAboveIt) {
  for (const char* cap : {"default", "avx512"}) {
    const bool avx512 = std::string(cap) == "avx512";
    expect_true_under_cpu_capability(cap, [&] {
      const uint16_t one = 0x3f80;  // bfloat16 1.0
      float c = 0.0f;
      const bool ran = k::gemm_bf16(1, 1, 1, &one, 1, false, &one, 1, false, &c, 1);
      return !ran && c == 0.0f && !k::gemm_bf16_supported() && !k::gemm_bf16_amx_supported() &&
             !k::cpu_has_avx512_bf16() && k::cpu_has_avx512f() == (avx512 && __builtin_cpu_supports("avx512f")) &&
             k::cpu_has_avx512_bw_vl() == (avx512 && cpu_has(false));
    });
  }
}

TEST(CpuCapability, AnEmptyValueIsEverythingAsUnset) {
  expect_true_under_cpu_capability("", [] {
    return k::cpu_capability_cap() == CpuCapability::Amx &&
           k::cpu_has_avx512f() == (__builtin_cpu_supports("avx512f") != 0) &&
           k::cpu_has_avx512_bw_vl() == cpu_has(false) && k::cpu_has_avx512_bf16() == cpu_has(true);
  });
}

TEST(CpuCapability, ABadValueStopsTheProgramAsItStartsNamingIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const CpuCapabilityVariable var("avx3");
  // Were the variable read later, the copy would reach _Exit(0).
  EXPECT_EXIT(std::_Exit(0), ::testing::ExitedWithCode(2),
              "minidl: MINIDL_CPU_CAPABILITY='avx3' is not one of default, avx512, avx512_bf16, amx");
}
