// examples/trainer/step.h — the trainer's training step, ordinary and --deterministic, and what
// it keeps on the device between host reads: the epoch's sums (metrics.h) and the first step whose
// loss was not finite (NonFiniteWatch). A step queues work only: it reads no value back to the
// host (no item(), no copy to the host; host_read_count() in tensor/tensor.h does not move), so on
// a GPU the host runs ahead of the kernels — except fp16's loss scaler, which reads whether the
// step's gradients were finite (one read per step). The trainer reads the sums and the watch at its checks
// (examples/train.cpp: every tenth of an epoch, before each checkpoint, at the epoch's end).
// Part of the `train` example (examples/train.cpp); not a library module.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "examples/trainer/config.h"
#include "examples/trainer/metrics.h"
#include "minidl/dist/data_parallel.h"
#include "minidl/optim/grad_scaler.h"
#include "minidl/optim/optimizer.h"

namespace trainer {

// The seed of the default generator during step `step` of epoch `epoch` on `rank`: anything
// drawn while training (dropout masks) depends on (seed, epoch, step, rank) only, not on what
// earlier steps drew — so a run resumed at an epoch boundary or mid-epoch draws the same numbers.
uint64_t step_seed(uint64_t seed, int64_t epoch, int64_t step, int rank);
// --deterministic: the seed of the default generator for the micro-shard whose first sample is
// at position `sample` of epoch `epoch`'s order — by sample, never by rank or step layout.
uint64_t shard_seed(uint64_t seed, int64_t epoch, int64_t sample);

// The first step whose loss was not finite, that loss, and how many values of that step's input
// batch and logits were not finite — recorded on the loss's device by tensor ops (isfinite,
// where): add() makes no host read; first() makes one.
class NonFiniteWatch {
 public:
  explicit NonFiniteWatch(minidl::Device device);
  // loss: 0-d; input (B, ...) and logits (B, classes) of the same step, on the same device.
  void add(const minidl::Tensor& loss, const minidl::Tensor& input, const minidl::Tensor& logits, int64_t step);
  struct Found {
    int64_t step;  // the step add() was given
    double loss;  // NaN or +-Inf
    int64_t input_bad, input_numel;  // non-finite values of that step's input batch, of how many
    int64_t logits_bad, logits_numel;
  };
  std::optional<Found> first() const;  // one host read

 private:
  minidl::Tensor state_;  // (6) float64: step (-1 while every loss was finite), loss, the four counts
};

// The autocast dtype of TRAIN.PRECISION: fp32 -> Float32 (autocast off), bf16 -> BFloat16,
// fp16 -> Float16. Both steps run the forward and the loss under minidl::autocast of it
// (autograd/autocast.h); the backward and the optimizer step stay outside, in float32.
minidl::DType autocast_dtype_of(const std::string& precision);

// The loss scaler of TRAIN.PRECISION (optim/grad_scaler.h): enabled for fp16, whose gradients
// pass through float16 and underflow without it; a pass-through for fp32 and bf16 (float32's
// range). Its skip decision is all-reduced over the default group (dist::sync_grad_scaler), so
// every rank skips the same steps. Call after dist::init().
std::unique_ptr<minidl::optim::GradScaler> make_grad_scaler(const std::string& precision);

// One ordinary step: zero_grad, forward through DDP and cross-entropy (mean over this rank's
// batch) under autocast(precision), backward of the scaled loss (DDP all-reduces the gradients),
// ddp.finish, then scaler.step (unscale; the optimizer steps unless a gradient is inf or NaN) and
// scaler.update. The loss and the hits go to `totals`, the loss (with the step's input and
// logits) to `watch` under `global_step`. An enabled scaler reads one flag back per step.
void train_step(minidl::dist::DataParallel& ddp, minidl::optim::Optimizer& optimizer,
                minidl::optim::GradScaler& scaler, const minidl::Tensor& input, const minidl::Tensor& target,
                int64_t global_step, DeviceTotals& totals, NonFiniteWatch& watch, minidl::DType precision);

// --deterministic: one training step as K micro-shards of m samples (dist/deterministic.h). This
// rank's batch is its consecutive run of the step's global batch, the global shards
// [rank n, (rank + 1) n); each shard gets its own forward/backward (of its scaled loss), dropout
// masks keyed by its first sample's position in the epoch, and its sums recorded under its global
// ordinal. ddp.finish adds the K shard gradients in the fixed tree (one all_gather) and divides by
// K; scaler.step and scaler.update as train_step.
void deterministic_step(minidl::dist::DataParallel& ddp, minidl::optim::Optimizer& optimizer,
                        minidl::optim::GradScaler& scaler, const TrainConfig& cfg, int64_t epoch, int64_t step,
                        int64_t global_step, const minidl::Tensor& input, const minidl::Tensor& target,
                        OrderedTotals& totals, NonFiniteWatch& watch);

}  // namespace trainer
