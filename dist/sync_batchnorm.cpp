// dist/sync_batchnorm.cpp — SyncBatchNorm's forward/backward as a custom autograd Function. The
// statistics stay on x's device: gathered there, merged there (batch_norm_gather_stats_with_counts)
// and the backward reads the total count there too.
#include "minidl/dist/sync_batchnorm.h"

#include <utility>

#include "minidl/autograd/function.h"
#include "minidl/autograd/ops.h"
#include "minidl/dist/distributed.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/ops.h"

namespace minidl::dist {

namespace {

// x (N, C, *), weight/bias (C) -> y (N, C, *), statistics gathered over every rank's batch.
class SyncBatchNormFunction : public autograd::Function {
 public:
  SyncBatchNormFunction(ProcessGroup& group, Tensor running_mean, Tensor running_var, double momentum, double eps)
      : group_(group),
        running_mean_(std::move(running_mean)),
        running_var_(std::move(running_var)),
        momentum_(momentum),
        eps_(eps) {}

  std::string name() const override { return "SyncBatchNormBackward"; }

  Tensor forward(const std::vector<Tensor>& in) override {
    x_ = in[0];
    weight_ = in[1];
    const Tensor& bias = in[2];
    const int64_t C = x_.size(1);
    const int64_t count = x_.numel() / C;
    const DType acc = DType::Float64;  // statistics are merged in double

    // local (mean, invstd, count) as one row of 2C + 1 values on x's device (NCCL gathers device
    // tensors); an empty rank sends zeros
    Tensor local = zeros({2 * C + 1}, acc, x_.device());
    if (count > 0) {
      BatchNormStats s = batch_norm_stats(x_, eps_);
      local.narrow(0, 0, C).copy_(s.mean);
      local.narrow(0, C, C).copy_(s.invstd);
    }
    local.narrow(0, 2 * C, 1).fill_(static_cast<double>(count));
    // every rank's row, merged where they are: on the device for CUDA tensors (no host round trip)
    const BatchNormGatheredStats g = batch_norm_gather_stats_with_counts(stack(group_.all_gather(local), 0), eps_);
    if (count <= 1) {  // only then can the total be 1 or less; this reads it on the host
      const double total = g.count.to_vector<double>()[0];
      if (total <= 1)
        throw std::invalid_argument(
            "SyncBatchNorm: expected more than 1 value per channel over all ranks when "
            "training, got " +
            std::to_string(static_cast<int64_t>(total)));
    }
    mean_ = g.mean.to(x_.dtype());
    invstd_ = g.invstd.to(x_.dtype());
    total_ = g.count;
    if (running_mean_.defined())
      batch_norm_update_running_stats_(running_mean_, running_var_, g.mean, g.unbiased_var, momentum_);
    if (count == 0) return empty_like(x_);
    return batch_norm_elemt(x_, mean_, invstd_, weight_, bias);
  }

  std::vector<Tensor> backward(const Tensor& dy) override {
    const int64_t C = x_.size(1);
    // local per-channel sums, then all-reduced so every rank uses the global ones
    Tensor sums = zeros({2 * C}, dy.dtype(), dy.device());
    Tensor grad_weight, grad_bias;
    if (x_.numel() > 0) {
      BatchNormReduce r = batch_norm_backward_reduce(dy, x_, mean_, invstd_, weight_);
      sums.narrow(0, 0, C).copy_(r.sum_dy);
      sums.narrow(0, C, C).copy_(r.sum_dy_xmu);
      grad_weight = r.grad_weight;
      grad_bias = r.grad_bias;
    } else if (weight_.defined()) {
      grad_weight = zeros_like(weight_);
      grad_bias = zeros_like(weight_);
    }
    group_.all_reduce(sums, ReduceOp::SUM);
    Tensor dx = x_.numel() > 0
                    ? batch_norm_backward_elemt(dy, x_, mean_, invstd_, weight_, sums.narrow(0, 0, C).contiguous(),
                                                sums.narrow(0, C, C).contiguous(), total_)
                    : empty_like(x_);
    return {dx, grad_weight, grad_bias};
  }

 private:
  ProcessGroup& group_;
  Tensor running_mean_, running_var_;
  double momentum_, eps_;
  Tensor x_, weight_, mean_, invstd_;
  Tensor total_;  // (1) float64 on x's device: the count over every rank
};

}  // namespace

SyncBatchNorm::SyncBatchNorm(const nn::BatchNormOptions& o, ProcessGroup* group) : BatchNormBase(o), group_(group) {}

void SyncBatchNorm::check_input_dim(const Variable& x) const {
  if (x.dim() < 2) throw std::invalid_argument("SyncBatchNorm: expected input (N, C, *), got " + x.data().desc());
}

namespace {
// SyncBatchNorm's forward for any BatchNorm: plain BatchNorm in eval or with one rank.
Variable sync_forward(nn::BatchNormBase& bn, ProcessGroup* group_or_default, const Variable& x) {
  ProcessGroup* group = group_or_default ? group_or_default : (is_initialized() ? &default_group() : nullptr);
  if (!bn.is_training() || group == nullptr || group->size() == 1) return bn.local_forward(x);
  bn.check_input(x);
  const double momentum = bn.next_momentum();
  auto fn = std::make_shared<SyncBatchNormFunction>(*group, bn.running_mean, bn.running_var, momentum, bn.options.eps);
  return autograd::Function::apply(fn, {x, bn.weight, bn.bias});
}
}  // namespace

Variable SyncBatchNorm::forward(const Variable& x) {
  if (deterministic_ && training_) {  // ghost batch norm over this micro-shard
    check_input(x);
    if (!running_mean.defined()) return batch_norm(x, Tensor(), Tensor(), weight, bias, true, 0.0, options.eps);
    // Running statistics that start at 0 and move with momentum 1 become exactly the shard's
    // mean and unbiased variance, as the batch-norm kernel computes them.
    Tensor mean = zeros_like(running_mean), var = zeros_like(running_var);
    Variable y = batch_norm(x, mean, var, weight, bias, /*training=*/true, /*momentum=*/1.0, options.eps);
    shard_stats_ = cat({mean, var}, 0);
    return y;
  }
  return sync_forward(*this, group_, x);
}

Tensor SyncBatchNorm::take_shard_statistics() { return std::exchange(shard_stats_, Tensor()); }

void SyncBatchNorm::update_running_stats(const Tensor& mean, const Tensor& var) {
  if (!running_mean.defined()) return;
  NoGradGuard no_grad;
  batch_norm_update_running_stats_(running_mean, running_var, mean, var, next_momentum());
}

int convert_sync_batchnorm(nn::Module& module, ProcessGroup* group) {
  // collect first: replacing destroys the old BatchNorm, which the traversal would still visit
  struct Swap {
    nn::Module* parent;
    std::string name;
    nn::BatchNormBase* bn;
  };
  std::vector<Swap> swaps;
  std::vector<nn::BatchNormBase*> members;
  for (auto& [path, m] : module.named_modules()) {
    for (auto& [child_name, child] : m->named_children()) {
      auto* bn = dynamic_cast<nn::BatchNormBase*>(child);
      if (!bn || dynamic_cast<SyncBatchNorm*>(child) || bn->has_forward_override()) continue;
      if (m->owns_child(child_name))
        swaps.push_back({m, child_name, bn});
      else
        members.push_back(bn);  // a member object: it stays, its forward becomes SyncBatchNorm's
    }
  }
  // the root itself, when it is a BatchNorm
  if (auto* bn = dynamic_cast<nn::BatchNormBase*>(&module);
      bn && !dynamic_cast<SyncBatchNorm*>(bn) && !bn->has_forward_override())
    members.push_back(bn);
  for (nn::BatchNormBase* bn : members)
    bn->set_forward_override([group](nn::BatchNormBase& b, const Variable& x) { return sync_forward(b, group, x); },
                             "SyncBatchNorm", /*communicates=*/true);
  NoGradGuard no_grad;
  for (const Swap& s : swaps) {
    auto sync = std::make_unique<SyncBatchNorm>(s.bn->options, group);
    if (s.bn->weight.defined()) {
      sync->weight.data().copy_(s.bn->weight.data());
      sync->bias.data().copy_(s.bn->bias.data());
    }
    if (s.bn->running_mean.defined()) {
      sync->running_mean.copy_(s.bn->running_mean);
      sync->running_var.copy_(s.bn->running_var);
      sync->num_batches_tracked.copy_(s.bn->num_batches_tracked);
    }
    sync->train(s.bn->is_training());
    s.parent->replace_module(s.name, std::move(sync));
  }
  return static_cast<int>(swaps.size() + members.size());
}

}  // namespace minidl::dist
