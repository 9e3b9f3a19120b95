// dist/zero_parameter_gather.cpp — ZeroRedundancyOptimizer's all-gather of the parameters: at the
// end of step() (GatherAtStep), or started there and waited for bucket by bucket by the next
// forward's pre-hooks (GatherBeforeUse).
#include "minidl/dist/zero_parameter_gather.h"

#include <algorithm>
#include <exception>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <unordered_map>

namespace minidl::dist {

namespace {

// Rank `rank`'s slab of a bucket's buffer.
Tensor slab_of(const Tensor& buffer, const ProcessGroup& group) {
  const int64_t n = buffer.numel() / group.size();
  return buffer.narrow(0, group.rank() * n, n);
}

std::string gather_failure(const std::string& name, size_t bucket, const std::exception& e) {
  return name + ": the all-gather of the parameters of bucket " + std::to_string(bucket) +
         " (all_gather_into_tensor) failed: " + e.what();
}

class GatherAtStep final : public ParameterGatherer {
 public:
  GatherAtStep(ProcessGroup& group, std::vector<GatherBucket> buckets, std::string name)
      : group_(group), buckets_(std::move(buckets)), name_(std::move(name)) {}

  void start() override {
    if (group_.size() == 1) return;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      try {
        group_.all_gather_into_tensor(buckets_[b].buffer, slab_of(buckets_[b].buffer, group_));
      } catch (const std::exception& e) {
        throw std::runtime_error(gather_failure(name_, b, e));
      }
    }
  }
  void wait() override {}

 private:
  ProcessGroup& group_;
  std::vector<GatherBucket> buckets_;
  std::string name_;
};

class GatherBeforeUse final : public ParameterGatherer {
 public:
  GatherBeforeUse(ProcessGroup& group, std::vector<GatherBucket> buckets, nn::Module& model, std::string name)
      : group_(group), buckets_(std::move(buckets)), name_(std::move(name)) {
    // the order: by the model's index of each bucket's first parameter (one outside the model last)
    std::unordered_map<const VariableImpl*, size_t> index;
    for (const Variable& p : model.parameters()) index.emplace(p.impl(), index.size());
    std::vector<size_t> first(buckets_.size(), std::numeric_limits<size_t>::max());
    for (size_t b = 0; b < buckets_.size(); ++b)
      for (const Variable& p : buckets_[b].params)
        if (const auto it = index.find(p.impl()); it != index.end()) first[b] = std::min(first[b], it->second);
    order_.resize(buckets_.size());
    std::iota(order_.begin(), order_.end(), size_t{0});
    std::stable_sort(order_.begin(), order_.end(), [&](size_t a, size_t b) { return first[a] < first[b]; });
    for (size_t k = 0; k < order_.size(); ++k)
      for (const Variable& p : buckets_[order_[k]].params) position_.emplace(p.impl(), k);
    works_.resize(buckets_.size());
    add_hooks(model, 0);
  }

  // Waits for what is still pending: a Work must be waited for before its tensors go. A
  // destructor cannot throw; a failure has broken the group, whose next collective throws it.
  ~GatherBeforeUse() override {
    try {
      wait();
    } catch (const std::exception&) {  // see above
    }
  }

  void start() override {
    wait();
    if (group_.size() == 1) return;
    for (size_t k = 0; k < order_.size(); ++k) {
      Tensor& buffer = buckets_[order_[k]].buffer;
      works_[k] = group_.all_gather_into_tensor_async(buffer, slab_of(buffer, group_));
    }
    waited_ = 0;
  }

  void wait() override { wait_through(works_.size()); }

 private:
  // Waits for the first `count` all-gathers in the order they were started.
  void wait_through(size_t count) {
    if (!failure_.empty()) throw std::runtime_error(failure_);
    for (; waited_ < count && works_[waited_]; ++waited_) {
      try {
        works_[waited_]->wait();
      } catch (const std::exception& e) {
        failure_ = gather_failure(name_, order_[waited_], e);
        throw std::runtime_error(failure_);
      }
      works_[waited_].reset();
    }
  }

  // A hook on `m` and on every module below it that holds parameters (one without, a ReLU, keeps
  // none: a fused run stays fused), waiting before the module runs for the buckets holding its own
  // parameters and those of the modules above it (`above`: how many buckets those need).
  void add_hooks(nn::Module& m, size_t above) {
    size_t need = above;
    bool own = false;
    for (const Variable& p : m.parameters(/*recurse=*/false))
      if (const auto it = position_.find(p.impl()); it != position_.end()) {
        need = std::max(need, it->second + 1);
        own = true;
      }
    if (own)
      hooks_.push_back(m.register_forward_pre_hook([this, need](nn::Module&, const Variable&) { wait_through(need); }));
    for (nn::Module* child : m.children()) add_hooks(*child, need);
  }

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

}  // namespace

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
