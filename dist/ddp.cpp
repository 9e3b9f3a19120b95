// dist/ddp.cpp — DistributedDataParallel: gradient buckets, autograd hooks, buffer broadcasts, join.
#include "minidl/dist/ddp.h"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <thread>
#include <unordered_set>

#include "minidl/autograd/trace.h"
#include "minidl/dist/distributed.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/ops.h"

namespace minidl::dist {

DistributedDataParallel::DistributedDataParallel(nn::Module& module, const DDPOptions& options)
    : DataParallel(module, options.group, "DistributedDataParallel"), options_(options) {
  // Buffers of layers that communicate in forward (SyncBatchNorm) move identically on every rank;
  // the others (a plain BatchNorm's running statistics) are rank 0's at every training forward.
  std::unordered_set<const Storage*> synced_by_layer;
  for (auto& [name, m] : module_.named_modules()) {
    if (!m->communicates_in_forward()) continue;
    has_collective_modules_ = true;
    for (auto& [bname, b] : m->named_buffers()) synced_by_layer.insert(b->storage().get());
  }
  for (auto& [name, b] : module_.named_buffers())
    if (!synced_by_layer.count(b->storage().get())) synced_buffers_.push_back(*b);
  on_default_group_ = options.group == nullptr;
  slots_.resize(params_.size());
  build_buckets();
  for (size_t i = 0; i < params_.size(); ++i)
    slots_[i].hook = params_[i].var.register_post_accumulate_grad_hook([this, i](Tensor&) { mark_ready(i); });
}

DistributedDataParallel::~DistributedDataParallel() {
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i].var.remove_post_accumulate_grad_hook(slots_[i].hook);
    params_[i].var.set_grad_destination(Tensor());
  }
}

// The root's synced buffers to every rank, in place: one collective (per device).
void DistributedDataParallel::broadcast_buffers(int root) {
  if (group_->size() == 1 || synced_buffers_.empty()) return;
  const autograd::trace::Span span("DDP broadcast buffers", autograd::trace::kWait);  // tracing
  NoGradGuard no_grad;
  broadcast_coalesced(*group_, synced_buffers_, root);
}

// Reverse registration order, PyTorch's rule (compute_bucket_assignment_by_size): each kind of
// parameter (dtype and device) has its own open bucket; a parameter joins its kind's, and the
// bucket closes once it holds at least its cap — a kind's first bucket's cap is
// first_bucket_cap_mb, its later ones' bucket_cap_mb. So a parameter larger than the cap closes the
// bucket it lands in (the CNN's 1.6 MB fc1 weight rides in the first bucket, launched early in
// backward, instead of waiting for the convolutions), and parameters of two dtypes taking turns
// fill one bucket each instead of a bucket per turn. Buckets launch in the order they close (the
// ones still open at the end close there, in the order of their last parameter): the order their
// last gradients are expected.
void DistributedDataParallel::build_buckets() {
  struct Kind {  // the parameters of one dtype and device
    DType dtype;
    Device device;
    double cap;  // MB: first_bucket_cap_mb until its first bucket closes, then bucket_cap_mb
    std::optional<size_t> open = std::nullopt;  // its open bucket (into `assigned`), if any
    double bytes = 0;  // in the open bucket
  };
  std::vector<Kind> kinds;
  std::vector<std::vector<size_t>> assigned;  // each bucket's parameters, in joining order
  std::vector<size_t> closed;  // bucket order: indices into `assigned`
  for (size_t k = params_.size(); k-- > 0;) {
    const Variable& v = params_[k].var;
    auto it = std::find_if(kinds.begin(), kinds.end(),
                           [&](const Kind& kind) { return kind.dtype == v.dtype() && kind.device == v.device(); });
    if (it == kinds.end())
      it = kinds.insert(kinds.end(), {.dtype = v.dtype(), .device = v.device(), .cap = options_.first_bucket_cap_mb});
    if (!it->open) {
      it->open = assigned.size();
      it->bytes = 0;
      assigned.emplace_back();
    }
    assigned[*it->open].push_back(k);
    it->bytes += static_cast<double>(v.numel() * static_cast<int64_t>(element_size(v.dtype())));
    if (it->bytes >= it->cap * 1024 * 1024) {
      closed.push_back(*it->open);
      it->open.reset();
      it->cap = options_.bucket_cap_mb;
    }
  }
  std::vector<size_t> left_open;  // by their last parameter, joined latest last
  for (const Kind& kind : kinds)
    if (kind.open) left_open.push_back(*kind.open);
  std::sort(left_open.begin(), left_open.end(),
            [&](size_t a, size_t b) { return assigned[a].back() > assigned[b].back(); });  // k falls as they join
  closed.insert(closed.end(), left_open.begin(), left_open.end());
  std::vector<int64_t> numel;  // numel[j]: bucket j's elements
  for (size_t j = 0; j < closed.size(); ++j) {
    buckets_.push_back({});
    numel.push_back(0);
    for (size_t k : assigned[closed[j]]) {
      slots_[k].bucket = j;
      slots_[k].offset = numel.back();
      numel.back() += params_[k].var.numel();
      buckets_.back().params.push_back(k);
    }
  }
  // Each bucket, on its parameters' device, in memory the group reaches directly (shared memory:
  // reduced in place between the ranks' buckets, no copies through the group's segment), padded
  // to equal slabs.
  const int64_t world = group_->size();
  for (size_t j = 0; j < buckets_.size(); ++j) {
    const Variable& first = params_[buckets_[j].params.front()].var;
    const int64_t padded = (numel[j] + world - 1) / world * world;
    buckets_[j].buffer = group_->empty_symmetric({padded}, first.dtype(), first.device());
    buckets_[j].slab = buckets_[j].buffer.narrow(0, group_->rank() * (padded / world), padded / world);
  }
  // Each parameter's gradient is made in its slot where the op allows (a linear layer's weight):
  // nothing to copy in when its bucket launches (autograd's Variable::set_grad_destination).
  for (size_t i = 0; i < params_.size(); ++i)
    params_[i].var.set_grad_destination(grad_slot(buckets_[slots_[i].bucket], i));
  ready_.assign(params_.size(), false);
}

std::vector<DistributedDataParallel::BucketLayout> DistributedDataParallel::bucket_layout() const {
  std::vector<BucketLayout> out;
  for (const auto& b : buckets_) {
    out.push_back({b.buffer.numel(), {}});
    for (size_t i : b.params) out.back().params.emplace_back(params_[i].var, slots_[i].offset);
  }
  return out;
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_parameter_names() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& b : buckets_) {
    out.emplace_back();
    for (size_t i : b.params) out.back().push_back(params_[i].name);
  }
  return out;
}

int DistributedDataParallel::join_handshake(int active) {
  Tensor flag = full({1}, active, DType::Int64);
  group_->all_reduce(flag, ReduceOp::SUM);
  return static_cast<int>(flag.item());
}

Variable DistributedDataParallel::forward(const Variable& x) {
  const auto t0 = Clock::now();
  const bool sync = module_.is_training() && is_grad_enabled() && require_sync_;
  if (sync) {
    if (expect_backward_ && !finalized_) finish();  // names the parameters that got no gradient
    if (join_enabled_ && group_->size() > 1) join_handshake(1);  // only inside a dist::Join scope
    ++synced_steps_;
    if (options_.broadcast_buffers) broadcast_buffers(0);
  }
  Variable out = module_(x);  // as module(x): its forward pre-hooks run
  if (sync) prepare_for_backward(out);
  times_.forward = seconds_since(t0);
  forward_end_ = Clock::now();
  return out;
}

void DistributedDataParallel::prepare_for_backward(const Variable& out) {
  std::fill(ready_.begin(), ready_.end(), false);
  for (auto& b : buckets_) {
    b.pending = static_cast<int>(b.params.size());
    b.work.reset();
  }
  next_bucket_ = 0;
  num_ready_ = 0;
  launched_early_ = 0;
  finalized_ = false;
  expect_backward_ = true;
  if (!options_.find_unused_parameters) return;
  // Parameters this forward did not reach will get no gradient: mark them ready now.
  std::unordered_set<VariableImpl*> reached;
  std::vector<VariableImpl*> stack{out.impl()};
  std::unordered_set<VariableImpl*> seen{out.impl()};
  while (!stack.empty()) {
    VariableImpl* v = stack.back();
    stack.pop_back();
    if (!v->grad_fn) {
      reached.insert(v);
      continue;
    }
    for (const auto& in : v->grad_fn->inputs)
      if (in.impl() && in.impl()->requires_grad && seen.insert(in.impl()).second) stack.push_back(in.impl());
  }
  for (size_t i = 0; i < params_.size(); ++i)
    if (!reached.count(params_[i].var.impl())) mark_ready(i);
}

void DistributedDataParallel::mark_ready(size_t i) {
  if (!expect_backward_ || finalized_ || ready_[i]) return;
  ready_[i] = true;
  ++num_ready_;
  if (--buckets_[slots_[i].bucket].pending == 0) launch_ready_buckets();
  if (num_ready_ == params_.size()) finalize();
}

Tensor DistributedDataParallel::grad_slot(const Bucket& b, size_t i) const {
  const Variable& v = params_[i].var;
  return b.buffer.narrow(0, slots_[i].offset, v.numel()).view(v.shape());
}

// Launches complete buckets strictly in bucket order: bucket k never starts before bucket k-1.
void DistributedDataParallel::launch_ready_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& b = buckets_[next_bucket_++];
    // Each gradient moves into its slot unless it was made there, and .grad becomes a view of the
    // slot (PyTorch's gradient_as_bucket_view): the average is then made in place, with no copy back.
    for (size_t i : b.params) {
      Param& p = params_[i];
      Tensor slot = grad_slot(b, i);
      const Tensor& grad = p.var.grad();
      if (!grad.defined()) {
        slot.fill_(0.0);  // unused in this forward (find_unused_parameters)
      } else if (!grad.is_same(slot)) {
        slot.copy_(grad);
      }
      p.var.set_grad(slot);
    }
    const autograd::trace::CollectiveLabel label("DDP bucket", static_cast<int64_t>(next_bucket_ - 1));  // tracing
    // the average over the ranks, in place: of this rank's slab alone when sharded
    if (sharded_) {
      b.work = group_->reduce_scatter_async(b.buffer, b.slab, ReduceOp::AVG);
    } else if (num_ready_ == params_.size()) {
      // Backward has nothing left to overlap with, and finalize() waits next: the blocking form,
      // which a group with a communication thread may run right here (the shared-memory group
      // does) rather than wake that thread and sleep.
      try {
        const autograd::trace::Span wait("DDP wait", autograd::trace::kWait);  // tracing
        group_->all_reduce(b.buffer, ReduceOp::AVG);
      } catch (const std::exception& e) {
        throw_step_failure(e);
      }
      b.work = nullptr;  // done: nothing for finalize() to wait for
    } else {
      b.work = group_->all_reduce_async(b.buffer, ReduceOp::AVG);
    }
    if (num_ready_ < params_.size()) ++launched_early_;
  }
}

// All buckets launched: wait, average, write back into .grad.
void DistributedDataParallel::finalize() {
  times_.backward = seconds_since(forward_end_);
  const auto t0 = Clock::now();
  for (auto& b : buckets_) {  // the averages are in every .grad of the bucket (views of it)
    if (!b.work) continue;  // reduced by the blocking form at its launch
    try {
      const autograd::trace::Span wait("DDP wait", autograd::trace::kWait);  // tracing
      b.work->wait();
    } catch (const std::exception& e) {
      throw_step_failure(e);
    }
  }
  times_.comm_wait = seconds_since(t0);
  finalized_ = true;
  expect_backward_ = false;
}

void DistributedDataParallel::throw_step_failure(const std::exception& e) {
  for (auto& b : buckets_) b.work.reset();
  expect_backward_ = false;
  finalized_ = true;
  const std::string step = std::to_string(synced_steps_);
  std::string message =
      "DistributedDataParallel: the gradient all-reduce of training step " + step + " failed: " + e.what();
  // Which ranks are not in this step? Every rank whose step fails says so in the store; a rank
  // that is missing after a short wait stopped training earlier (or died).
  if (!join_enabled_ && on_default_group_) {
    try {
      TCPStore& store = default_store();
      const std::string prefix = "minidl/ddp/failed-step/" + step + "/";
      store.set(prefix + std::to_string(group_->rank()), "1");
      std::vector<int> absent;
      const auto deadline = Clock::now() + std::chrono::seconds(3);
      do {
        absent.clear();
        for (int r = 0; r < group_->size(); ++r)
          if (!store.check({prefix + std::to_string(r)})) absent.push_back(r);
        if (absent.empty()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      } while (Clock::now() < deadline);
      if (!absent.empty()) {
        std::string names;
        for (int r : absent) names += (names.empty() ? "" : ", ") + std::to_string(r);
        message += "; rank" + std::string(absent.size() > 1 ? "s " : " ") + names + " did not reach training step " +
                   step +
                   ": it stopped training earlier than this rank (fewer batches?) or died. Every rank must run the "
                   "same number of steps (DistributedSampler gives each the same number of batches); for uneven "
                   "inputs wrap the training loop in a dist::Join";
      }
    } catch (const std::exception&) {
      // the store is gone too (its host, rank 0, ended): the collective's own error stands
    }
  }
  throw std::runtime_error(message);
}

void DistributedDataParallel::finish() {
  if (!expect_backward_ || finalized_) return;
  if (num_ready_ < params_.size()) {
    std::vector<size_t> missing;
    for (size_t i = 0; i < params_.size(); ++i)
      if (!ready_[i]) missing.push_back(i);
    expect_backward_ = false;
    throw_missing_gradients(missing);
  }
  finalize();
}

void DistributedDataParallel::check_joinable(bool with_optimizer_step) const {
  if (sharded_ && !with_optimizer_step)
    throw std::logic_error(
        "DistributedDataParallel::join: the gradients are sharded for a ZeroRedundancyOptimizer, whose "
        "step (an all-gather of the parameters) a joined rank must shadow too; pass the optimizer: "
        "dist::Join join(ddp, optimizer)");
  if (has_collective_modules_)
    throw std::logic_error(
        "DistributedDataParallel::join: the model communicates in forward (SyncBatchNorm), which a "
        "joined rank cannot shadow; give every rank the same number of batches instead");
}

void DistributedDataParallel::join(const std::function<void()>& shadow_optimizer_step) {
  check_joinable(static_cast<bool>(shadow_optimizer_step));
  if (!join_enabled_)
    throw std::logic_error(
        "DistributedDataParallel::join: the ranks still training answer the join handshake only inside "
        "a dist::Join scope; put one around the training loop (its end calls join())");
  if (group_->size() == 1) return;
  NoGradGuard no_grad;
  while (join_handshake(0) > 0) {
    // shadow one training step of the ranks still active: buffers, then every bucket in order
    if (options_.broadcast_buffers) broadcast_buffers(0);
    for (auto& b : buckets_) {
      b.buffer.fill_(0.0);
      if (sharded_) {  // this rank's slab gets the others' average; its .grad views it for the step
        for (size_t i : b.params) params_[i].var.set_grad(grad_slot(b, i));
        group_->reduce_scatter_async(b.buffer, b.slab, ReduceOp::AVG)->wait();
      } else {
        group_->all_reduce(b.buffer, ReduceOp::AVG);  // the same collective as the active ranks' buckets
      }
    }
    if (shadow_optimizer_step) shadow_optimizer_step();
  }
  // Under ZeRO every rank took every step (its own slabs, then the all-gather): the models agree.
  if (shadow_optimizer_step) return;
  // Joined ranks skipped the last optimizer steps: take the model of the rank that trained
  // longest (the highest rank among them), as PyTorch's Join does.
  const int64_t world = group_->size();
  Tensor who = full({1}, static_cast<double>(synced_steps_ * world + group_->rank()), DType::Int64);
  group_->all_reduce(who, ReduceOp::MAX);
  broadcast_state(static_cast<int>(static_cast<int64_t>(who.item()) % world));
}

}  // namespace minidl::dist
