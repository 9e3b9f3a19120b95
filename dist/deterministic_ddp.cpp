// dist/deterministic_ddp.cpp — DeterministicDDP: micro-shards captured one by one, combined by
// the fixed tree at the step's end, ghost batch norm (see deterministic_ddp.h).
#include "minidl/dist/deterministic_ddp.h"

#include <stdexcept>

#include "minidl/dist/deterministic.h"
#include "minidl/dist/sync_batchnorm.h"
#include "minidl/nn/batchnorm.h"
#include "minidl/tensor/ops.h"

namespace minidl::dist {

// Ghost batch norm for every SyncBatchNorm; a shard's values are the gradients in parameter
// order, then each SyncBatchNorm's (mean, var).
DeterministicDDP::DeterministicDDP(nn::Module& module, const DeterministicDDPOptions& options)
    : DataParallel(module, options.group, "DeterministicDDP"), options_(options) {
  const Variable& first = params_.front().var;
  for (const Param& p : params_)
    if (p.var.dtype() != first.dtype() || p.var.device() != first.device())
      throw std::invalid_argument("DeterministicDDP: every parameter must have one dtype and device; '" + p.name +
                                  "' is " + p.var.data().desc() + ", '" + params_.front().name + "' is " +
                                  first.data().desc());
  for (auto& [name, m] : module_.named_modules()) {
    if (auto* sbn = dynamic_cast<SyncBatchNorm*>(m)) {
      sbn->set_deterministic(true);
      ghost_bns_.push_back(sbn);
    } else if (m->communicates_in_forward()) {  // a converted BatchNorm member: not a SyncBatchNorm object
      throw std::invalid_argument("DeterministicDDP: '" + name + "' (" + m->type_name() +
                                  ") is a BatchNorm member of a user module converted by "
                                  "dist::convert_sync_batchnorm, which cannot run as ghost batch norm; hold it in an "
                                  "nn::Sequential / ModuleList (converted into a dist::SyncBatchNorm) or declare the "
                                  "member as dist::SyncBatchNorm");
    } else if (auto* bn = dynamic_cast<nn::BatchNormBase*>(m); bn && bn->running_mean.defined()) {
      throw std::invalid_argument("DeterministicDDP: '" + name + "' (" + m->type_name() +
                                  ") would move its running statistics once per micro-shard, in an order that depends "
                                  "on the number of processes; convert it with dist::convert_sync_batchnorm first "
                                  "(SyncBatchNorm is ghost batch norm in deterministic mode)");
    }
  }
  for (const Param& p : params_) {
    shard_offsets_.push_back(shard_numel_);
    shard_numel_ += p.var.numel();
  }
  for (SyncBatchNorm* bn : ghost_bns_) {
    ghost_offsets_.push_back(shard_numel_);
    if (bn->running_mean.defined()) shard_numel_ += 2 * bn->options.num_features;
  }
}

Variable DeterministicDDP::forward(const Variable& x) {
  const auto t0 = Clock::now();
  if (!module_.is_training() || !is_grad_enabled()) return module_(x);
  if (expect_backward_) {
    capture_shard();  // the previous shard's backward is done
  } else if (shard_values_.empty()) {
    for (Param& p : params_) p.var.set_grad(Tensor());  // a step starts from no gradient
  }
  Variable out = module_(x);  // as module(x): its forward pre-hooks run
  expect_backward_ = true;
  times_.forward = seconds_since(t0);
  forward_end_ = Clock::now();
  return out;
}

void DeterministicDDP::capture_shard() {
  expect_backward_ = false;
  std::vector<size_t> missing;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!params_[i].var.grad().defined() && !options_.find_unused_parameters) missing.push_back(i);
  if (!missing.empty()) {
    for (Param& p : params_) p.var.set_grad(Tensor());
    shard_values_.clear();
    throw_missing_gradients(missing);
  }
  const Variable& first = params_.front().var;
  Tensor values({shard_numel_}, first.dtype(), first.device());
  for (size_t i = 0; i < params_.size(); ++i) {
    Param& p = params_[i];
    Tensor slot = values.narrow(0, shard_offsets_[i], p.var.numel());
    if (p.var.grad().defined()) {
      slot.copy_(p.var.grad().reshape({-1}));
    } else {
      slot.fill_(0.0);  // unused in this shard (find_unused_parameters)
    }
    p.var.set_grad(Tensor());  // the next shard's backward starts from no gradient
  }
  for (size_t b = 0; b < ghost_bns_.size(); ++b) {
    if (!ghost_bns_[b]->running_mean.defined()) continue;
    const Tensor stats = ghost_bns_[b]->take_shard_statistics();
    if (!stats.defined())
      throw std::logic_error(
          "DeterministicDDP: a SyncBatchNorm did not run in this micro-shard's forward; every shard must use every "
          "batch-norm layer");
    values.narrow(0, ghost_offsets_[b], stats.numel()).copy_(stats.to(values.dtype()));
  }
  shard_values_.push_back(std::move(values));
}

// All shards of the step: the fixed tree over every rank's shards, divided by their number,
// into .grad; the ghost statistics' means into the running statistics.
void DeterministicDDP::finish() {
  if (expect_backward_) capture_shard();
  if (shard_values_.empty()) return;
  times_.backward = seconds_since(forward_end_);
  const auto t0 = Clock::now();
  const int64_t shards = static_cast<int64_t>(shard_values_.size()) * group_->size();
  Tensor mean = shard_tree_all_reduce(shard_values_, *group_);
  shard_values_.clear();
  mul_(mean, 1.0 / static_cast<double>(shards));
  for (size_t i = 0; i < params_.size(); ++i) {
    Param& p = params_[i];
    p.var.set_grad(mean.narrow(0, shard_offsets_[i], p.var.numel()).view(p.var.shape()));
  }
  NoGradGuard no_grad;
  for (size_t b = 0; b < ghost_bns_.size(); ++b) {
    SyncBatchNorm* bn = ghost_bns_[b];
    if (!bn->running_mean.defined()) continue;
    const int64_t C = bn->options.num_features;
    bn->update_running_stats(mean.narrow(0, ghost_offsets_[b], C).to(bn->running_mean.dtype()),
                             mean.narrow(0, ghost_offsets_[b] + C, C).to(bn->running_var.dtype()));
  }
  times_.comm_wait = seconds_since(t0);
}

}  // namespace minidl::dist
