// dist/zero_parameter_gather.h — how ZeroRedundancyOptimizer brings the parameters back after its
// step: every rank's slab of every bucket all-gathered into every rank's bucket buffer, of which
// the parameters are views. Two ways, chosen once by ZeroRedundancyOptimizerOptions::gather:
//
//   ParameterGather::AtStep     one blocking all_gather_into_tensor per bucket at the end of step():
//                               the parameters are whole when step() returns.
//   ParameterGather::BeforeUse  step() starts every bucket's all-gather (async) and returns; the
//                               next forward waits for a bucket only right before the first
//                               module that uses one of its parameters runs (a forward pre-hook,
//                               nn/module.h), so the all-gathers of later buckets run beside the
//                               forward of the first layers.
//
// BeforeUse, in detail. The buckets are all-gathered in the order the forward needs them: by the
// model's parameter order of their first parameter (DDP's buckets are in reverse parameter order,
// so the first layers' parameters are usually in its last bucket). A collective group runs its
// collectives in order, so bucket k is done only after every bucket started before it: the waits
// go in that order too. Every module that holds parameters gets a hook, which waits for the
// buckets up to the last one holding a parameter of its own or of a module above it (so a
// container whose forward is called directly, model.forward(x), has its own parameters whole once
// any child with parameters runs); modules without parameters get none, so fused runs stay fused.
// A module the forward reaches without operator() (child.forward(x)) runs no hook: read such a
// model only after wait(). The gather of a step is always waited for before the next one starts. A failed
// all-gather throws from the wait that meets it — a std::runtime_error naming the optimizer, the
// bucket and the collective's own message — and from every wait after it: the parameters are
// never read half-gathered.
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
