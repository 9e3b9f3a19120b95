// dist/deterministic_ddp.h — DeterministicDDP: data parallelism whose result is the same bits on
// 1, 2 or 4 processes and any thread count (dist/deterministic.h explains the fixed summation
// tree). A step's global batch is cut into K micro-shards of m samples; rank r runs its
// consecutive K / R of them, one training forward + backward each, and then step():
//
//   dist::DeterministicDDP ddp(model);                 // rank 0's weights and buffers everywhere
//   opt.zero_grad();
//   for (int64_t j = 0; j < n; ++j) {                   // n = K / R shards, in global order
//     manual_seed(key of the shard's first sample);      // randomness by sample, not by rank
//     Variable loss = cross_entropy(ddp.forward(Variable(x_shard[j])), y_shard[j]);  // mean over m
//     loss.backward();                                   // no communication: the shard's gradient is kept
//   }
//   ddp.step(opt);   // tree-sum of all K shard gradients (one all_gather), / K, into .grad; opt.step()
//
// It owns .grad between a step's first training forward and finish(): each shard's gradient (and
// its SyncBatchNorm statistics: ghost batch norm, see sync_batchnorm.h) is copied out and .grad
// cleared before the next shard. Buffers are not broadcast per forward (they are identical by
// construction). A BatchNorm other than SyncBatchNorm is an error (its running statistics would
// move once per shard, in an order that depends on the process count), and so is a BatchNorm
// member converted in place (it cannot run as ghost batch norm); all parameters must share one
// dtype and device. There is no no_sync() or join(): every rank runs its share of every global
// batch.
#pragma once
#include <cstdint>
#include <vector>

#include "minidl/dist/data_parallel.h"

namespace minidl::dist {

class SyncBatchNorm;

struct DeterministicDDPOptions {
  bool find_unused_parameters = false;  // a parameter a shard does not reach gets a zero gradient
  ProcessGroup* group = nullptr;  // nullptr: the default group of dist::init()
};

class DeterministicDDP : public DataParallel {
 public:
  explicit DeterministicDDP(nn::Module& module, const DeterministicDDPOptions& options = {});

  // A training forward (with grad enabled) is one micro-shard; it first captures the previous
  // shard's gradient. Other forwards (eval, no grad) are the module's own.
  Variable forward(const Variable& x) override;
  // Combines the step's micro-shards (a collective: the fixed tree) and writes their mean.
  void finish() override;

 private:
  void capture_shard();  // the finished shard's gradient and statistics; .grad cleared

  DeterministicDDPOptions options_;
  bool expect_backward_ = false;  // a training forward ran and its shard is not captured yet
  std::vector<int64_t> shard_offsets_;  // per parameter: element offset in a shard's value vector
  std::vector<SyncBatchNorm*> ghost_bns_;  // in module order; their statistics follow the gradients
  std::vector<int64_t> ghost_offsets_;
  int64_t shard_numel_ = 0;  // values per shard: gradients, statistics
  std::vector<Tensor> shard_values_;  // this step's shards so far, in order
};

}  // namespace minidl::dist
