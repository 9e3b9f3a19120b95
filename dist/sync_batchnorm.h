// dist/sync_batchnorm.h — SyncBatchNorm: BatchNorm whose batch statistics span every rank, and
// convert_sync_batchnorm, which swaps it in for each BatchNorm of a model (before DDP wraps it).
//
// Training with world size > 1 (PyTorch's algorithm, on CPU through Gloo as well as on CUDA):
//   forward   each rank: local mean, invstd and count (numel / C); all-gather (mean, invstd,
//             count); merge count-weighted (Chan's parallel formula; ranks with count 0 take
//             part and are masked out); normalise with the global mean and invstd. All on x's
//             device (batch_norm_gather_stats_with_counts, tensor/ops_nn.h): no host round trip
//             on CUDA, except reading the total when this rank has at most one value per channel.
//   backward  each rank: sum_dy and sum_dy_xmu per channel, all-reduced (SUM);
//             dx = (dy - sum_dy/N - (x - mean) invstd^2 sum_dy_xmu/N) * weight * invstd,
//             with N read from a device tensor.
//             weight / bias gradients stay local; DDP averages them like any other gradient.
// Eval mode, or world size 1: exactly BatchNorm.
//
// Deterministic mode (set_deterministic(true); DeterministicDDP turns it on for every
// SyncBatchNorm of its model): ghost batch norm. Each training forward is
// one micro-shard of the global batch (dist/deterministic.h) and normalises with the statistics
// of that shard alone, communicating nothing — so a shard's output and gradients are the same
// whichever rank computes it and however many ranks there are. Instead of moving the running
// statistics per forward (which would depend on which shards a rank saw), the layer records the
// shard's mean and unbiased variance (take_shard_statistics); DDP averages them over all the
// step's shards with the same fixed tree as the gradients and calls update_running_stats once
// per step. Statistics over m samples instead of the global batch: the batch-norm noise of a
// batch of m (Hoffer et al., "Train longer, generalize better", 2017, section 4).
#pragma once
#include <memory>

#include "minidl/dist/process_group.h"
#include "minidl/nn/batchnorm.h"

namespace minidl::dist {

class SyncBatchNorm : public nn::BatchNormBase {
 public:
  explicit SyncBatchNorm(const nn::BatchNormOptions& o, ProcessGroup* group = nullptr);
  std::string type_name() const override { return "SyncBatchNorm"; }
  bool communicates_in_forward() const override { return true; }  // all-gathers its statistics
  Variable forward(const Variable& x) override;

  void set_deterministic(bool on) { deterministic_ = on; }
  bool deterministic() const { return deterministic_; }
  // Deterministic mode: (mean, unbiased variance) per channel of the last training forward, as
  // one (2C) tensor like running_mean; undefined when there was none since the last call (or
  // running statistics are not tracked).
  Tensor take_shard_statistics();
  // Moves the running statistics once towards (mean, var), each (C), with this step's momentum
  // (advancing num_batches_tracked) — what BatchNorm's forward does with its batch's statistics.
  void update_running_stats(const Tensor& mean, const Tensor& var);

 protected:
  void check_input_dim(const Variable& x) const override;  // (N, C, *), N may be 0

 private:
  ProcessGroup* group_;  // nullptr: the default group at forward time
  bool deterministic_ = false;
  Tensor shard_stats_;  // deterministic mode: the last shard's (mean, unbiased var)
};

// Makes every BatchNorm1d/2d below (and including) `module` synchronise its statistics. One owned
// by a container (nn::Sequential, ModuleList, ModuleDict) is replaced by a SyncBatchNorm with the
// same options, parameters, running statistics and num_batches_tracked; one held as a member of a
// user module (which cannot be replaced) keeps its object, parameters and state and gets
// SyncBatchNorm's forward (and type name). Returns how many BatchNorms were converted.
int convert_sync_batchnorm(nn::Module& module, ProcessGroup* group = nullptr);

}  // namespace minidl::dist
