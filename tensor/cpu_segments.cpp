// tensor/cpu_segments.cpp — see cpu_segments.h. The range is mapped PROT_NONE (it costs address
// space only); growing it makes the new bytes readable and writable, 2 MiB at a time (the
// kernel's commit accounting sees them then), and shrinking drops the pages of each whole 2 MiB
// above the new end and takes access away again.
#include "minidl/tensor/cpu_segments.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>

namespace minidl {

namespace {
constexpr size_t kHugePage = size_t(2) << 20;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

void advise_huge_pages(void* p, size_t n) {
#ifdef MADV_HUGEPAGE
  madvise(p, n, MADV_HUGEPAGE);  // advice only: a kernel without THP ignores or refuses it
#endif
}

// A segment of its own: n bytes rounded to 2 MiB, on a 2 MiB boundary; nullptr when malloc fails.
void* heap_segment(size_t n) {
  const size_t bytes = round_up(n, kHugePage);
  void* p = std::aligned_alloc(kHugePage, bytes);
  if (p) advise_huge_pages(p, bytes);
  return p;
}

// The reserved range: [base, base + used) is the growable segment (the allocator grows it by
// multiples of 512 bytes), [base, base + committed) the whole 2 MiB it lies in, readable and
// writable (a huge page is mapped whole); the rest is not accessible yet.
class GrowableRange {
 public:
  explicit GrowableRange(size_t capacity) : capacity_(round_up(capacity, kHugePage)) {}
  ~GrowableRange() {
    if (base_ != nullptr) munmap(base_, capacity_);
  }
  GrowableRange(const GrowableRange&) = delete;
  GrowableRange& operator=(const GrowableRange&) = delete;

  void* grow(void* end, size_t n) {
    if (end == nullptr ? used_ != 0 || !reserve() : end != base_ + used_) return nullptr;
    if (n > capacity_ - used_) return nullptr;
    const size_t need = round_up(used_ + n, kHugePage);
    if (need > committed_ && mprotect(base_ + committed_, need - committed_, PROT_READ | PROT_WRITE) != 0)
      return nullptr;  // no memory to commit
    committed_ = std::max(committed_, need);
    used_ += n;
    return end == nullptr ? base_ : end;
  }
  bool shrink(void* p, size_t n) {
    char* c = static_cast<char*>(p);
    if (base_ == nullptr || c < base_ || c + n != base_ + used_) return false;
    used_ = static_cast<size_t>(c - base_);
    decommit();
    return true;
  }
  void free(void* p) {
    if (p == nullptr || p != base_) return std::free(p);  // a segment of its own
    used_ = 0;
    decommit();
  }

 private:
  bool reserve() {
    if (base_ != nullptr) return true;
    if (capacity_ == 0 || tried_) return false;
    tried_ = true;
    // capacity + 2 MiB of address space, then the 2 MiB-aligned capacity inside it
    const size_t span = capacity_ + kHugePage;
    void* raw = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return false;  // address space limited (ulimit -v): segments of their own
    const uintptr_t start = reinterpret_cast<uintptr_t>(raw), aligned = round_up(start, kHugePage);
    if (aligned > start) munmap(raw, aligned - start);
    if (start + span > aligned + capacity_)
      munmap(reinterpret_cast<void*>(aligned + capacity_), start + span - aligned - capacity_);
    base_ = reinterpret_cast<char*>(aligned);
    advise_huge_pages(base_, capacity_);
    return true;
  }
  // The whole 2 MiB above the segment's end back to the system: dropped and made inaccessible.
  void decommit() {
    const size_t keep = round_up(used_, kHugePage);
    if (keep >= committed_) return;
    madvise(base_ + keep, committed_ - keep, MADV_DONTNEED);
    mprotect(base_ + keep, committed_ - keep, PROT_NONE);
    committed_ = keep;
  }

  size_t capacity_;
  char* base_ = nullptr;
  size_t used_ = 0, committed_ = 0;
  bool tried_ = false;
};
}  // namespace

kernels::SegmentSource cpu_segment_source(size_t range_bytes) {
  auto range = std::make_shared<GrowableRange>(range_bytes);  // lives as long as the source
  return {.alloc = heap_segment,
          .free = [range](void* p) { range->free(p); },
          .grow = [range](void* end, size_t n) { return range->grow(end, n); },
          .shrink = [range](void* p, size_t n) { return range->shrink(p, n); }};
}

}  // namespace minidl
