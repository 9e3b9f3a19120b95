// tests/kernels/test_cpu_half_span.cpp — the span conversions of kernels/cpu/half_span.h: the
// AVX-512 float32 -> bfloat16 kernel gives the bits of the per-element reference (half.h's
// float_to_bf16) on the values where rounding is delicate — ties to even both ways, the carry into
// the exponent and up to infinity, subnormals (kept, not flushed), signed zeros, infinities, NaNs
// (quiet, sign and payload kept) — on every length from 0 to 40 (the 16-lane body and the masked
// tail, the bytes after the span untouched), and widening is exact; the one-pass round trip
// (round_to_bf16_span) gives the bits of the two conversions on the same values, in place too.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "minidl/kernels/cpu/half.h"
#include "minidl/kernels/cpu/half_span.h"
#include "tests/common/testing.h"

namespace {

using namespace minidl::kernels::cpu;

// Inputs where rounding is delicate, with the bits half.h's float_to_bf16 gives them.
struct Delicate {
  float x;
  uint16_t bf16;
};
std::vector<Delicate> delicate_values() {
  const float inf = std::numeric_limits<float>::infinity();
  return {
      {1.0f + 1.0f / 256, 0x3f80},  // a tie: down to the even 1.0
      {1.0f + 3.0f / 256, 0x3f82},  // a tie: up to the even
      {1.0f + 1.0f / 256 + 1e-7f, 0x3f81},  // just above the tie: up
      {float_from_bits(0x7f7fffffu), 0x7f80},  // the largest float: up to infinity
      {float_from_bits(0x3fffffffu), 0x4000},  // carries into the exponent: 2.0
      {float_from_bits(0x00000001u), 0x0000},  // the smallest subnormal: to +0
      {float_from_bits(0x00018000u), 0x0002},  // a subnormal tie: up to the even
      {float_from_bits(0x007fffffu), 0x0080},  // the largest subnormal: up to the smallest normal
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {inf, 0x7f80},
      {-inf, 0xff80},
      {float_from_bits(0x7fc00001u), 0x7fc0},  // quiet NaN, its payload below the kept half
      {float_from_bits(0xff800001u), 0xffc0},  // signalling negative NaN: quiet, sign kept
      {float_from_bits(0x7fbf0000u), 0x7fff},  // signalling NaN, its payload in the kept half
      {-3.14159265f, 0xc049},
      {1e-40f, 0x0001},
      {-65504.0f, 0xc780},
      {0.1f, 0x3dcd},
  };
}

TEST(CpuHalfSpan, Float32ToBFloat16MatchesTheReferenceBitForBitOnEveryLength) {
  std::vector<float> x;
  std::vector<uint16_t> expected;
  for (const Delicate& d : delicate_values()) {
    x.push_back(d.x);
    expected.push_back(d.bf16);
  }
  const std::vector<float> more = minidl::testing::values(21, 7);  // 40 values in all
  x.insert(x.end(), more.begin(), more.end());
  for (size_t n = 0; n <= x.size(); ++n) {
    std::vector<uint16_t> got(x.size() + 1, 0xabcd), want(x.size() + 1, 0xabcd);
    float_to_bf16_span(x.data(), got.data(), static_cast<int64_t>(n));
    float_to_bf16_span_reference(x.data(), want.data(), static_cast<int64_t>(n));
    ASSERT_EQ(got, want) << "n = " << n;
    EXPECT_EQ(got[n], 0xabcd) << "wrote past the span, n = " << n;
  }
  std::vector<uint16_t> y(x.size());
  float_to_bf16_span(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(y[i], expected[i]) << "value " << i;
}

TEST(CpuHalfSpan, RoundTripIsTheTwoConversionsBitForBitOnEveryLength) {
  std::vector<float> x;
  for (const Delicate& d : delicate_values()) x.push_back(d.x);
  const std::vector<float> more = minidl::testing::values(21, 8);
  x.insert(x.end(), more.begin(), more.end());
  for (size_t n = 0; n <= x.size(); ++n) {
    std::vector<float> got(x.size() + 1, 7.0f), want(x.size() + 1, 7.0f);
    round_to_bf16_span(x.data(), got.data(), static_cast<int64_t>(n));
    round_to_bf16_span_reference(x.data(), want.data(), static_cast<int64_t>(n));
    for (size_t i = 0; i <= x.size(); ++i)
      ASSERT_EQ(float_bits(got[i]), float_bits(want[i])) << "n = " << n << ", " << i;
  }
  std::vector<float> y = x;  // in place
  round_to_bf16_span(y.data(), y.data(), static_cast<int64_t>(y.size()));
  const std::vector<Delicate> d = delicate_values();
  for (size_t i = 0; i < d.size(); ++i)
    EXPECT_EQ(float_bits(y[i]), static_cast<uint32_t>(d[i].bf16) << 16) << "value " << i;
}

TEST(CpuHalfSpan, WideningIsExact) {
  std::vector<uint16_t> h = {0x3f80, 0x8000, 0x0001, 0x7f80, 0xc049, 0x7fc0};
  std::vector<float> y(h.size());
  bf16_to_float_span(h.data(), y.data(), static_cast<int64_t>(h.size()));
  for (size_t i = 0; i < h.size(); ++i) EXPECT_EQ(float_bits(y[i]), static_cast<uint32_t>(h[i]) << 16) << i;
}

}  // namespace
