// optim/lr_scheduler.h — learning-rate schedules: StepLR, MultiStepLR, CosineAnnealingLR, and
// LinearWarmup, which puts a linear ramp in front of any of them (the ViT recipe: warm-up, then
// cosine). Each schedule is a closed form lr(base_lr, epoch) as in PyTorch's _get_closed_form_lr,
// where base_lr is the group's initial_lr (its lr when the first scheduler was made) and epoch
// counts step() calls. Constructing a scheduler sets epoch 0's lr; step() moves to the next
// epoch and writes the lr of every param group.
//
//   optim::SGD sgd(params, {.lr = 0.1, .momentum = 0.9});
//   optim::StepLR sched(sgd, {.step_size = 5, .gamma = 0.3});   // x0.3 every 5 epochs
//   for (epoch ...) { train_one_epoch(); sched.step(); }
//
//   optim::LinearWarmup sched(adamw, {.warmup_steps = 1, .start_factor = 0.1},
//                             std::make_unique<optim::CosineAnnealingLR>(adamw, optim::CosineAnnealingLROptions{.T_max = 99}));
// Equivalent PyTorch: SequentialLR([LinearLR(start_factor, total_iters=warmup_steps), after],
// milestones=[warmup_steps]). state_dict: "last_epoch" and "base_lrs.<g>" (0-d float64).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "optim/optimizer.h"

namespace minidl::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Next epoch: last_epoch += 1, and every group's lr = lr_at(its base lr, last_epoch).
  void step();
  // The lr of every group as last set by this scheduler.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  const Optimizer& optimizer() const { return optimizer_; }

  // The schedule itself: the lr at `epoch` (>= 0) of a group whose initial lr is base_lr.
  virtual double lr_at(double base_lr, int64_t epoch) const = 0;

  TensorMap state_dict() const;
  // Restores last_epoch and base_lrs and writes the matching lr into every group.
  void load_state_dict(const TensorMap& dict);

 protected:
  LRScheduler(Optimizer& optimizer, const char* name);
  // Called at the end of the most-derived constructor: epoch 0 (lr_at is virtual).
  void initial_step();

  Optimizer& optimizer_;
  const char* name_;

 private:
  void apply();
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  int64_t last_epoch_ = -1;
};

// lr = base_lr * gamma^(epoch / step_size)   (integer division)
struct StepLROptions {
  int64_t step_size = 1;
  double gamma = 0.1;
};
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, StepLROptions options);
  double lr_at(double base_lr, int64_t epoch) const override;

 private:
  StepLROptions options_;
};

// lr = base_lr * gamma^(number of milestones <= epoch)
struct MultiStepLROptions {
  std::vector<int64_t> milestones;
  double gamma = 0.1;
};
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, MultiStepLROptions options);
  double lr_at(double base_lr, int64_t epoch) const override;

 private:
  MultiStepLROptions options_;  // milestones sorted
};

// lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2
struct CosineAnnealingLROptions {
  int64_t T_max = 1;
  double eta_min = 0.0;
};
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, CosineAnnealingLROptions options);
  double lr_at(double base_lr, int64_t epoch) const override;

 private:
  CosineAnnealingLROptions options_;
};

// epoch < warmup_steps:  lr = base_lr * (start_factor + (1 - start_factor) * epoch / warmup_steps)
// afterwards:            lr = after.lr_at(base_lr, epoch - warmup_steps)  (base_lr if no `after`)
struct LinearWarmupOptions {
  int64_t warmup_steps = 1;
  double start_factor = 1.0 / 3.0;  // torch.optim.lr_scheduler.LinearLR's default
};
class LinearWarmup : public LRScheduler {
 public:
  // `after` must schedule the same optimizer (or be null: constant lr after the warm-up).
  LinearWarmup(Optimizer& optimizer, LinearWarmupOptions options, std::unique_ptr<LRScheduler> after = nullptr);
  double lr_at(double base_lr, int64_t epoch) const override;
  const LRScheduler* after() const { return after_.get(); }

 private:
  LinearWarmupOptions options_;
  std::unique_ptr<LRScheduler> after_;
};

}  // namespace minidl::optim
