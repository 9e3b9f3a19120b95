// dist/sync_batchnorm.h — SyncBatchNorm: BatchNorm whose batch statistics span every rank, and
// convert_sync_batchnorm, which swaps it in for each BatchNorm of a model (before DDP wraps it).
//
// Training with world size > 1 (PyTorch's algorithm, on CPU through Gloo as well as on CUDA):
//   forward   each rank: local mean, invstd and count (numel / C); all-gather (mean, invstd,
//             count); merge count-weighted (Chan's parallel formula; ranks with count 0 take
//             part and are masked out); normalise with the global mean and invstd.
//   backward  each rank: sum_dy and sum_dy_xmu per channel, all-reduced (SUM);
//             dx = (dy - sum_dy/N - (x - mean) invstd^2 sum_dy_xmu/N) * weight * invstd.
//             weight / bias gradients stay local; DDP averages them like any other gradient.
// Eval mode, or world size 1: exactly BatchNorm.
#pragma once
#include <memory>

#include "dist/process_group.h"
#include "nn/batchnorm.h"

namespace minidl::dist {

class SyncBatchNorm : public nn::BatchNormBase {
 public:
  explicit SyncBatchNorm(const nn::BatchNormOptions& o, ProcessGroup* group = nullptr);
  std::string type_name() const override { return "SyncBatchNorm"; }
  Variable forward(const Variable& x) override;

 protected:
  void check_input_dim(const Variable& x) const override;  // (N, C, *), N may be 0

 private:
  ProcessGroup* group_;  // nullptr: the default group at forward time
};

// Replaces every BatchNorm1d/2d below `module` by a SyncBatchNorm with the same options,
// parameters, running statistics and num_batches_tracked. BatchNorms must be owned children of a
// container (nn::Sequential); a member BatchNorm is an error naming it. Returns how many were swapped.
int convert_sync_batchnorm(nn::Module& module, ProcessGroup* group = nullptr);

}  // namespace minidl::dist
