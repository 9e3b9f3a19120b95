// tests/kernels/test_cpu_vec_math.cpp — the lane vocabulary of kernels/cpu/vec_math.h that the
// CPU kernels share: transpose16 against a plain index transpose (every one of the 256 values in
// its place), the masked loads and stores on every count 0..16 (lanes past n zero when loaded,
// the floats past n untouched when stored), keep_first_lanes, broadcast_lanes bit for bit (-0.0,
// NaN, a denormal), lanes_from on every shift 0..16
// against the lanes it names, even_lanes / odd_lanes / interleave on 32 numbered floats, and the horizontal sum's fixed tree
// order (lanes l and l + 8 first), which its callers' bits depend on.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "minidl/kernels/cpu/vec_math.h"

namespace {

using namespace minidl::kernels::cpu;

TEST(CpuVecMath, Transpose16MatchesThePlainIndexTranspose) {
  float in[16][16], expected[16][16];
  for (int i = 0; i < 16; ++i)
    for (int k = 0; k < 16; ++k) in[i][k] = static_cast<float>(100 * i + k);
  for (int i = 0; i < 16; ++i)
    for (int k = 0; k < 16; ++k) expected[k][i] = in[i][k];
  FloatLanes m[16];
  for (int i = 0; i < 16; ++i) m[i] = load_lanes(in[i]);
  transpose16(m);
  for (int i = 0; i < 16; ++i)
    for (int k = 0; k < 16; ++k) ASSERT_EQ(m[i][k], expected[i][k]) << "row " << i << " lane " << k;
}

TEST(CpuVecMath, MaskedLoadsAndStoresTouchOnlyTheFirstLanes) {
  for (int64_t n = 0; n <= 16; ++n) {
    std::vector<float> src(static_cast<size_t>(n) + 1);  // n values, then one that must not be read in
    for (int64_t l = 0; l < n; ++l) src[static_cast<size_t>(l)] = static_cast<float>(l + 1);
    src[static_cast<size_t>(n)] = -7.0f;
    const FloatLanes v = load_first_lanes(src.data(), n);
    for (int64_t l = 0; l < 16; ++l) ASSERT_EQ(v[l], l < n ? static_cast<float>(l + 1) : 0.0f) << "n " << n;
    std::vector<float> dst(17, -1.0f);
    store_first_lanes(dst.data(), splat(5.0f), n);
    for (int64_t l = 0; l < 17; ++l) ASSERT_EQ(dst[static_cast<size_t>(l)], l < n ? 5.0f : -1.0f) << "n " << n;
    const FloatLanes kept = keep_first_lanes(splat(2.0f), n, -3.0f);
    for (int64_t l = 0; l < 16; ++l) ASSERT_EQ(kept[l], l < n ? 2.0f : -3.0f) << "n " << n;
  }
  const DoubleLanes d = load_first_lanes(std::vector<double>{1, 2, 3}.data(), 3);
  EXPECT_EQ(d[2], 3.0);
  EXPECT_EQ(d[3], 0.0);
}

TEST(CpuVecMath, LanesFromTakesSixteenConsecutiveLanesOfTwoVectors) {
  float lo[16], hi[16];
  for (int l = 0; l < 16; ++l) lo[l] = static_cast<float>(l), hi[l] = static_cast<float>(16 + l);
  for (int64_t shift = 0; shift <= 16; ++shift) {
    const FloatLanes v = lanes_from(load_lanes(lo), load_lanes(hi), shift);
    for (int64_t l = 0; l < 16; ++l) ASSERT_EQ(v[l], static_cast<float>(shift + l)) << "shift " << shift;
  }
}

TEST(CpuVecMath, EvenAndOddLanesSplitThirtyTwoFloatsAndInterleaveJoinsThem) {
  float lo[16], hi[16];
  for (int l = 0; l < 16; ++l) lo[l] = static_cast<float>(l), hi[l] = static_cast<float>(16 + l);
  const FloatLanes even = even_lanes(load_lanes(lo), load_lanes(hi)), odd = odd_lanes(load_lanes(lo), load_lanes(hi));
  for (int l = 0; l < 16; ++l) {
    ASSERT_EQ(even[l], static_cast<float>(2 * l)) << "lane " << l;
    ASSERT_EQ(odd[l], static_cast<float>(2 * l + 1)) << "lane " << l;
  }
  FloatLanes back_lo, back_hi;
  interleave(even, odd, back_lo, back_hi);
  for (int l = 0; l < 16; ++l) {
    ASSERT_EQ(back_lo[l], lo[l]) << "lane " << l;
    ASSERT_EQ(back_hi[l], hi[l]) << "lane " << l;
  }
}

TEST(CpuVecMath, BroadcastLanesCopiesTheValueExactly) {
  for (const float x : {1.5f, -0.0f, std::numeric_limits<float>::quiet_NaN(), -3e-40f}) {
    const FloatLanes v = broadcast_lanes(&x);
    float lanes[16];
    std::memcpy(lanes, &v, sizeof v);
    for (int64_t l = 0; l < 16; ++l) ASSERT_EQ(std::memcmp(&lanes[l], &x, sizeof x), 0) << "lane " << l << " of " << x;
  }
  const double d = -0.0;
  const DoubleLanes w = broadcast_lanes(&d);
  for (int64_t l = 0; l < 8; ++l) ASSERT_TRUE(std::signbit(w[l])) << "lane " << l;
}

TEST(CpuVecMath, HorizontalSumAddsInAFixedTree) {
  // 2^24 + 1 is not a float: the order of the additions shows in the result. The tree adds lane
  // 0 and lane 8 first (2^24 - 2^24 = 0), then every 1 exactly: 14. In lane order the 1s after
  // 2^24 would be lost.
  FloatLanes v = splat(1.0f);
  v[0] = 16777216.0f;
  v[8] = -16777216.0f;
  EXPECT_EQ(horizontal_sum(v), 14.0f);
  float in_order = 0;
  for (int l = 0; l < 16; ++l) in_order += v[l];
  EXPECT_NE(in_order, 14.0f);  // the case does tell the two orders apart
  v[5] = 99.0f;
  EXPECT_EQ(horizontal_max(v), 16777216.0f);
  EXPECT_EQ(horizontal_sum(DoubleLanes{1, 2, 3, 4, 5, 6, 7, 8}), 36.0);
}

}  // namespace
