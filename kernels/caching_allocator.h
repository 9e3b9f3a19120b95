// kernels/caching_allocator.h — a caching device-memory allocator (the idea of PyTorch's
// CUDACachingAllocator, much smaller), written against an abstract segment source so that its
// logic — caching, block splitting and merging, per-stream pools, statistics, the memory cap and
// its out-of-memory message — is plain C++ that tests/kernels/test_caching_allocator.cpp runs on
// the CPU with a malloc-backed fake. kernels/cuda/runtime.cu plugs cudaMalloc/cudaFree in.
//
//   request n bytes -> size = round_up(n, 512)
//   size <= 1 MiB: taken from 2 MiB "small" segments; larger: from segments rounded to 2 MiB.
//   best fit among the free blocks of the same pool AND the same stream (a block freed by one
//   stream is never handed to another, so no cross-stream synchronisation is needed);
//   a block larger than needed is split (small: remainder >= 512 B; large: remainder > 1 MiB);
//   freed blocks merge with free neighbours of the same segment; nothing goes back to the
//   driver until empty_cache(), or when a new segment is needed and would pass the cap or fail.
//   A source that can grow a segment in place (SegmentSource::grow: the CPU's reserved address
//   range, PyTorch's "expandable segments") is asked first when no free block fits a large
//   request: its one growable segment grows at its end by exactly what its free tail lacks, so
//   large blocks live in one contiguous range, split at any remainder and merge with any free
//   neighbour.
//   Segments of their own fragment: a request a little larger than every free block takes a
//   whole new segment while those blocks stay reserved. empty_cache() also gives back the free
//   end of the growable segment (SegmentSource::shrink).
//   record_stream(p, S): another stream S still uses the block (NCCL reading a bucket on the
//   communication stream). When such a block is freed, an event is recorded on each such stream
//   and the block goes back to its pool only once every one of those events has completed
//   (looked at on each allocate and empty_cache) — PyTorch's record_stream / insert_events /
//   process_events.
// Steady state (the same sizes every training step) therefore makes no segment allocations.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace minidl::kernels {

// Thrown when a request cannot be met; the message names the request, what is allocated and
// reserved, and the cap.
class OutOfMemoryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct SegmentSource {
  std::function<void*(size_t)> alloc;  // returns nullptr when the device is out of memory
  std::function<void(void*)> free;
  // Optional: one segment for large blocks that grows in place. grow(nullptr, n) starts it with n
  // bytes and returns its start; grow(end, n) makes the n bytes at `end`, its end, part of it and
  // returns `end`; nullptr when it cannot (no address space or memory left). free(start) gives
  // all of it back; shrink(p, n) gives back [p, p + n), its end, and returns false for other p.
  std::function<void*(void* end, size_t n)> grow{};
  std::function<bool(void* p, size_t n)> shrink{};
};

// Events on streams, for record_stream (tests pass fakes; without them record_stream throws).
struct EventSource {
  std::function<void*(void* stream)> record;  // a new event, recorded now on `stream`
  std::function<bool(void* event)> query;  // true once everything before the event has run
  std::function<void(void* event)> destroy;
};

struct CachingAllocatorStats {
  size_t allocated = 0, reserved = 0, peak_allocated = 0, peak_reserved = 0, cap = SIZE_MAX;
  // segment_allocs: times memory was reserved (a new segment, or a segment grown at its end);
  // segment_frees: times it was given back (a whole segment, or a grown segment's free end).
  int64_t segment_allocs = 0, segment_frees = 0, cache_hits = 0;
};

class CachingAllocator {
 public:
  static constexpr size_t kRound = 512;
  static constexpr size_t kSmallLimit = size_t(1) << 20;  // 1 MiB
  static constexpr size_t kSegmentRound = size_t(2) << 20;  // 2 MiB

  // device_name: for messages ("cuda:0"); total_bytes: the device's memory (the cap's base).
  CachingAllocator(std::string device_name, size_t total_bytes, SegmentSource source, EventSource events = {});
  ~CachingAllocator();  // frees every segment (live blocks included: the process is ending)
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  void* allocate(size_t nbytes, void* stream);  // nbytes == 0 -> nullptr
  void free(void* p);  // p from allocate(); nullptr is ignored
  // The live block p (from allocate()) is also used by `stream`: once freed, it is not handed out
  // again until the work queued on `stream` up to the free has run. The allocating stream itself
  // is a no-op. Throws std::invalid_argument for a pointer not live here.
  void record_stream(void* p, void* stream);
  void empty_cache();
  // cap = fraction * total_bytes; fraction in (0, 1]. Throws std::invalid_argument otherwise.
  void set_memory_fraction(double fraction);
  CachingAllocatorStats stats() const;
  void reset_peak();
  size_t block_size(void* p) const;  // the rounded size behind p (tests)
  size_t pending_event_blocks() const;  // freed blocks still waiting for another stream's events

 private:
  struct Block {
    char* ptr;
    size_t size;
    void* stream;
    bool small;
    bool growable = false;  // in the growable segment
    bool in_use = false;  // also while freed but waiting for events
    std::vector<void*> stream_uses{};  // record_stream's streams, other than `stream`
    int event_count = 0;  // events still to complete before the block is free
    Block* prev = nullptr;  // neighbours within the same segment
    Block* next = nullptr;
  };
  struct ByStreamSize {
    bool operator()(const Block* a, const Block* b) const {
      if (a->stream != b->stream) return a->stream < b->stream;
      if (a->size != b->size) return a->size < b->size;
      return a->ptr < b->ptr;
    }
  };
  using Pool = std::set<Block*, ByStreamSize>;

  bool over_cap(size_t more) const;  // reserving `more` bytes would pass the cap
  void count_reserved(size_t bytes);  // a new segment or a growth: reserved, its peak, segment_allocs
  Block* take_free_block(Pool& pool, size_t size, void* stream);
  Block* grow_segment(size_t size, void* stream);  // nullptr: the source has no growable segment
  Block* new_segment(size_t size, void* stream, bool small, size_t request);
  void split(Block* b, size_t size, Pool& pool);
  void free_block(Block* b);  // back into its pool, merged with free neighbours
  void insert_events(Block* b);
  void process_events();  // frees the blocks whose events have all completed
  void release_free_segments();
  [[noreturn]] void out_of_memory(size_t request, const std::string& why) const;

  std::string device_name_;
  size_t total_;
  SegmentSource source_;
  EventSource events_;
  mutable std::mutex mu_;
  Pool small_pool_, large_pool_;
  Block* growable_tail_ = nullptr;  // the last block of the growable segment, if there is one
  std::map<void*, Block*> live_;
  std::set<Block*> all_;  // every block (for the destructor)
  std::vector<std::pair<void*, Block*>> pending_;  // (event, freed block waiting for it), in record order
  CachingAllocatorStats stats_;
  double fraction_ = 1.0;
};

std::string format_bytes(size_t n);  // "1.50 GiB", "512 B"

}  // namespace minidl::kernels
