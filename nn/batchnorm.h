// nn/batchnorm.h — BatchNorm1d / BatchNorm2d: normalise each channel over (N, *) with the batch's
// statistics in training (updating running_mean / running_var, unbiased, with `momentum`; a
// momentum of nullopt means a cumulative average over num_batches_tracked) and with the
// running statistics in eval. dist::SyncBatchNorm derives from BatchNormBase.
#pragma once
#include <optional>

#include "nn/module.h"

namespace minidl::nn {

struct BatchNormOptions {
  int64_t num_features = 0;
  double eps = 1e-5;
  std::optional<double> momentum = 0.1;
  bool affine = true;
  bool track_running_stats = true;
};

class BatchNormBase : public Module {
 public:
  explicit BatchNormBase(const BatchNormOptions& o);
  std::string extra_repr() const override;
  Variable forward(const Variable& x) override;
  void reset_running_stats();

  // The factor for this training step's running-stat update (advances num_batches_tracked).
  double next_momentum();
  // Whether forward normalises with batch statistics (training, or no running stats to use).
  bool uses_batch_stats() const { return training_ || !running_mean.defined(); }

  BatchNormOptions options;
  Variable weight, bias;                  // (C) when affine
  Tensor running_mean, running_var;       // (C) when track_running_stats
  Tensor num_batches_tracked;             // int64 0-d

 protected:
  virtual void check_input_dim(const Variable& x) const = 0;
};

class BatchNorm1d : public BatchNormBase {
 public:
  using BatchNormBase::BatchNormBase;
  std::string type_name() const override { return "BatchNorm1d"; }

 protected:
  void check_input_dim(const Variable& x) const override;  // (N, C) or (N, C, L)
};

class BatchNorm2d : public BatchNormBase {
 public:
  using BatchNormBase::BatchNormBase;
  std::string type_name() const override { return "BatchNorm2d"; }

 protected:
  void check_input_dim(const Variable& x) const override;  // (N, C, H, W)
};

}  // namespace minidl::nn
