// tensor/cpu_allocator.h — the caching allocator behind every CPU Storage (tensor/storage.cpp):
// its counters (segments are the malloc'd chunks it carves blocks from; a steady-state training
// step allocates none) and handing its free blocks back to the system.
#pragma once
#include "minidl/kernels/caching_allocator.h"

namespace minidl {

kernels::CachingAllocatorStats cpu_allocator_stats();
void cpu_empty_cache();
// peak_allocated and peak_reserved start again from what is allocated and reserved now (PyTorch's
// torch.cuda.reset_peak_memory_stats, for the CPU cache).
void cpu_reset_peak_memory_stats();

}  // namespace minidl
