// dist/zero_parameter_gather.cpp — make_parameter_gatherer: the ParameterGatherer that
// ZeroRedundancyOptimizerOptions::gather names (dist/zero_gather_at_step.cpp,
// dist/zero_gather_before_use.cpp).
#include "minidl/dist/zero_parameter_gather.h"

#include <stdexcept>
#include <utility>

#include "minidl/dist/zero_gather_at_step.h"
#include "minidl/dist/zero_gather_before_use.h"

namespace minidl::dist {

std::unique_ptr<ParameterGatherer> make_parameter_gatherer(ParameterGather kind, ProcessGroup& group,
                                                           std::vector<GatherBucket> buckets, nn::Module* model,
                                                           const std::string& name) {
  if (kind == ParameterGather::AtStep) return std::make_unique<GatherAtStep>(group, std::move(buckets), name);
  if (!model)
    throw std::invalid_argument(name + ": ParameterGather::BeforeUse waits in the model's forward: give the "
                                       "optimizer the model (.ddp or .module)");
  return std::make_unique<GatherBeforeUse>(group, std::move(buckets), *model, name);
}

}  // namespace minidl::dist
