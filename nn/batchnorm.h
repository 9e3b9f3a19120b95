// nn/batchnorm.h — BatchNorm1d / BatchNorm2d: normalise each channel over (N, *) with the batch's
// statistics in training (updating running_mean / running_var, unbiased, with `momentum`; a
// momentum of nullopt means a cumulative average over num_batches_tracked) and with the
// running statistics in eval. dist::SyncBatchNorm derives from BatchNormBase; for a BatchNorm
// that cannot be swapped for one (a member of a user module), dist::convert_sync_batchnorm
// installs a forward override instead (nn cannot depend on dist, so dist supplies the function).
#pragma once
#include <functional>
#include <optional>
#include <string>

#include "minidl/nn/module.h"

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
  // The override when one is installed, else local_forward.
  Variable forward(const Variable& x) override;
  // This process's batch (or running) statistics only: plain BatchNorm; relu: followed by a
  // ReLU, fused into the same node.
  Variable local_forward(const Variable& x, bool relu = false);
  // relu(forward(x)): fused when no override is installed (Sequential calls it for a BatchNorm
  // followed by a ReLU), else the two ops.
  Variable forward_relu(const Variable& x);
  // max_pool2d(relu(forward(x)), p): one fused node when no override is installed and the
  // statistics are the batch's (autograd's batch_norm_relu_max_pool2d decides which pools and
  // devices it fuses), else forward_relu then the pool.
  Variable forward_relu_max_pool2d(const Variable& x, const Pool2dParams& p);
  // relu(forward(x) + residual), the tail of a residual block: one node (autograd's
  // batch_norm_add_relu) when no override is installed, else the three ops. Called explicitly by a
  // model's forward (never substituted).
  Variable forward_add_relu(const Variable& x, const Variable& residual);
  void reset_running_stats();

  using ForwardOverride = std::function<Variable(BatchNormBase&, const Variable&)>;
  // Replaces forward by fn (which may call local_forward); type_name() becomes `type_name`, and
  // communicates_in_forward() returns `communicates` (true when fn runs collectives).
  void set_forward_override(ForwardOverride fn, std::string type_name, bool communicates);
  bool has_forward_override() const { return static_cast<bool>(override_); }
  bool communicates_in_forward() const override { return override_ && override_communicates_; }

  // The factor for this training step's running-stat update (advances num_batches_tracked).
  double next_momentum();
  // Whether forward normalises with batch statistics (training, or no running stats to use).
  bool uses_batch_stats() const { return training_ || !running_mean.defined(); }
  // The dims (check_input_dim) and the channel count; an error names the layer and the input.
  void check_input(const Variable& x) const;

  BatchNormOptions options;
  Variable weight, bias;  // (C) when affine
  Tensor running_mean, running_var;  // (C) when track_running_stats
  Tensor num_batches_tracked;  // int64 0-d

 protected:
  virtual void check_input_dim(const Variable& x) const = 0;
  // the name to print: the override's when installed, else `own`
  std::string name_or_override(const char* own) const { return override_ ? override_name_ : own; }

 private:
  ForwardOverride override_;
  std::string override_name_;
  bool override_communicates_ = false;
};

class BatchNorm1d : public BatchNormBase {
 public:
  using BatchNormBase::BatchNormBase;
  std::string type_name() const override { return name_or_override("BatchNorm1d"); }

 protected:
  void check_input_dim(const Variable& x) const override;  // (N, C) or (N, C, L)
};

class BatchNorm2d : public BatchNormBase {
 public:
  using BatchNormBase::BatchNormBase;
  std::string type_name() const override { return name_or_override("BatchNorm2d"); }

 protected:
  void check_input_dim(const Variable& x) const override;  // (N, C, H, W)
};

}  // namespace minidl::nn
