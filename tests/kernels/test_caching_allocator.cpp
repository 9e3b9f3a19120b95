// tests/kernels/test_caching_allocator.cpp — the caching allocator's logic on the CPU, with a
// malloc-backed segment source (kernels/caching_allocator.h): reuse without new segments, block
// splitting and merging, per-stream pools, statistics, empty_cache, the memory cap's
// out-of-memory message, record_stream (a block freed while another stream still uses it, with
// fake events), and a source with a growable segment (the CPU's). Runs everywhere; the CUDA glue is covered by test_cuda_allocator.cpp.
#include <cstdlib>
#include <memory>
#include <set>
#include <vector>

#include "minidl/kernels/caching_allocator.h"
#include "tests/common/testing.h"

using namespace minidl::kernels;

namespace {
constexpr size_t MiB = size_t(1) << 20;

struct FakeDevice {
  std::set<void*> live;
  SegmentSource source() {
    return {[this](size_t n) -> void* {
              void* p = std::malloc(n);
              live.insert(p);
              return p;
            },
            [this](void* p) {
              live.erase(p);
              std::free(p);
            }};
  }
};
// A source with a growable segment: one buffer of `capacity` bytes, the segment its first `used`.
struct FakeGrowableDevice {
  explicit FakeGrowableDevice(size_t capacity) : capacity(capacity), base(static_cast<char*>(std::malloc(capacity))) {}
  ~FakeGrowableDevice() { std::free(base); }
  size_t capacity, used = 0;
  char* base;
  std::set<void*> live;  // segments of their own
  SegmentSource source() {
    return {.alloc = [this](size_t n) -> void* {
              void* p = std::malloc(n);
              live.insert(p);
              return p;
            },
            .free =
                [this](void* p) {
                  if (p == base) {
                    used = 0;
                    return;
                  }
                  live.erase(p);
                  std::free(p);
                },
            .grow = [this](void* end, size_t n) -> void* {
              if (end != (used == 0 ? nullptr : base + used) || n > capacity - used) return nullptr;
              used += n;
              return end == nullptr ? base : end;
            },
            .shrink =
                [this](void* p, size_t n) {
                  if (static_cast<char*>(p) + n != base + used) return false;
                  used -= n;
                  return true;
                }};
  }
};
void* stream_a = reinterpret_cast<void*>(0x1);
void* stream_b = reinterpret_cast<void*>(0x2);
void* stream_c = reinterpret_cast<void*>(0x3);

// Events that complete when the test says so.
struct FakeEvents {
  struct Event {
    void* stream;
    bool done = false;
    bool destroyed = false;
  };
  std::vector<std::unique_ptr<Event>> recorded;
  EventSource source() {
    return {[this](void* stream) -> void* {
              recorded.push_back(std::make_unique<Event>(Event{stream}));
              return recorded.back().get();
            },
            [](void* e) { return static_cast<Event*>(e)->done; },
            [](void* e) { static_cast<Event*>(e)->destroyed = true; }};
  }
};
}  // namespace

TEST(CachingAllocator, FreedBlockIsReusedWithoutANewSegment) {
  FakeDevice dev;
  CachingAllocator a("cuda:0", 1024 * MiB, dev.source());
  void* p = a.allocate(4 * MiB, stream_a);
  a.free(p);
  void* q = a.allocate(4 * MiB, stream_a);
  EXPECT_EQ(p, q);
  EXPECT_EQ(a.stats().segment_allocs, 1);
  EXPECT_EQ(a.stats().cache_hits, 1);
  a.free(q);
}

TEST(CachingAllocator, SmallRequestsShareOneTwoMiBSegmentAndRoundTo512) {
  FakeDevice dev;
  CachingAllocator a("cuda:0", 1024 * MiB, dev.source());
  void* p = a.allocate(1, stream_a);
  void* q = a.allocate(1000, stream_a);
  EXPECT_EQ(a.block_size(p), 512u);
  EXPECT_EQ(a.block_size(q), 1024u);
  EXPECT_EQ(static_cast<char*>(q) - static_cast<char*>(p), 512);  // split from the same segment
  EXPECT_EQ(a.stats().segment_allocs, 1);
  EXPECT_EQ(a.stats().reserved, 2 * MiB);
  EXPECT_EQ(a.stats().allocated, 1536u);
  a.free(p);
  a.free(q);
  EXPECT_EQ(a.stats().allocated, 0u);
}

TEST(CachingAllocator, FreedNeighboursMergeSoALargerRequestFits) {
  FakeDevice dev;
  CachingAllocator a("cuda:0", 1024 * MiB, dev.source());
  void* p = a.allocate(512 * 1024, stream_a);
  void* q = a.allocate(512 * 1024, stream_a);
  a.free(p);
  a.free(q);
  void* r = a.allocate(1 * MiB, stream_a);  // the merged 1 MiB block at the segment start
  EXPECT_EQ(r, p);
  EXPECT_EQ(a.stats().segment_allocs, 1);
  a.free(r);
}

TEST(CachingAllocator, BlocksAreNotSharedAcrossStreams) {
  FakeDevice dev;
  CachingAllocator a("cuda:0", 1024 * MiB, dev.source());
  void* p = a.allocate(8 * MiB, stream_a);
  a.free(p);
  void* q = a.allocate(8 * MiB, stream_b);
  EXPECT_NE(p, q);
  EXPECT_EQ(a.stats().segment_allocs, 2);
  a.free(q);
}

TEST(CachingAllocator, StatsTrackAllocatedReservedAndPeak) {
  FakeDevice dev;
  CachingAllocator a("cuda:0", 1024 * MiB, dev.source());
  void* p = a.allocate(4 * MiB, stream_a);  // large requests: one segment each, rounded to 2 MiB
  void* q = a.allocate(6 * MiB, stream_a);
  EXPECT_EQ(a.stats().allocated, 10 * MiB);
  EXPECT_EQ(a.stats().reserved, 10 * MiB);
  a.free(q);
  EXPECT_EQ(a.stats().allocated, 4 * MiB);
  EXPECT_EQ(a.stats().reserved, 10 * MiB);  // cached until empty_cache()
  EXPECT_EQ(a.stats().peak_allocated, 10 * MiB);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_allocated, 4 * MiB);
  a.free(p);
}

TEST(CachingAllocator, EmptyCacheReturnsUnusedSegmentsOnly) {
  FakeDevice dev;
  CachingAllocator a("cuda:0", 1024 * MiB, dev.source());
  void* keep = a.allocate(4 * MiB, stream_a);
  void* drop = a.allocate(6 * MiB, stream_a);
  a.free(drop);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved, 4 * MiB);
  EXPECT_EQ(a.stats().segment_frees, 1);
  EXPECT_EQ(dev.live.size(), 1u);
  a.free(keep);
}

TEST(CachingAllocator, EmptyCacheKeepsASegmentWithALiveBlockAndFreesItOnceAllOfItIsFree) {
  FakeDevice dev;
  CachingAllocator a("cuda:0", 1024 * MiB, dev.source());
  // two small blocks split from one 2 MiB segment, and a large 4 MiB segment
  void* s1 = a.allocate(1000, stream_a);
  void* s2 = a.allocate(1000, stream_a);
  void* big = a.allocate(4 * MiB, stream_a);
  ASSERT_EQ(a.stats().segment_allocs, 2);
  a.free(s1);  // the small segment's first block is free, its second still live
  a.free(big);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved, 2 * MiB) << "only the unused 4 MiB segment goes back";
  EXPECT_EQ(a.stats().segment_frees, 1);
  ASSERT_EQ(dev.live.size(), 1u);
  EXPECT_EQ(*dev.live.begin(), s1) << "the segment kept is the one holding the live block";
  EXPECT_EQ(a.stats().allocated, 1024u);
  a.free(s2);  // now the whole segment is free (its blocks merged back into one)
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved, 0u);
  EXPECT_EQ(a.stats().segment_frees, 2);
  EXPECT_TRUE(dev.live.empty());
  a.free(a.allocate(1000, stream_a));  // released, not cached: a new segment
  EXPECT_EQ(a.stats().segment_allocs, 3);
}

TEST(CachingAllocator, CapGivesAnOutOfMemoryErrorNamingRequestAllocatedAndCap) {
  FakeDevice dev;
  CachingAllocator a("cuda:0", 100 * MiB, dev.source());
  a.set_memory_fraction(0.25);  // 25 MiB
  void* p = a.allocate(20 * MiB, stream_a);
  try {
    a.allocate(10 * MiB, stream_a);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cuda:0"), std::string::npos) << m;
    EXPECT_NE(m.find("tried to allocate 10.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("20.00 MiB allocated"), std::string::npos) << m;
    EXPECT_NE(m.find("cap 25.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("0.25"), std::string::npos) << m;
  }
  a.free(p);
}

TEST(CachingAllocator, CapFreesCachedSegmentsBeforeGivingUp) {
  FakeDevice dev;
  CachingAllocator a("cuda:0", 100 * MiB, dev.source());
  a.set_memory_fraction(0.25);
  a.free(a.allocate(20 * MiB, stream_a));  // cached, not in use
  void* p = a.allocate(22 * MiB, stream_a);  // needs a new segment: the cached one is released first
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(a.stats().reserved, 22 * MiB);
  a.free(p);
}

TEST(CachingAllocator, DeviceOutOfMemoryIsReportedWithTheRequest) {
  CachingAllocator a("cuda:1", 100 * MiB, {[](size_t) -> void* { return nullptr; }, [](void*) {}});
  try {
    a.allocate(3 * MiB, stream_a);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory on cuda:1: tried to allocate 3.00 MiB"), std::string::npos)
        << e.what();
  }
}

TEST(CachingAllocator, BadFractionIsRejected) {
  FakeDevice dev;
  CachingAllocator a("cuda:0", 100 * MiB, dev.source());
  EXPECT_THROW(a.set_memory_fraction(0.0), std::invalid_argument);
  EXPECT_THROW(a.set_memory_fraction(1.5), std::invalid_argument);
}

TEST(CachingAllocator, ZeroBytesIsNull) {
  FakeDevice dev;
  CachingAllocator a("cuda:0", 100 * MiB, dev.source());
  EXPECT_EQ(a.allocate(0, stream_a), nullptr);
  a.free(nullptr);
  EXPECT_EQ(a.stats().segment_allocs, 0);
}

// What a Work dropped before wait() relies on: its bucket, allocated on the compute stream (a)
// and read by NCCL on the communication stream (b), is freed at once, yet not handed out again
// until the event recorded on b at the free has completed.
TEST(CachingAllocator, BlockFreedWhileRecordedOnAnotherStreamWaitsForThatStreamsEvent) {
  FakeDevice dev;
  FakeEvents ev;
  CachingAllocator a("cuda:0", 1024 * MiB, dev.source(), ev.source());
  void* p = a.allocate(4 * MiB, stream_a);
  a.record_stream(p, stream_b);
  a.record_stream(p, stream_b);  // recorded once per stream
  a.free(p);
  ASSERT_EQ(ev.recorded.size(), 1u);
  EXPECT_EQ(ev.recorded[0]->stream, stream_b);
  EXPECT_EQ(a.stats().allocated, 0u);
  EXPECT_EQ(a.pending_event_blocks(), 1u);
  void* q = a.allocate(4 * MiB, stream_a);  // b may still read p: a new segment
  EXPECT_NE(q, p);
  EXPECT_EQ(a.stats().segment_allocs, 2);
  EXPECT_FALSE(ev.recorded[0]->destroyed);
  ev.recorded[0]->done = true;
  void* r = a.allocate(4 * MiB, stream_a);  // b is past the free: p is reused
  EXPECT_EQ(r, p);
  EXPECT_EQ(a.stats().segment_allocs, 2);
  EXPECT_EQ(a.stats().cache_hits, 1);
  EXPECT_TRUE(ev.recorded[0]->destroyed);
  EXPECT_EQ(a.pending_event_blocks(), 0u);
  a.free(q);
  a.free(r);
  EXPECT_EQ(ev.recorded.size(), 1u) << "blocks without other streams are freed without events";
}

TEST(CachingAllocator, BlockRecordedOnTwoStreamsWaitsForBoth) {
  FakeDevice dev;
  FakeEvents ev;
  CachingAllocator a("cuda:0", 1024 * MiB, dev.source(), ev.source());
  void* p = a.allocate(4 * MiB, stream_a);
  a.record_stream(p, stream_b);
  a.record_stream(p, stream_c);
  a.free(p);
  ASSERT_EQ(ev.recorded.size(), 2u);
  ev.recorded[1]->done = true;
  a.empty_cache();  // looks at the events: one left, so the segment is not free to release
  EXPECT_EQ(a.stats().reserved, 4 * MiB);
  EXPECT_EQ(a.pending_event_blocks(), 1u);
  ev.recorded[0]->done = true;
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved, 0u);
  EXPECT_EQ(a.stats().segment_frees, 1);
  EXPECT_TRUE(dev.live.empty());
}

TEST(CachingAllocator, WaitingSmallBlockDoesNotMergeWithItsFreedNeighbour) {
  FakeDevice dev;
  FakeEvents ev;
  CachingAllocator a("cuda:0", 1024 * MiB, dev.source(), ev.source());
  void* p = a.allocate(512 * 1024, stream_a);
  void* q = a.allocate(512 * 1024, stream_a);
  a.record_stream(p, stream_b);
  a.free(p);
  a.free(q);
  void* r = a.allocate(1 * MiB, stream_a);  // p's half is still waiting: the two halves cannot merge
  EXPECT_NE(r, p);
  ev.recorded[0]->done = true;
  a.free(r);
  void* s = a.allocate(1 * MiB, stream_a);  // now p merged with q again: the 1 MiB at p
  EXPECT_EQ(s, p);
  a.free(s);
}

TEST(CachingAllocator, RecordingTheAllocatingStreamNeedsNoEvent) {
  FakeDevice dev;
  FakeEvents ev;
  CachingAllocator a("cuda:0", 1024 * MiB, dev.source(), ev.source());
  void* p = a.allocate(4 * MiB, stream_a);
  a.record_stream(p, stream_a);
  a.free(p);
  EXPECT_TRUE(ev.recorded.empty());
  EXPECT_EQ(a.allocate(4 * MiB, stream_a), p);
  a.free(p);
}

TEST(CachingAllocator, RecordStreamRejectsUnknownPointersAndAllocatorsWithoutEvents) {
  FakeDevice dev;
  FakeEvents ev;
  CachingAllocator with("cuda:0", 1024 * MiB, dev.source(), ev.source());
  int x = 0;
  EXPECT_THROW(with.record_stream(&x, stream_b), std::invalid_argument);
  CachingAllocator without("pinned host memory", 1024 * MiB, dev.source());
  void* p = without.allocate(1000, nullptr);
  EXPECT_THROW(without.record_stream(p, stream_b), std::logic_error);
  without.free(p);
}

// A source with a growable segment: large blocks go to it, each growth exactly what is missing.
TEST(CachingAllocatorGrowable, LargeBlocksGrowOneSegmentByExactlyWhatItsFreeEndLacks) {
  FakeGrowableDevice dev(64 * MiB);
  CachingAllocator a("cpu", 1024 * MiB, dev.source());
  void* p = a.allocate(3 * MiB + 512, stream_a);
  void* q = a.allocate(3 * MiB, stream_a);
  EXPECT_EQ(p, dev.base);
  EXPECT_EQ(static_cast<char*>(q), dev.base + 3 * MiB + 512) << "the second block follows the first";
  EXPECT_EQ(a.stats().reserved, 6 * MiB + 512) << "not rounded to 2 MiB per block";
  EXPECT_EQ(dev.used, 6 * MiB + 512);
  a.free(q);  // the segment ends with a free 3 MiB block: a 5 MiB request takes it and 2 MiB more
  void* r = a.allocate(5 * MiB, stream_a);
  EXPECT_EQ(r, q);
  EXPECT_EQ(a.stats().reserved, 8 * MiB + 512);
  EXPECT_EQ(a.stats().segment_allocs, 3);
  EXPECT_TRUE(dev.live.empty()) << "no segment of its own";
  a.free(p);
  a.free(r);
}

// The fragmentation separate segments suffer: two freed 4 MiB blocks merge into a hole that a
// 7 MiB request fits, where separate segments need a new one.
TEST(CachingAllocatorGrowable, FreedNeighboursMergeAcrossWhatWouldBeSeparateSegments) {
  FakeGrowableDevice growable(64 * MiB);
  FakeDevice plain;
  CachingAllocator g("cpu", 1024 * MiB, growable.source()), s("cpu", 1024 * MiB, plain.source());
  for (CachingAllocator* a : {&g, &s}) {
    void* x = a->allocate(4 * MiB, stream_a);
    void* y = a->allocate(4 * MiB, stream_a);
    void* z = a->allocate(4 * MiB, stream_a);
    a->free(x);
    a->free(y);
    void* w = a->allocate(7 * MiB, stream_a);
    if (a == &g) {
      EXPECT_EQ(w, x) << "the merged hole at the start";
    }
    a->free(w);
    a->free(z);
  }
  EXPECT_EQ(g.stats().reserved, 12 * MiB);
  EXPECT_EQ(s.stats().reserved, 20 * MiB) << "4 + 4 + 4 + a new 8 MiB segment";
}

TEST(CachingAllocatorGrowable, RemaindersBelowOneMiBAreSplitOffAndMergeBack) {
  FakeGrowableDevice dev(64 * MiB);
  FakeDevice plain;
  CachingAllocator g("cpu", 1024 * MiB, dev.source()), s("cpu", 1024 * MiB, plain.source());
  g.free(g.allocate(4 * MiB, stream_a));
  s.free(s.allocate(4 * MiB, stream_a));
  void* p = g.allocate(3 * MiB + 512 * 1024, stream_a);
  void* q = s.allocate(3 * MiB + 512 * 1024, stream_a);
  EXPECT_EQ(g.block_size(p), 3 * MiB + 512 * 1024) << "the 512 KiB rest is a free block of its own";
  EXPECT_EQ(s.block_size(q), 4 * MiB) << "a separate segment keeps a rest under 1 MiB in the block";
  EXPECT_EQ(g.stats().allocated, 3 * MiB + 512 * 1024);
  g.free(p);
  s.free(q);
  EXPECT_EQ(g.block_size(g.allocate(4 * MiB, stream_a)), 4 * MiB) << "merged back: no growth";
  EXPECT_EQ(g.stats().reserved, 4 * MiB);
}

TEST(CachingAllocatorGrowable, EmptyCacheGivesBackTheFreeEndThenTheWholeSegment) {
  FakeGrowableDevice dev(64 * MiB);
  CachingAllocator a("cpu", 1024 * MiB, dev.source());
  void* keep = a.allocate(4 * MiB, stream_a);
  void* drop = a.allocate(6 * MiB, stream_a);
  a.free(drop);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved, 4 * MiB);
  EXPECT_EQ(dev.used, 4 * MiB);
  EXPECT_EQ(a.stats().segment_frees, 1);
  void* again = a.allocate(2 * MiB, stream_a);  // grows again from the new end
  EXPECT_EQ(static_cast<char*>(again), dev.base + 4 * MiB);
  a.free(again);
  a.free(keep);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved, 0u);
  EXPECT_EQ(dev.used, 0u);
  EXPECT_EQ(a.allocate(8 * MiB, stream_a), dev.base) << "the segment starts again at the range's start";
}

TEST(CachingAllocatorGrowable, WhenTheRangeIsUsedUpALargeRequestGetsASegmentOfItsOwn) {
  FakeGrowableDevice dev(8 * MiB);
  CachingAllocator a("cpu", 1024 * MiB, dev.source());
  void* p = a.allocate(6 * MiB, stream_a);
  void* q = a.allocate(3 * MiB, stream_a);  // 9 MiB would pass the range's 8
  EXPECT_EQ(dev.live.count(q), 1u);
  EXPECT_EQ(a.stats().reserved, 6 * MiB + 4 * MiB) << "the grown 6 MiB and a 4 MiB segment";
  a.free(p);
  a.free(q);
}

TEST(CachingAllocatorGrowable, TheCapBoundsGrowth) {
  FakeGrowableDevice dev(64 * MiB);
  CachingAllocator a("cpu", 100 * MiB, dev.source());
  a.set_memory_fraction(0.25);  // 25 MiB
  void* p = a.allocate(20 * MiB, stream_a);
  EXPECT_THROW(a.allocate(10 * MiB, stream_a), OutOfMemoryError);
  a.free(p);
  void* q = a.allocate(24 * MiB, stream_a);  // the free 20 MiB end and 4 MiB more
  EXPECT_EQ(q, p);
  EXPECT_EQ(a.stats().reserved, 24 * MiB);
  a.free(q);
}
