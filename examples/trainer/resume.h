// examples/trainer/resume.h — where a training run starts: at the beginning, or where a checkpoint
// left off (--resume FILE, or after a restart the newest complete checkpoint in --out). Every rank
// loads the same file into the model, the optimizer, the GradScaler and the LR scheduler; the data
// order and the random streams are keyed by (seed, epoch, step), so the run continues exactly where
// the uninterrupted one would be. Mid-epoch checkpoints also give back the epoch's partial train
// sums and the lr of its first step. Logs what it did (the file, the position, the load time).
// Part of the `train` example (examples/train.cpp); not a library module.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "examples/trainer/metrics.h"
#include "examples/trainer/progress.h"
#include "minidl/nn/module.h"
#include "minidl/optim/grad_scaler.h"
#include "minidl/optim/lr_scheduler.h"
#include "minidl/optim/optimizer.h"

namespace trainer {

struct ResumeFrom {
  std::optional<std::string> checkpoint;  // none: start at the beginning
  int restart_count = 0;  // > 0: this is a restart (said in the log)
  std::string out_dir;  // the run's --out (its metrics.jsonl loses the epochs trained again)
  int rank = 0, world_size = 1;
  int64_t steps_per_epoch = 1;
  int64_t global_batch_size = 1;  // this run's
  bool bit_identical_on_any_world_size = false;  // the mode's promise (a note when the world changed)
};

struct ResumePoint {
  int64_t epoch = 0;  // epochs completed
  int64_t step = 0;  // optimizer steps done in the next epoch (0 at an epoch boundary)
  Totals train;  // mid-epoch: the train sums of the epoch's first `step` steps
  double epoch_lr = 0;  // mid-epoch: the lr of the epoch's first step
};

// A checkpoint holding non-finite values is a std::runtime_error naming it. One trained on another
// number of processes with another global batch (--batch-size is per process: an elastic restart
// on fewer processes would change the global batch), or saved mid-epoch at a step this run's
// epochs do not have (the data set or the batch size changed), is a UsageError (exit 2: a restart
// would only repeat it) naming the sizes.
ResumePoint resume(const ResumeFrom& from, minidl::nn::Module& model, minidl::optim::Optimizer& optimizer,
                   minidl::optim::GradScaler& scaler, minidl::optim::LRScheduler& scheduler, Log& log);

}  // namespace trainer
