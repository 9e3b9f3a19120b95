// optim/lr_scheduler.h — learning-rate schedules: StepLR, MultiStepLR, CosineAnnealingLR, LinearLR,
// OneCycleLR, SequentialLR (one schedule after another at milestones), LinearWarmup, which puts a
// linear ramp in front of any of them (the ViT recipe: warm-up, then cosine), and
// ReduceLROnPlateau, which reacts to a metric instead of following a formula. Each schedule is a
// closed form lr(base_lr, epoch) as in PyTorch's _get_closed_form_lr, where base_lr is the
// group's initial_lr (its lr when the first scheduler was made) and epoch counts step() calls.
// Constructing a scheduler sets epoch 0's lr; step() moves to the next epoch and writes the lr of
// every param group.
//
// The closed-form schedules take their values as PyTorch's do, in its order and with its defaults
// (StepLR(optimizer, step_size, gamma=0.1)); OneCycleLR and ReduceLROnPlateau, with many more,
// take an options struct.
//
//   optim::SGD sgd(params, {.lr = 0.1, .momentum = 0.9});
//   optim::StepLR sched(sgd, /*step_size=*/5, /*gamma=*/0.3);   // x0.3 every 5 epochs
//   for (epoch ...) { train_one_epoch(); sched.step(); }
//
//   optim::LinearWarmup sched(adamw, /*warmup_steps=*/1, /*start_factor=*/0.1,
//                             std::make_unique<optim::CosineAnnealingLR>(adamw, /*T_max=*/99));
// Equivalent PyTorch: SequentialLR([LinearLR(start_factor, total_iters=warmup_steps), after],
// milestones=[warmup_steps]). state_dict: "last_epoch" and "base_lrs.<g>" (0-d float64).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "minidl/optim/optimizer.h"

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
  // A scheduler that also sets options other than the lr (OneCycleLR's momentum) does it here;
  // called for every group right after its lr is set for `epoch`.
  virtual void set_other_options(ParamGroup& group, int64_t epoch) const {
    (void)group;
    (void)epoch;
  }

  Optimizer& optimizer_;
  const char* name_;

 private:
  void apply();
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  int64_t last_epoch_ = -1;
};

// lr = base_lr * gamma^(epoch / step_size)   (integer division)
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  double lr_at(double base_lr, int64_t epoch) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr = base_lr * gamma^(number of milestones <= epoch)   (milestones in any order)
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);
  double lr_at(double base_lr, int64_t epoch) const override;

 private:
  std::vector<int64_t> milestones_;  // sorted
  double gamma_;
};

// lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);
  double lr_at(double base_lr, int64_t epoch) const override;

 private:
  int64_t T_max_;
  double eta_min_;
};

// epoch < warmup_steps:  lr = base_lr * (start_factor + (1 - start_factor) * epoch / warmup_steps)
// afterwards:            lr = after.lr_at(base_lr, epoch - warmup_steps)  (base_lr if no `after`)
// (start_factor's default is torch.optim.lr_scheduler.LinearLR's.)
class LinearWarmup : public LRScheduler {
 public:
  // `after` must schedule the same optimizer (or be null: constant lr after the warm-up).
  LinearWarmup(Optimizer& optimizer, int64_t warmup_steps, double start_factor = 1.0 / 3.0,
               std::unique_ptr<LRScheduler> after = nullptr);
  double lr_at(double base_lr, int64_t epoch) const override;
  const LRScheduler* after() const { return after_.get(); }

 private:
  int64_t warmup_steps_;
  double start_factor_;
  std::unique_ptr<LRScheduler> after_;
};

// lr = base_lr * (start_factor + (end_factor - start_factor) * min(epoch, total_iters) / total_iters)
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3.0, double end_factor = 1.0, int64_t total_iters = 5);
  double lr_at(double base_lr, int64_t epoch) const override;

 private:
  double start_factor_, end_factor_;
  int64_t total_iters_;
};

// schedulers[i] runs from milestones[i - 1] (0 for the first), counting its epochs from there:
// lr = schedulers[i].lr_at(base_lr, epoch - milestones[i - 1]), as torch's SequentialLR.
class SequentialLR : public LRScheduler {
 public:
  // every scheduler must schedule `optimizer`; milestones: schedulers.size() - 1 increasing epochs
  SequentialLR(Optimizer& optimizer, std::vector<std::unique_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  double lr_at(double base_lr, int64_t epoch) const override;

 private:
  std::vector<std::unique_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

// The 1cycle policy (torch's OneCycleLR, stepped once per batch): from max_lr / div_factor up to
// max_lr over pct_start of total_steps, then down to max_lr / div_factor / final_div_factor
// (three_phase: up, back down to the start, then to the minimum). It ignores the optimizer's lr:
// every group follows the same curve, and its initial_lr becomes max_lr / div_factor. With
// cycle_momentum (the default, as in torch) each group's momentum (SGD's momentum, Adam's beta1;
// ParamGroup::momentum) moves the other way, from max_momentum down to base_momentum while the lr
// rises and back up while it falls (three_phase: down, up, then held at max_momentum); an
// optimizer without one (SGD with momentum 0) is an error then. Stepping past total_steps throws.
struct OneCycleLROptions {
  double max_lr = 0.1;
  int64_t total_steps = 0;
  double pct_start = 0.3;
  bool cos_anneal = true;  // false: linear (anneal_strategy='linear')
  double div_factor = 25.0;
  double final_div_factor = 1e4;
  bool three_phase = false;
  bool cycle_momentum = true;
  double base_momentum = 0.85;
  double max_momentum = 0.95;
};
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, OneCycleLROptions options);
  double lr_at(double base_lr, int64_t epoch) const override;

 protected:
  void set_other_options(ParamGroup& group, int64_t epoch) const override;

 private:
  struct Phase {
    double end_step, start_lr, end_lr, start_momentum, end_momentum;
  };
  // The phase `epoch` falls in and how far through it (0..1).
  std::pair<const Phase*, double> phase_at(int64_t epoch) const;
  double anneal(double start, double end, double pct) const;
  OneCycleLROptions options_;
  std::vector<Phase> phases_;
};

// Multiplies every group's lr by `factor` (not below min_lr) when the metric given to step() has
// not improved for more than `patience` calls, then waits `cooldown` calls; as torch's.
struct ReduceLROnPlateauOptions {
  bool mode_max = false;  // false: lower is better ('min'); true: higher is better ('max')
  double factor = 0.1;
  int64_t patience = 10;
  double threshold = 1e-4;
  bool threshold_abs = false;  // false: relative ('rel'), true: absolute ('abs')
  int64_t cooldown = 0;
  double min_lr = 0.0;
  double eps = 1e-8;  // smaller lr changes are skipped
};
class ReduceLROnPlateau {
 public:
  ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options = {});
  void step(double metric);
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  // "best", "num_bad_epochs", "cooldown_counter", "last_epoch" (0-d float64). The lrs themselves
  // live in the optimizer's state_dict, as in PyTorch: restore both to resume.
  TensorMap state_dict() const;
  // Throws std::invalid_argument naming the key for a missing, unexpected or malformed entry;
  // the scheduler is unchanged then.
  void load_state_dict(const TensorMap& dict);

 private:
  bool is_better(double a) const;
  Optimizer& optimizer_;
  ReduceLROnPlateauOptions options_;
  double best_;
  int64_t num_bad_epochs_ = 0, cooldown_counter_ = 0, last_epoch_ = 0;
  std::vector<double> last_lr_;
};

}  // namespace minidl::optim
