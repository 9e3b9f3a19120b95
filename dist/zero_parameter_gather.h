// dist/zero_parameter_gather.h — how ZeroRedundancyOptimizer brings the parameters back after its
// step: every rank's slab of every bucket all-gathered into every rank's bucket buffer, of which
// the parameters are views. The interface, ParameterGatherer, and its factory; one algorithm per
// file, chosen once by ZeroRedundancyOptimizerOptions::gather:
//
//   ParameterGather::AtStep     one blocking all_gather_into_tensor per bucket at the end of step():
//                               the parameters are whole when step() returns.
//                               GatherAtStep, dist/zero_gather_at_step.h.
//   ParameterGather::BeforeUse  step() starts every bucket's all-gather (async) and returns; the
//                               next forward waits for a bucket only right before the first
//                               module that uses one of its parameters runs (a forward pre-hook,
//                               nn/module.h), so the all-gathers of later buckets run beside the
//                               forward of the first layers.
//                               GatherBeforeUse, dist/zero_gather_before_use.h (the order of the
//                               buckets, the hooks, what a failure does).
//
// Either way a failed all-gather throws a std::runtime_error naming the optimizer, the bucket and
// the collective's own message (dist/zero_gather_common.h).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "minidl/dist/process_group.h"
#include "minidl/nn/module.h"

namespace minidl::dist {

enum class ParameterGather { AtStep, BeforeUse };

// One bucket: its buffer (size * n elements; rank r owns [r * n, (r + 1) * n)) and the parameters
// that are views of it.
struct GatherBucket {
  Tensor buffer;
  std::vector<Variable> params;
};

class ParameterGatherer {
 public:
  virtual ~ParameterGatherer() = default;
  // After this rank's slab of every buffer was updated: every rank's slab into every buffer (the
  // gather of the previous call waited for first).
  virtual void start() = 0;
  // Returns once every buffer holds every rank's slab; rethrows a failed all-gather.
  virtual void wait() = 0;
};

// model: the module whose forward uses the parameters (BeforeUse hooks its modules; AtStep
// ignores it). name: the optimizer's, for messages.
std::unique_ptr<ParameterGatherer> make_parameter_gatherer(ParameterGather kind, ProcessGroup& group,
                                                           std::vector<GatherBucket> buckets, nn::Module* model,
                                                           const std::string& name);

}  // namespace minidl::dist
