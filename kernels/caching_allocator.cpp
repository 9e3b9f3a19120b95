// kernels/caching_allocator.cpp — see kernels/caching_allocator.h. Tested on the CPU by
// tests/kernels/test_caching_allocator.cpp (a malloc-backed segment source).
#include "minidl/kernels/caching_allocator.h"

#include <cstdio>

namespace minidl::kernels {

std::string format_bytes(size_t n) {
  char buf[64];
  if (n == SIZE_MAX) return "unlimited";
  if (n >= (size_t(1) << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", double(n) / double(size_t(1) << 30));
  else if (n >= (size_t(1) << 20))
    std::snprintf(buf, sizeof buf, "%.2f MiB", double(n) / double(size_t(1) << 20));
  else if (n >= 1024)
    std::snprintf(buf, sizeof buf, "%.2f KiB", double(n) / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%zu B", n);
  return buf;
}

namespace {
size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
}  // namespace

CachingAllocator::CachingAllocator(std::string device_name, size_t total_bytes, SegmentSource source,
                                   EventSource events)
    : device_name_(std::move(device_name)),
      total_(total_bytes),
      source_(std::move(source)),
      events_(std::move(events)) {}

CachingAllocator::~CachingAllocator() {
  for (auto& [event, block] : pending_) events_.destroy(event);
  for (Block* b : all_) {
    if (b->prev == nullptr) source_.free(b->ptr);  // the first block of a segment owns its pointer
  }
  for (Block* b : all_) delete b;
}

void CachingAllocator::set_memory_fraction(double fraction) {
  if (!(fraction > 0.0 && fraction <= 1.0))
    throw std::invalid_argument("set_memory_fraction: fraction must be in (0, 1], got " + std::to_string(fraction) +
                                " for " + device_name_);
  std::lock_guard<std::mutex> lock(mu_);
  fraction_ = fraction;
  stats_.cap = fraction >= 1.0 ? SIZE_MAX : static_cast<size_t>(fraction * static_cast<double>(total_));
}

CachingAllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
}

size_t CachingAllocator::block_size(void* p) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  return it == live_.end() ? 0 : it->second->size;
}

void CachingAllocator::out_of_memory(size_t request, const std::string& why) const {
  std::string cap = stats_.cap == SIZE_MAX ? "no cap"
                                           : "cap " + format_bytes(stats_.cap) + " (memory fraction " +
                                                 std::to_string(fraction_) + " of " + format_bytes(total_) + ")";
  throw OutOfMemoryError("out of memory on " + device_name_ + ": tried to allocate " + format_bytes(request) + "; " +
                         format_bytes(stats_.allocated) + " allocated, " + format_bytes(stats_.reserved) +
                         " reserved, " + cap + " — " + why);
}

CachingAllocator::Block* CachingAllocator::take_free_block(Pool& pool, size_t size, void* stream) {
  Block key{nullptr, size, stream, false};
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

bool CachingAllocator::over_cap(size_t more) const {
  return stats_.cap != SIZE_MAX && stats_.reserved + more > stats_.cap;
}

void CachingAllocator::count_reserved(size_t bytes) {
  stats_.reserved += bytes;
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  ++stats_.segment_allocs;
}

CachingAllocator::Block* CachingAllocator::new_segment(size_t size, void* stream, bool small, size_t request) {
  const size_t seg = small ? kSegmentRound : round_up(size, kSegmentRound);
  if (over_cap(seg)) release_free_segments();
  if (over_cap(seg)) out_of_memory(request, "a new " + format_bytes(seg) + " segment would pass the cap");
  void* p = source_.alloc(seg);
  if (p == nullptr) {
    release_free_segments();
    p = source_.alloc(seg);
    if (p == nullptr) out_of_memory(request, "the device has no free memory for a " + format_bytes(seg) + " segment");
  }
  count_reserved(seg);
  Block* b = new Block{static_cast<char*>(p), seg, stream, small};
  all_.insert(b);
  return b;
}

CachingAllocator::Block* CachingAllocator::grow_segment(size_t size, void* stream) {
  Block* tail = growable_tail_;
  if (!source_.grow || (tail != nullptr && tail->stream != stream)) return nullptr;
  const size_t have = tail != nullptr && !tail->in_use ? tail->size : 0;  // smaller than `size` (no fit)
  const size_t grow = size - have;  // exactly what is missing
  if (over_cap(grow)) return nullptr;
  char* end = tail != nullptr ? tail->ptr + tail->size : nullptr;
  char* p = static_cast<char*>(source_.grow(end, grow));
  if (p == nullptr) return nullptr;
  count_reserved(grow);
  if (have > 0) {  // the free tail and the new bytes make one block
    large_pool_.erase(tail);
    tail->size += grow;
    return tail;
  }
  Block* b = new Block{p, grow, stream, false, true};
  all_.insert(b);
  b->prev = tail;
  if (tail != nullptr) tail->next = b;
  growable_tail_ = b;
  return b;
}

void CachingAllocator::split(Block* b, size_t size, Pool& pool) {
  const size_t rest = b->size - size;
  // A large block leaves its remainder unless it exceeds 1 MiB (smaller ones rarely fit a large
  // request), but in the growable segment a remainder merges back with its neighbours and the end.
  const bool worth = b->small || b->growable ? rest >= kRound : rest > kSmallLimit;
  if (!worth) return;
  Block* r = new Block{b->ptr + size, rest, b->stream, b->small, b->growable};
  all_.insert(r);
  r->prev = b;
  r->next = b->next;
  if (b->next) b->next->prev = r;
  b->next = r;
  b->size = size;
  if (growable_tail_ == b) growable_tail_ = r;
  pool.insert(r);
}

size_t CachingAllocator::pending_event_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<Block*> blocks;
  for (const auto& [event, block] : pending_) blocks.insert(block);
  return blocks.size();
}

void* CachingAllocator::allocate(size_t nbytes, void* stream) {
  if (nbytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  process_events();
  const size_t size = round_up(nbytes, kRound);
  const bool small = size <= kSmallLimit;
  Pool& pool = small ? small_pool_ : large_pool_;
  Block* b = take_free_block(pool, size, stream);
  if (b) ++stats_.cache_hits;
  if (!b && !small) b = grow_segment(size, stream);  // where the source has a growable segment
  if (!b) b = new_segment(size, stream, small, nbytes);
  split(b, size, pool);
  b->in_use = true;
  live_[b->ptr] = b;
  stats_.allocated += b->size;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  return b->ptr;
}

void CachingAllocator::record_stream(void* p, void* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  if (it == live_.end())
    throw std::invalid_argument("CachingAllocator::record_stream: pointer not live here (" + device_name_ + ")");
  if (!events_.record)
    throw std::logic_error("CachingAllocator::record_stream: " + device_name_ + " has no stream events");
  Block* b = it->second;
  if (stream == b->stream) return;
  for (void* s : b->stream_uses)
    if (s == stream) return;
  b->stream_uses.push_back(stream);
}

void CachingAllocator::free(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  if (it == live_.end())
    throw std::invalid_argument("CachingAllocator::free: pointer not allocated here (" + device_name_ + ")");
  Block* b = it->second;
  live_.erase(it);
  stats_.allocated -= b->size;
  if (b->stream_uses.empty())
    free_block(b);
  else
    insert_events(b);
}

void CachingAllocator::insert_events(Block* b) {
  for (void* stream : b->stream_uses) {
    pending_.emplace_back(events_.record(stream), b);
    ++b->event_count;
  }
  b->stream_uses.clear();
}

void CachingAllocator::process_events() {
  std::vector<std::pair<void*, Block*>> still;
  for (auto& [event, b] : pending_) {
    if (!events_.query(event)) {
      still.emplace_back(event, b);
      continue;
    }
    events_.destroy(event);
    if (--b->event_count == 0) free_block(b);
  }
  pending_.swap(still);
}

void CachingAllocator::free_block(Block* b) {
  b->in_use = false;
  Pool& pool = b->small ? small_pool_ : large_pool_;
  // merge with free neighbours (same segment, hence the same stream and pool)
  if (b->next && !b->next->in_use) {
    Block* n = b->next;
    pool.erase(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    if (growable_tail_ == n) growable_tail_ = b;
    all_.erase(n);
    delete n;
  }
  if (b->prev && !b->prev->in_use) {
    Block* pr = b->prev;
    pool.erase(pr);
    pr->size += b->size;
    pr->next = b->next;
    if (b->next) b->next->prev = pr;
    if (growable_tail_ == b) growable_tail_ = pr;
    all_.erase(b);
    delete b;
    b = pr;
  }
  pool.insert(b);
}

void CachingAllocator::release_free_segments() {
  for (Pool* pool : {&small_pool_, &large_pool_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      const bool whole = b->prev == nullptr && b->next == nullptr;  // a whole, unused segment
      // or the free end of a grown segment
      const bool end = !whole && b == growable_tail_ && source_.shrink && source_.shrink(b->ptr, b->size);
      if (!whole && !end) {
        ++it;
        continue;
      }
      if (whole) source_.free(b->ptr);
      if (end) b->prev->next = nullptr;
      if (growable_tail_ == b) growable_tail_ = b->prev;
      stats_.reserved -= b->size;
      ++stats_.segment_frees;
      all_.erase(b);
      delete b;
      it = pool->erase(it);
    }
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  process_events();
  release_free_segments();
}

}  // namespace minidl::kernels
