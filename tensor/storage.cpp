// tensor/storage.cpp — CPU allocation through a caching allocator, and device dispatch.
//
// CPU tensors come from one process-wide kernels::CachingAllocator (kernels/caching_allocator.h,
// the logic the CUDA side uses): a freed block goes back to the cache, so a steady-state training
// step — the same sizes every step — maps no new memory and takes no page faults after the first
// step. Its large blocks come from one address range, reserved as large as the machine's memory
// and grown as needed (tensor/cpu_segments.h), its small ones from 2 MiB segments. The memory is
// offered to Linux's transparent huge pages (madvise MADV_HUGEPAGE; the default "madvise" setting
// honours it): a step's passes over large activations then walk 512 times fewer pages, which ran
// the reference cnn and vit steps 1-10% faster, with the memory's phase, for more resident memory:
// a huge page is resident whole (docs/benchmarks.md). PyTorch offers the same for its CPU
// allocator behind THP_MEM_ALLOC_ENABLE=1. Memory is not zeroed (as malloc):
// ops that need zeros fill them. MINIDL_CPU_ALLOCATOR=malloc bypasses the cache (for memory
// checkers).
// Either way a failure is a CpuOutOfMemoryError naming the size asked for.
#include "minidl/tensor/storage.h"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "minidl/kernels/caching_allocator.h"
#include "minidl/kernels/cuda_api.h"
#include "minidl/tensor/cpu_allocator.h"
#include "minidl/tensor/cpu_segments.h"

namespace minidl {

namespace {
bool use_cache() {
  static const bool on = [] {
    const char* s = std::getenv("MINIDL_CPU_ALLOCATOR");
    if (!s || std::strcmp(s, "caching") == 0) return true;
    if (std::strcmp(s, "malloc") == 0) return false;
    throw std::invalid_argument(std::string("MINIDL_CPU_ALLOCATOR must be 'caching' or 'malloc', got '") + s + "'");
  }();
  return on;
}

kernels::CachingAllocator& cpu_cache() {
  // Never destroyed: tensors in static objects may outlive any destructor order.
  static auto* a = [] {
    const size_t memory = static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return new kernels::CachingAllocator("cpu", memory, cpu_segment_source(memory));  // reserve the machine's memory
  }();
  return *a;
}
// "CPU tensors hold 1.00 GiB (1.25 GiB reserved by the caching allocator, cap 8.00 GiB)".
std::string cache_usage() {
  const kernels::CachingAllocatorStats stats = cpu_cache().stats();
  return "CPU tensors hold " + kernels::format_bytes(stats.allocated) + " (" + kernels::format_bytes(stats.reserved) +
         " reserved by the caching allocator" +
         (stats.cap == SIZE_MAX ? std::string() : ", cap " + kernels::format_bytes(stats.cap)) + ")";
}
}  // namespace

CpuOutOfMemoryError::CpuOutOfMemoryError(size_t nbytes, const std::string& detail)
    : message_(std::make_shared<const std::string>("out of memory: cannot allocate " + kernels::format_bytes(nbytes) +
                                                   " for a CPU tensor (" + std::to_string(nbytes) + " bytes); " +
                                                   detail + " (see free memory and `ulimit -v`)")),
      nbytes_(nbytes) {}

kernels::CachingAllocatorStats cpu_allocator_stats() { return cpu_cache().stats(); }
void cpu_empty_cache() { cpu_cache().empty_cache(); }
void cpu_reset_peak_memory_stats() { cpu_cache().reset_peak(); }

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  if (device.is_cpu()) {
    if (use_cache()) {
      try {
        data_ = nbytes ? cpu_cache().allocate(nbytes, nullptr) : nullptr;
      } catch (const kernels::OutOfMemoryError&) {  // no segment (or over the cap)
        throw CpuOutOfMemoryError(nbytes, cache_usage());
      } catch (const std::bad_alloc&) {  // the allocator's own bookkeeping
        throw CpuOutOfMemoryError(nbytes, cache_usage());
      }
      deleter_ = [](void* p) { cpu_cache().free(p); };
      return;
    }
    const size_t rounded = ((nbytes + 63) / 64) * 64;
    data_ = rounded ? std::aligned_alloc(64, rounded) : nullptr;
    if (rounded && !data_) throw CpuOutOfMemoryError(nbytes, "malloc failed (MINIDL_CPU_ALLOCATOR=malloc)");
    deleter_ = [](void* p) { std::free(p); };
  } else {
    data_ = kernels::cuda::device_malloc(nbytes, device.index);
    deleter_ = [idx = device.index](void* p) { kernels::cuda::device_free(p, idx); };
  }
}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (data_ && deleter_) deleter_(data_);
}

}  // namespace minidl
