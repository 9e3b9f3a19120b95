// tests/tensor/test_cpu_segments.cpp — the CPU caching allocator's memory (tensor/cpu_segments.h):
// large blocks grow one reserved range and are written there; empty_cache hands the pages back to
// Linux (the resident size drops); without a range, or past its end, segments are heap
// allocations of their own on 2 MiB boundaries; and CPU tensors use the range.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "minidl/kernels/caching_allocator.h"
#include "minidl/tensor/cpu_allocator.h"
#include "minidl/tensor/cpu_segments.h"
#include "tests/common/testing.h"

using namespace minidl;

namespace {
constexpr size_t MiB = size_t(1) << 20;
}  // namespace

TEST(CpuSegments, LargeBlocksFollowOneAnotherInTheRangeAndAreWritable) {
  kernels::CachingAllocator a("cpu", 1024 * MiB, cpu_segment_source(256 * MiB));
  char* p = static_cast<char*>(a.allocate(5 * MiB, nullptr));
  char* q = static_cast<char*>(a.allocate(3 * MiB + 1000, nullptr));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (uintptr_t(2) << 20), 0u) << "the range starts on a 2 MiB boundary";
  EXPECT_EQ(q, p + 5 * MiB);
  std::memset(p, 1, 5 * MiB);
  std::memset(q, 2, 3 * MiB + 1000);
  EXPECT_EQ(p[5 * MiB - 1], 1);
  EXPECT_EQ(q[3 * MiB + 999], 2);
  EXPECT_EQ(a.stats().reserved, 5 * MiB + 3 * MiB + 1024);
  a.free(p);
  a.free(q);
}

TEST(CpuSegments, EmptyCacheHandsTheRangesPagesBackToLinux) {
  kernels::CachingAllocator a("cpu", 1024 * MiB, cpu_segment_source(256 * MiB));
  char* keep = static_cast<char*>(a.allocate(2 * MiB, nullptr));
  char* big = static_cast<char*>(a.allocate(64 * MiB, nullptr));
  std::memset(keep, 1, 2 * MiB);
  std::memset(big, 1, 64 * MiB);
  const int64_t touched = minidl::testing::resident_mib();
  a.free(big);
  EXPECT_GE(minidl::testing::resident_mib(), touched - 4) << "a freed block stays cached";
  a.empty_cache();
  EXPECT_LE(minidl::testing::resident_mib(), touched - 60) << "empty_cache gave the free end's pages back";
  EXPECT_EQ(a.stats().reserved, 2 * MiB);
  EXPECT_EQ(keep[2 * MiB - 1], 1) << "the live block below it is untouched";
  char* again = static_cast<char*>(a.allocate(8 * MiB, nullptr));  // grows again where it ended
  EXPECT_EQ(again, keep + 2 * MiB);
  std::memset(again, 3, 8 * MiB);
  EXPECT_EQ(again[8 * MiB - 1], 3);
  a.free(again);
  a.free(keep);
}

TEST(CpuSegments, WithoutARangeOrPastItsEndSegmentsAreOfTheirOwnOnTwoMiBBoundaries) {
  for (const size_t range : {size_t(0), 4 * MiB}) {
    kernels::CachingAllocator a("cpu", 1024 * MiB, cpu_segment_source(range));
    char* first = static_cast<char*>(a.allocate(3 * MiB, nullptr));  // in the 4 MiB range, if any
    char* p = static_cast<char*>(a.allocate(5 * MiB, nullptr));  // past its end
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (uintptr_t(2) << 20), 0u) << "range " << range;
    std::memset(p, 1, 5 * MiB);
    EXPECT_EQ(a.stats().reserved, range == 0 ? 4 * MiB + 6 * MiB : 3 * MiB + 6 * MiB) << "range " << range;
    a.free(first);
    a.free(p);
  }
}

// CPU tensors: a tensor larger than any cached block goes at the end of the one range, right after
// the previous one, and empty_cache gives both back once they are freed.
TEST(CpuSegments, LargeCpuTensorsShareTheRange) {
  const char* mode = std::getenv("MINIDL_CPU_ALLOCATOR");
  if (mode && std::strcmp(mode, "malloc") == 0) GTEST_SKIP() << "MINIDL_CPU_ALLOCATOR=malloc: no caching allocator";
  const size_t before = cpu_allocator_stats().reserved;
  {
    const Tensor a = empty({(int64_t(1) << 20) * 24 + 100});  // 96 MiB + 400 B: more than any cached block
    const Tensor b = empty({(int64_t(1) << 20) * 24 + 100});
    EXPECT_EQ(static_cast<const char*>(b.raw_data()) - static_cast<const char*>(a.raw_data()), (96 << 20) + 512);
    EXPECT_LE(cpu_allocator_stats().reserved - before, 2 * ((96 << 20) + 512)) << "no more than the two need";
  }
  cpu_empty_cache();
  EXPECT_LE(cpu_allocator_stats().reserved, before);
}
