// dist/zero_gather_at_step.h — GatherAtStep, ParameterGather::AtStep (the default): start() runs
// one blocking all_gather_into_tensor per bucket, in bucket order, so the parameters are whole when
// ZeroRedundancyOptimizer::step() returns; wait() has nothing to do. Made by
// make_parameter_gatherer (dist/zero_parameter_gather.h).
#pragma once
#include <string>
#include <vector>

#include "minidl/dist/process_group.h"
#include "minidl/dist/zero_parameter_gather.h"

namespace minidl::dist {

class GatherAtStep final : public ParameterGatherer {
 public:
  GatherAtStep(ProcessGroup& group, std::vector<GatherBucket> buckets, std::string name);

  // A failed all-gather throws a std::runtime_error naming the optimizer, the bucket and the
  // collective's message; the buckets after it are not gathered.
  void start() override;
  void wait() override {}

 private:
  ProcessGroup& group_;
  std::vector<GatherBucket> buckets_;
  std::string name_;
};

}  // namespace minidl::dist
