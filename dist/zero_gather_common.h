// dist/zero_gather_common.h — what ZeroRedundancyOptimizer's two parameter gatherers share
// (private to dist/; dist/zero_gather_at_step.cpp, dist/zero_gather_before_use.cpp): a rank's slab
// of a bucket's buffer, and the message of a failed all-gather.
#pragma once
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>

#include "minidl/dist/process_group.h"

namespace minidl::dist::zero_gather {

// This rank's slab of a bucket's buffer: [rank * n, (rank + 1) * n), n = numel / size.
inline Tensor slab_of(const Tensor& buffer, const ProcessGroup& group) {
  const int64_t n = buffer.numel() / group.size();
  return buffer.narrow(0, group.rank() * n, n);
}

// "<name>: the all-gather of the parameters of bucket <bucket> (all_gather_into_tensor) failed: <what>"
inline std::string gather_failure(const std::string& name, size_t bucket, const std::exception& e) {
  return name + ": the all-gather of the parameters of bucket " + std::to_string(bucket) +
         " (all_gather_into_tensor) failed: " + e.what();
}

}  // namespace minidl::dist::zero_gather
