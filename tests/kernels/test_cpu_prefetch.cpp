// tests/kernels/test_cpu_prefetch.cpp — kernels/cpu/prefetch.h: blocks_prefetched hands its
// function every index of [0, n) once, in order, in blocks of kPrefetchBlock (the last shorter),
// for n around the block size and with streams of different element types; prefetch_elements
// reads nothing it could fault on (an address past an array's end).
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "minidl/kernels/cpu/prefetch.h"

namespace {

using namespace minidl::kernels::cpu;

TEST(CpuPrefetch, BlocksCoverEveryIndexOnceInOrder) {
  for (int64_t n :
       {int64_t(0), int64_t(1), kPrefetchBlock - 1, kPrefetchBlock, kPrefetchBlock + 1, 10 * kPrefetchBlock + 7}) {
    std::vector<float> a(static_cast<size_t>(n) + 1);
    std::vector<uint16_t> b(static_cast<size_t>(n) + 1);
    std::vector<std::pair<int64_t, int64_t>> calls;
    blocks_prefetched(
        n, [&](int64_t i0, int64_t i1) { calls.emplace_back(i0, i1); }, a.data(), b.data());
    int64_t next = 0;
    for (const auto& [i0, i1] : calls) {
      EXPECT_EQ(i0, next) << "n = " << n;
      EXPECT_GT(i1, i0) << "n = " << n;
      EXPECT_LE(i1 - i0, kPrefetchBlock) << "n = " << n;
      next = i1;
    }
    EXPECT_EQ(next, n);
    EXPECT_EQ(static_cast<int64_t>(calls.size()), (n + kPrefetchBlock - 1) / kPrefetchBlock) << "n = " << n;
  }
}

TEST(CpuPrefetch, PrefetchingPastAnArraysEndDoesNotFault) {
  std::vector<float> a(16, 1.0f);
  prefetch_elements(a.data() + a.size() + kPrefetchAhead, kPrefetchBlock);  // never dereferenced
  float sum = 0;
  blocks_prefetched(
      static_cast<int64_t>(a.size()),
      [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) sum += a[static_cast<size_t>(i)];
      },
      a.data());
  EXPECT_EQ(sum, 16.0f);
}

}  // namespace
