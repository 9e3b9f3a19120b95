// dist/zero_gather_before_use.h — GatherBeforeUse, ParameterGather::BeforeUse: start() (the end of
// ZeroRedundancyOptimizer::step()) starts every bucket's all-gather, async, and returns; the next
// forward waits for each bucket in a forward pre-hook of the first module that uses one of its
// parameters. Made by make_parameter_gatherer (dist/zero_parameter_gather.h), which needs the model.
//
// The buckets are all-gathered in the order the forward needs them: by the model's parameter order
// of their first parameter (DDP's buckets are in reverse parameter order, so the first layers'
// parameters are usually in its last bucket; a bucket with no parameter of the model goes last). A
// collective group runs its collectives in order, so bucket k is done only after every bucket
// started before it: the waits go in that order too. Every module that holds parameters gets a
// hook, which waits for the buckets up to the last one holding a parameter of its own or of a
// module above it (so a container whose forward is called directly, model.forward(x), has its own
// parameters whole once any child with parameters runs); modules without parameters get none, so
// fused runs stay fused. A module the forward reaches without operator() (child.forward(x)) runs no
// hook: read such a model only after wait(). The gather of a step is always waited for before the
// next one starts, and by the destructor. A failed all-gather throws from the wait that meets it —
// a std::runtime_error naming the optimizer, the bucket and the collective's own message — and
// from every wait after it: the parameters are never read half-gathered.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "minidl/dist/process_group.h"
#include "minidl/dist/zero_parameter_gather.h"
#include "minidl/nn/module.h"

namespace minidl::dist {

class GatherBeforeUse final : public ParameterGatherer {
 public:
  // Hooks `model`'s modules (removed when this goes).
  GatherBeforeUse(ProcessGroup& group, std::vector<GatherBucket> buckets, nn::Module& model, std::string name);
  // Waits for what is still pending (a failure is not rethrown here).
  ~GatherBeforeUse() override;

  void start() override;
  void wait() override { wait_through(works_.size()); }

 private:
  void wait_through(size_t count);
  void add_hooks(nn::Module& m, size_t above);

  ProcessGroup& group_;
  std::vector<GatherBucket> buckets_;
  std::string name_;
  std::vector<size_t> order_;  // bucket indices, in the order their all-gathers start
  std::unordered_map<const VariableImpl*, size_t> position_;  // a parameter's bucket's place in order_
  std::vector<std::shared_ptr<Work>> works_;  // by place in order_; reset once waited for
  size_t waited_ = 0;  // works_[0, waited_) are done
  std::string failure_;  // the first failed all-gather's message: every later wait throws it
  std::vector<nn::RemovableHandle> hooks_;  // removed first when this goes (declared last)
};

}  // namespace minidl::dist
