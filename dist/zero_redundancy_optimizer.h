// dist/zero_redundancy_optimizer.h — ZeroRedundancyOptimizer: ZeRO stage 1 (the optimizer state
// sharded over the ranks), as PyTorch's torch.distributed.optim.ZeroRedundancyOptimizer. Every
// rank keeps every parameter and, after DDP's all-reduce, every averaged gradient; but each rank
// owns some of the parameters and runs the wrapped optimizer (SGD, Adam, AdamW) over those alone,
// so its momentum buffers or Adam moments are about 1/N of the unsharded optimizer's.
//
//   dist::DistributedDataParallel ddp(model);
//   dist::ZeroRedundancyOptimizer opt(model.parameters(), [](std::vector<optim::ParamGroupSpec> groups) {
//     return std::make_unique<optim::AdamW>(std::move(groups), optim::AdamWOptions{.lr = 1e-3});
//   });
//   opt.zero_grad(); loss.backward(); ddp.step(opt);  // own parameters updated, then broadcast
//
// Partition (PyTorch's): whole parameters, group by group, largest first (ties in list order),
// each to the rank whose share so far has the fewest elements (ties: the lowest rank). A rank's
// share is then at most 1/N of all the elements plus one parameter.
// step(): each group's lr, weight decay, initial_lr and momentum — what LR schedulers set, on this
// optimizer's param_groups() — are copied to the wrapped optimizer, which updates this rank's
// parameters with the same per-element arithmetic as the unsharded optimizer (so the same bits);
// then each rank's parameters are broadcast from it, coalesced (dist::broadcast_coalesced: one
// collective per rank, as PyTorch with parameters_as_bucket_view): DDP's all-reduce plus these
// broadcasts move about 1.5x the bytes of plain DDP (gradients are not reduce-scattered here).
// zero_grad() clears every parameter's gradient.
// Checkpoints, in the unsharded optimizer's layout (optim/optimizer.h: state.<i>.<name>, i the
// parameter's global index), so they move freely to and from a plain optimizer at any world size:
//   consolidate_state_dict(to)  a collective: every rank's shard gathered on rank `to`
//   state_dict()                on rank `to` after that: the whole state (std::logic_error elsewhere,
//                               or when a step or a load came after the consolidation)
//   load_state_dict(dict)       on every rank: dict is checked in full (as the wrapped optimizer
//                               over all the parameters would: a std::invalid_argument naming the
//                               key, nothing changed; the check holds a full copy of the state
//                               for its duration) and each rank keeps its share
// state(i) of the base class stays empty here; local_optimizer() holds this rank's state.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "minidl/dist/process_group.h"
#include "minidl/nn/module.h"
#include "minidl/optim/optimizer.h"

namespace minidl::dist {

// Makes the wrapped optimizer over the given groups (every option of each group set).
using OptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroupSpec>)>;

struct ZeroRedundancyOptimizerOptions {
  ProcessGroup* group = nullptr;  // nullptr: the default group of dist::init()
  // The module whose gradients DDP averages: when set, every parameter must be one of its
  // parameters (one outside it would be updated from this rank's gradient alone).
  const nn::Module* module = nullptr;
};

class ZeroRedundancyOptimizer : public optim::Optimizer {
 public:
  // A collective: checks that every rank passes the same parameters (group by group: count,
  // shapes, dtypes), a std::invalid_argument naming the first difference otherwise.
  ZeroRedundancyOptimizer(std::vector<Variable> params, OptimizerFactory make_optimizer,
                          ZeroRedundancyOptimizerOptions options = {});
  ZeroRedundancyOptimizer(std::vector<optim::ParamGroupSpec> groups, OptimizerFactory make_optimizer,
                          ZeroRedundancyOptimizerOptions options = {});

  // Updates this rank's parameters, then broadcasts every rank's from it (a collective).
  void step() override;
  bool has_momentum() const override { return has_momentum_; }

  void consolidate_state_dict(int to = 0);
  TensorMap state_dict() const override;
  void load_state_dict(const TensorMap& dict) override;

  // The rank that owns the parameter with global index i.
  int owner(int64_t i) const { return owner_.at(static_cast<size_t>(i)); }
  // The global indices of this rank's parameters, ascending: the wrapped optimizer's parameter j
  // is local_params()[j].
  const std::vector<int64_t>& local_params() const { return local_params_; }
  // The wrapped optimizer over this rank's parameters; nullptr when the rank owns none.
  const optim::Optimizer* local_optimizer() const { return local_.get(); }

 protected:
  // Never asked: the base's load_state_dict, its only user, is overridden.
  std::vector<std::string> state_names() const override { return {}; }

 private:
  struct Reference;  // what the wrapped optimizer over all the parameters resolves
  ZeroRedundancyOptimizer(Reference reference, OptimizerFactory make_optimizer, ZeroRedundancyOptimizerOptions options);

  ProcessGroup& group() const;
  void check_same_parameters_on_every_rank() const;
  void check_parameters_in_module(const nn::Module& module) const;
  void partition();
  // Every group as a spec with all options set; only the parameters of `rank` when given.
  std::vector<optim::ParamGroupSpec> group_specs(std::optional<int> rank) const;
  void copy_group_options_to(optim::Optimizer& to) const;

  OptimizerFactory make_optimizer_;
  ZeroRedundancyOptimizerOptions options_;
  bool has_momentum_ = false;
  std::vector<int> owner_;  // by global parameter index
  std::vector<int64_t> local_params_;
  std::unique_ptr<optim::Optimizer> local_;
  std::optional<TensorMap> consolidated_;  // the gathered state, on rank `to` of the last consolidation
};

}  // namespace minidl::dist
