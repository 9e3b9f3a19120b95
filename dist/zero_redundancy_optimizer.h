// dist/zero_redundancy_optimizer.h — ZeroRedundancyOptimizer: ZeRO stage 1 (the optimizer state
// sharded over the ranks), as in llm.c and DeepSpeed, with the interface of PyTorch's
// torch.distributed.optim.ZeroRedundancyOptimizer. Every rank keeps every parameter; each rank
// owns an equal contiguous slab of the flattened gradients and parameters and runs the wrapped
// optimizer (SGD, Adam, AdamW) over that slab alone, so its momentum buffers or Adam moments are
// 1/N of the unsharded optimizer's whatever the sizes of the parameters.
//
//   dist::DistributedDataParallel ddp(model);
//   dist::ZeroRedundancyOptimizer opt(model.parameters(), [](std::vector<optim::ParamGroupSpec> groups) {
//     return std::make_unique<optim::AdamW>(std::move(groups), optim::AdamWOptions{.lr = 1e-3});
//   }, {.ddp = &ddp});
//   opt.zero_grad(); loss.backward(); ddp.step(opt);  // reduce-scatter, own slab updated, all-gather
//
// Algorithm. The flat order is DDP's buckets (options.ddp; without it, the parameters in order,
// a new run at each change of dtype or device); each bucket of size * n elements (padded) is cut
// into `size` slabs of n and rank r owns slab r of every bucket, which may begin or end inside a
// parameter. The constructor makes every parameter a view of its slot in a flat buffer per
// bucket, in memory the group reaches directly (ProcessGroup::empty_symmetric). With options.ddp,
// DDP reduce-scatters each gradient bucket as backward goes (instead of all-reducing it;
// DistributedDataParallel::shard_gradients), so when backward returns this rank's slabs hold the
// averaged gradients. step(): the wrapped optimizer, built by the factory over one flat 1-d
// Variable per (parameter, slab) piece — a view of the parameter buffer's elements, and of the
// gradient's — updates them with the same per-element arithmetic as the unsharded optimizer (so
// the same bits; the "step" counters are per piece, all equal); then one all_gather_into_tensor
// per bucket, in place, brings every rank's slab into every rank's buffer (shared memory: copied
// straight from the owner's buffer between two barriers). Each group's lr, weight decay,
// initial_lr and momentum — what LR schedulers set, on this optimizer's param_groups() — are
// copied to the wrapped optimizer first.
// When the all-gather happens is options.gather (dist/zero_parameter_gather.h), chosen once:
// ParameterGather::AtStep runs it, bucket by bucket, before step() returns; BeforeUse starts the
// buckets' all-gathers (async, in the order the forward uses them) and returns, and the next
// forward waits for each bucket in a forward pre-hook of the first module that uses one of its
// parameters, so the later buckets' all-gathers run beside the first layers' forward. Under
// BeforeUse every method here that reads the parameters or the optimizer state waits first
// (step, clip_grad_norm, consolidate_state_dict, state_dict, load_state_dict, the destructor,
// dist::Join's shadow step and the end of its scope); anything else that reads the model outside
// its forward — model.state_dict() for a checkpoint, an evaluation through model.forward(x) —
// calls wait_for_parameters() first. zero_grad() touches only gradients and does not wait.
// The default is AtStep, from a measurement (bench_zero 20 2 <model> --gather, 2 processes x
// 1 thread on 2 cores, shared memory, medians of 3 on a busy machine): BeforeUse took 0.98 (mlp),
// 1.04 (vit) and 1.02 (cnn) of AtStep's step time with DDP's default buckets, and 0.90 / 1.05 /
// 1.09 with 0.25 MB buckets — no gain beyond the noise. Here the forward keeps every core busy,
// so the communication thread's copies only move to another moment on the same cores, and at the
// default caps the MLP and the ViT are one bucket, which their first layer waits for whole. AtStep
// also leaves the model whole when step() returns, with no wait for other readers to remember.
// BeforeUse is for a group whose collectives run beside the compute (a GPU's communication
// stream, a network) and a model of many buckets; that case is not measured here.
// Cost: the reduce-scatter and the all-gather move the bytes of the one all-reduce of plain DDP
// (each rank sends and receives (size - 1) / size of the gradients, then of the parameters); the
// optimizer's arithmetic and state are 1/N; the reduce-scatters overlap backward, the all-gather
// overlaps nothing under AtStep and the next forward under BeforeUse (up to the first collective
// that forward issues — DDP's buffer broadcast for a model with buffers, Join's handshake — which
// runs after the all-gathers in the group's queue). After step(), .grad outside this rank's slabs
// is this rank's own gradient, not the average. A parameter whose tensor is replaced (Module::to,
// set_data) is bound to its slot again, with its values, at the next step().
// Without options.ddp the gradients are taken as they are (a DeterministicDDP, or any caller
// that averaged them): only the all-gather then, after the caller's all-reduce.
// Simpler option not taken: PyTorch's partition of whole parameters (each to the emptiest rank)
// with DDP's all-reduce and then one broadcast per rank: 1.5x the bytes of plain DDP, and a model
// whose largest parameter is most of it (the MLP's and the CNN's first Linear) saves almost no
// memory. Nor one reduce-scatter of a flat copy of every gradient at step(): the buckets'
// reduce-scatters overlap backward as the all-reduces did. Nor, for BeforeUse, one wait for every
// bucket at the start of the next forward (one hook on the model): simpler, but no layer would
// run beside any all-gather.
// GradScaler: each rank checks its own gradients, averaged only in its slabs; use
// dist::sync_grad_scaler so that every rank takes the same skip decision (step() is a collective).
// For the same reason optim::clip_grad_norm over .grad does not see the averaged gradients: clip
// with this class's clip_grad_norm, which sums the norm over every rank's slabs.
// Uneven inputs: dist::Join(ddp, optimizer) (dist/join.h) — a joined rank shadows step() too.
// zero_grad() clears every parameter's gradient.
// Checkpoints, in the unsharded optimizer's layout (optim/optimizer.h: state.<i>.<name>, i the
// parameter's global index), so they move freely to and from a plain optimizer at any world size:
//   consolidate_state_dict(to)  a collective: every rank's pieces gathered and joined on rank `to`
//   state_dict()                on rank `to` after that: the whole state (std::logic_error elsewhere,
//                               or when a step or a load came after the consolidation)
//   load_state_dict(dict)       on every rank: dict is checked in full (as the wrapped optimizer
//                               over all the parameters would: a std::invalid_argument naming the
//                               key, nothing changed; the check holds a full copy of the state
//                               for its duration) and each rank keeps its pieces
// state(i) of the base class stays empty here; local_optimizer() holds this rank's state.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "minidl/dist/process_group.h"
#include "minidl/dist/zero_parameter_gather.h"
#include "minidl/nn/module.h"
#include "minidl/optim/optimizer.h"

namespace minidl::dist {

class DistributedDataParallel;

// Makes the wrapped optimizer over the given groups (every option of each group set).
using OptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroupSpec>)>;

struct ZeroRedundancyOptimizerOptions {
  ProcessGroup* group = nullptr;  // nullptr: the default group of dist::init()
  // The module whose gradients DDP averages: when set, every parameter must be one of its
  // parameters (one outside it would be updated from this rank's gradient alone).
  nn::Module* module = nullptr;
  // The DDP whose buckets hold the gradients: it reduce-scatters them from then on (its
  // parameters must be exactly this optimizer's). nullptr: the gradients are taken as they are.
  DistributedDataParallel* ddp = nullptr;
  // When the all-gather brings the parameters back (dist/zero_parameter_gather.h): at the end of
  // step(), or before the next forward's first use of each bucket (needs .module or .ddp: its
  // module's forward pre-hooks wait; read the model any other way after wait_for_parameters()).
  ParameterGather gather = ParameterGather::AtStep;
};

class ZeroRedundancyOptimizer : public optim::Optimizer {
 public:
  // A collective: checks that every rank passes the same parameters (group by group: count,
  // shapes, dtypes), a std::invalid_argument naming the first difference otherwise.
  ZeroRedundancyOptimizer(std::vector<Variable> params, OptimizerFactory make_optimizer,
                          ZeroRedundancyOptimizerOptions options = {});
  ZeroRedundancyOptimizer(std::vector<optim::ParamGroupSpec> groups, OptimizerFactory make_optimizer,
                          ZeroRedundancyOptimizerOptions options = {});

  // Updates this rank's slabs, then all-gathers every rank's (a collective): done when it returns
  // (ParameterGather::AtStep), or started (BeforeUse).
  void step() override;
  // Returns once every parameter holds every rank's update of the last step (rethrows a failed
  // all-gather); at once under ParameterGather::AtStep. Under BeforeUse, call it before reading
  // the model other than through its forward: model.state_dict() for a checkpoint, an evaluation
  // that calls model.forward(x) itself. Every method of this class that reads the parameters or
  // the state calls it first.
  void wait_for_parameters();
  // torch.nn.utils.clip_grad_norm_ over the gradients step() will use (as PyTorch's FSDP has
  // its own clip_grad_norm_): with options.ddp, each rank's slabs of the averaged gradients are
  // the pieces of the norm, summed (max for p = infinity) over the ranks by one all-reduce (a
  // collective), then scaled; without it, optim::clip_grad_norm over every parameter (each rank
  // holds the averaged gradients whole). Returns the total norm before clipping, the same on
  // every rank. After backward (and GradScaler::unscale_), before step().
  double clip_grad_norm(double max_norm, double norm_type = 2.0);
  bool has_momentum() const override { return has_momentum_; }
  // The DDP whose gradients this optimizer shards (options.ddp; nullptr without one).
  const DistributedDataParallel* ddp() const { return options_.ddp; }

  void consolidate_state_dict(int to = 0);
  TensorMap state_dict() const override;
  void load_state_dict(const TensorMap& dict) override;

  // Elements [offset, offset + numel) of the flattened parameter with global index `param`.
  struct Piece {
    int64_t param = 0;
    int64_t offset = 0;
    int64_t numel = 0;
    bool operator==(const Piece& o) const { return param == o.param && offset == o.offset && numel == o.numel; }
  };
  // This rank's pieces, group by group, each group in flat order: the wrapped optimizer's
  // parameter j is a 1-d view of local_pieces()[j].
  const std::vector<Piece>& local_pieces() const { return local_pieces_; }
  // The wrapped optimizer over this rank's pieces; nullptr when the rank owns none.
  const optim::Optimizer* local_optimizer() const { return local_.get(); }

 protected:
  // Never asked: the base's load_state_dict, its only user, is overridden.
  std::vector<std::string> state_names() const override { return {}; }

 private:
  struct Reference;  // what the wrapped optimizer over all the parameters resolves
  // One run of the flat order: a DDP bucket, or consecutive parameters of one dtype and device.
  struct Bucket {
    int64_t numel = 0;  // padded to a multiple of the number of ranks
    std::vector<std::pair<int64_t, int64_t>> params;  // (global index, element offset), in order
    Tensor buffer;  // (numel): the parameters, each a view of its slot (from the group's empty_symmetric)
  };
  ZeroRedundancyOptimizer(Reference reference, OptimizerFactory make_optimizer, ZeroRedundancyOptimizerOptions options);

  ProcessGroup& group() const;
  Variable& param(int64_t i) { return params_[static_cast<size_t>(i)]; }
  const Variable& param(int64_t i) const { return params_[static_cast<size_t>(i)]; }
  void check_same_parameters_on_every_rank() const;
  void check_parameters_in_module(const nn::Module& module) const;
  std::vector<Bucket> buckets_of_ddp(const DistributedDataParallel& ddp) const;
  std::vector<Bucket> buckets_in_order() const;
  void cut(std::vector<Bucket> buckets);
  // Makes every parameter a view of its slot in its bucket's buffer (again, when something —
  // Module::to, set_data — replaced its tensor since), its values kept.
  void bind_parameters();
  // Every group as a spec with all options set: over the parameters, or over this rank's pieces.
  std::vector<optim::ParamGroupSpec> group_specs(bool pieces) const;
  void copy_group_options_to(optim::Optimizer& to) const;

  OptimizerFactory make_optimizer_;
  ZeroRedundancyOptimizerOptions options_;
  bool has_momentum_ = false;
  std::vector<Variable> params_;  // by global index (handles of groups_' parameters)
  std::vector<size_t> group_of_;  // by global index
  std::vector<Bucket> buckets_;
  std::vector<Piece> local_pieces_;
  std::vector<Variable> local_vars_;  // the wrapped optimizer's parameters, by local index
  std::unique_ptr<optim::Optimizer> local_;
  std::optional<TensorMap> consolidated_;  // the gathered state, on rank `to` of the last consolidation
  std::unique_ptr<ParameterGatherer> gather_;  // last: a pending all-gather is waited for before the buffers go
};

}  // namespace minidl::dist
