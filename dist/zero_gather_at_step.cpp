// dist/zero_gather_at_step.cpp — GatherAtStep: ZeroRedundancyOptimizer's all-gather of the
// parameters, bucket by bucket, blocking, at the end of step().
#include "minidl/dist/zero_gather_at_step.h"

#include <exception>
#include <stdexcept>
#include <utility>

#include "minidl/dist/zero_gather_common.h"

namespace minidl::dist {

GatherAtStep::GatherAtStep(ProcessGroup& group, std::vector<GatherBucket> buckets, std::string name)
    : group_(group), buckets_(std::move(buckets)), name_(std::move(name)) {}

void GatherAtStep::start() {
  if (group_.size() == 1) return;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    try {
      group_.all_gather_into_tensor(buckets_[b].buffer, zero_gather::slab_of(buckets_[b].buffer, group_));
    } catch (const std::exception& e) {
      throw std::runtime_error(zero_gather::gather_failure(name_, b, e));
    }
  }
}

}  // namespace minidl::dist
