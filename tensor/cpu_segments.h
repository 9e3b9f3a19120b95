// tensor/cpu_segments.h — where the CPU caching allocator's memory comes from. Large blocks live
// in one growable segment (SegmentSource::grow; PyTorch's "expandable segments"): an address
// range as large as asked, reserved at the first large request, which the allocator grows at its
// end by exactly what a request lacks, so freed blocks merge into holes any later request can use
// instead of stranding memory in segments of their own. Small segments, and every segment once
// the range is used up or could not be reserved (ulimit -v), are 2 MiB-aligned heap allocations.
// All of it is advised to Linux's transparent huge pages.
#pragma once
#include <cstddef>

#include "minidl/kernels/caching_allocator.h"

namespace minidl {

// range_bytes: the address space to reserve (no memory is used until the allocator grows into
// it); 0 means none, so every segment is a heap allocation. The source must outlive its users.
kernels::SegmentSource cpu_segment_source(size_t range_bytes);

}  // namespace minidl
