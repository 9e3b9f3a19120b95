// examples/trainer/checkpoint.h — training checkpoints: one file holding everything a run needs
// to continue bit for bit, written by rank 0 with the library's one call (tensor/checkpoint.h:
// safetensors, atomic, CRC-32 of the tensor bytes checked on load):
//   model.<name>       the model's state_dict (parameters and buffers, DDP-free names)
//   optimizer.<key>    the optimizer's state_dict (momentum buffers, Adam moments, steps, lrs)
//   scheduler.<key>    the LR scheduler's state_dict (iterations done, base lrs)
//   scaler.<key>       the GradScaler's state_dict (fp16: scale, growth tracker, factors; a
//                      disabled scaler's part is empty)
//   metadata           format, model, epoch (epochs completed), step (optimizer steps done in the
//                      epoch after those; 0 at an epoch boundary), config (the YAML recipe), seed
//                      and how every random stream is keyed from it, world_size, and the
//                      validation result of the last completed epoch (val_loss, val_acc1, val_acc5,
//                      val_correct1, val_count). A mid-epoch checkpoint (--save-every-steps/-minutes)
//                      also holds the data position (samples consumed in the epoch: step x global
//                      batch), the RNG key of the next step, and the partial train sums of the
//                      epoch (train_*, exact doubles); and the library's checkpoint_parts and
//                      tensor_crc32 (a file whose bytes do not match it is refused as corrupt).
// Part of the `train` example (examples/train.cpp); not a library module.
#pragma once
#include <compare>
#include <cstdint>
#include <string>

#include "minidl/nn/module.h"
#include "minidl/optim/grad_scaler.h"
#include "minidl/optim/lr_scheduler.h"
#include "minidl/optim/optimizer.h"
#include "minidl/tensor/checkpoint.h"

namespace trainer {

struct Checkpoint {
  minidl::TensorMap model, optim, scaler, sched;  // scaler: empty unless the run used fp16
  minidl::Metadata metadata;
  int64_t epoch = 0;  // epochs completed
  int64_t step = 0;  // optimizer steps done in epoch `epoch` (0-based) after those; 0: at a boundary
};

void save_checkpoint(const std::string& path, const minidl::nn::Module& model,
                     const minidl::optim::Optimizer& optimizer, const minidl::optim::GradScaler& scaler,
                     const minidl::optim::LRScheduler& scheduler, const minidl::Metadata& metadata);
// Reads, verifies and splits a checkpoint; a file that is not one (no "model." tensors, no epoch,
// an epoch that is not a number >= 0) or whose tensor bytes do not match its tensor_crc32 is a
// std::runtime_error naming it.
Checkpoint load_checkpoint(const std::string& path);
// The first tensor (in name order) holding a NaN or an infinity, as
// "fc1.weight (3 of 1024 values are not finite)", or "" when every value is finite.
std::string first_non_finite(const minidl::TensorMap& tensors);
// Checks a model state_dict before it is used or saved: one holding a NaN or an infinity is a
// std::runtime_error "<what> holds non-finite values (model.<first_non_finite>): <refusal>"
// (no ": <refusal>" when it is empty).
void require_finite(const minidl::TensorMap& model, const std::string& what, const std::string& refusal = "");
// Only the YAML recipe stored in a checkpoint (for --resume / --eval).
std::string read_checkpoint_config(const std::string& path);

// Where in training a checkpoint was taken, read from its header alone (no tensor bytes): for
// choosing the newest of many checkpoints. Ordered by progress (epoch, then step).
struct CheckpointPosition {
  int64_t epoch = 0, step = 0;
  auto operator<=>(const CheckpointPosition&) const = default;
};
// A file that is not a `train` checkpoint, or whose header cannot be read, is a
// std::runtime_error naming it.
CheckpointPosition read_checkpoint_position(const std::string& path);

}  // namespace trainer
