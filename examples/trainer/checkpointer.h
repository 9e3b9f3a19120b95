// examples/trainer/checkpointer.h — when `train` saves a checkpoint and what it records besides
// the tensors (the files themselves: checkpoint.h; which to keep: checkpoint_policy.h):
//  - at the end of every --save-every-th epoch and of the last one: checkpoint_epoch_NNN and
//    checkpoint_last (rank 0, after validation, holding its result);
//  - mid-epoch, --save-every-steps K every K global steps, --save-every-minutes M at the first
//    check once M minutes have passed since the last checkpoint (or the start): checkpoint_step_N
//    and checkpoint_last, holding the data position and the epoch's partial train sums; the newest
//    three step checkpoints are kept. For M only rank 0's clock counts: it broadcasts its decision
//    at every check, so all ranks enter the save's collectives at the same step (clocks read on
//    each rank could disagree by a step, leaving one rank in the save's all-reduce and the others
//    in the next step's).
// A model holding a non-finite value is never saved: the run stops, naming the tensor, and the
// last good checkpoint stays. Metadata: model, epoch, step, global_step, samples_seen_in_epoch,
// global_batch_size, config, seed, rng (how every random stream is keyed), next_step_rng_seed, world_size, the last
// validation (val_loss, val_acc1, val_acc5, val_correct1, val_count); mid-epoch also train_*
// sums and epoch_lr as exact doubles. Part of the `train` example; not a library module.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

#include "examples/trainer/config.h"
#include "examples/trainer/metrics.h"
#include "examples/trainer/mode.h"
#include "examples/trainer/progress.h"
#include "examples/trainer/step.h"
#include "minidl/nn/module.h"
#include "minidl/optim/grad_scaler.h"
#include "minidl/optim/lr_scheduler.h"
#include "minidl/optim/optimizer.h"

namespace trainer {

class Checkpointer {
 public:
  struct Run {
    const TrainConfig& config;
    std::string out_dir;
    int rank = 0, world_size = 1;
    int64_t steps_per_epoch = 1;
    minidl::Device device;
    minidl::nn::Module& model;
    minidl::optim::Optimizer& optimizer;
    minidl::optim::GradScaler& scaler;
    minidl::optim::LRScheduler& scheduler;
    Mode& mode;
    Log& log;
  };
  explicit Checkpointer(const Run& run);

  // Checks happen every check_every() steps (a tenth of an epoch), before each mid-epoch
  // checkpoint and at an epoch's last step.
  int64_t check_every() const { return check_every_; }
  // After `step` steps of epoch `epoch` (0-based): is a mid-epoch checkpoint due? Every rank
  // calls it after every step (with --save-every-minutes a collective at every check).
  bool mid_epoch_due(int64_t epoch, int64_t step);
  // Every rank (the epoch's partial sums are a collective); rank 0 writes. val: the last
  // validation result; epoch_lr: the lr of the epoch's first step.
  void save_mid_epoch(int64_t epoch, int64_t step, double epoch_lr, const Totals& val);
  // Rank 0 only, after validating epoch `epochs_done` (1-based): saves when it is a
  // --save-every epoch or the last. Every rank then calls epoch_done().
  void save_epoch_end(int64_t epochs_done, const Totals& val);
  void epoch_done(int64_t epochs_done);

 private:
  bool saves_after_epoch(int64_t epochs_done) const;
  bool minutes_passed();
  void check_finite(const std::string& when) const;
  minidl::Metadata metadata(int64_t epochs_done, int64_t step, const Totals& val, const Totals* partial,
                            double epoch_lr) const;
  void save(const std::string& name, const minidl::Metadata& meta) const;

  Run run_;
  int64_t check_every_;
  std::chrono::steady_clock::time_point last_checkpoint_ = std::chrono::steady_clock::now();
};

// A non-finite loss at step bad.step, found by the check at step `now` (the watch recorded the
// step, the loss and the non-finite counts of that step's input batch and logits on the device;
// the check reads them): names the first non-finite tensor of that step (the input, else the
// logits), what the model holds now, and stops this rank, which stops the run. Every checkpoint
// is preceded by a check, so none was saved since the loss went bad: the last good one stays.
[[noreturn]] void fail_non_finite(const NonFiniteWatch::Found& bad, int64_t now, const minidl::nn::Module& model,
                                  const std::string& out_dir);

}  // namespace trainer
