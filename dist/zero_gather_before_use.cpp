// dist/zero_gather_before_use.cpp — GatherBeforeUse: ZeroRedundancyOptimizer's all-gather of the
// parameters started at the end of step() and waited for bucket by bucket by the next forward's
// pre-hooks (the scheme: dist/zero_gather_before_use.h).
#include "minidl/dist/zero_gather_before_use.h"

#include <algorithm>
#include <exception>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <utility>

#include "minidl/dist/zero_gather_common.h"

namespace minidl::dist {

GatherBeforeUse::GatherBeforeUse(ProcessGroup& group, std::vector<GatherBucket> buckets, nn::Module& model,
                                 std::string name)
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

// Waits for what is still pending: a Work must be waited for before its tensors go. A destructor
// cannot throw; a failure has broken the group, whose next collective throws it.
GatherBeforeUse::~GatherBeforeUse() {
  try {
    wait();
  } catch (const std::exception&) {  // see above
  }
}

void GatherBeforeUse::start() {
  wait();
  if (group_.size() == 1) return;
  for (size_t k = 0; k < order_.size(); ++k) {
    Tensor& buffer = buckets_[order_[k]].buffer;
    works_[k] = group_.all_gather_into_tensor_async(buffer, zero_gather::slab_of(buffer, group_));
  }
  waited_ = 0;
}

// Waits for the first `count` all-gathers in the order they were started.
void GatherBeforeUse::wait_through(size_t count) {
  if (!failure_.empty()) throw std::runtime_error(failure_);
  for (; waited_ < count && works_[waited_]; ++waited_) {
    try {
      works_[waited_]->wait();
    } catch (const std::exception& e) {
      failure_ = zero_gather::gather_failure(name_, order_[waited_], e);
      throw std::runtime_error(failure_);
    }
    works_[waited_].reset();
  }
}

// A hook on `m` and on every module below it that holds parameters (one without, a ReLU, keeps
// none: a fused run stays fused), waiting before the module runs for the buckets holding its own
// parameters and those of the modules above it (`above`: how many buckets those need).
void GatherBeforeUse::add_hooks(nn::Module& m, size_t above) {
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

}  // namespace minidl::dist
