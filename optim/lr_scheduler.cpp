// optim/lr_scheduler.cpp — LRScheduler (epoch bookkeeping, state_dict), the closed-form
// schedules StepLR, MultiStepLR, CosineAnnealingLR, LinearWarmup, LinearLR, SequentialLR and
// OneCycleLR, and ReduceLROnPlateau.
#include "minidl/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <string>

#include "minidl/tensor/creation.h"

namespace minidl::optim {

namespace {
// The value of dict[key], which must be a 0-d floating tensor; errors start with `op`.
double scalar_entry(const TensorMap& dict, const std::string& key, const std::string& op) {
  auto it = dict.find(key);
  if (it == dict.end()) throw std::invalid_argument(op + "missing key '" + key + "'");
  const Tensor& t = it->second;
  if (!t.defined() || t.dim() != 0 || !t.is_floating_point())
    throw std::invalid_argument(op + "key '" + key + "': expected a 0-d floating tensor, got " +
                                (t.defined() ? t.desc() : std::string("undefined")));
  return t.item();
}
}  // namespace

LRScheduler::LRScheduler(Optimizer& optimizer, const char* name) : optimizer_(optimizer), name_(name) {
  // as PyTorch with last_epoch = -1: the first scheduler records each group's initial lr
  for (ParamGroup& group : optimizer_.param_groups()) {
    if (!group.initial_lr) group.initial_lr = group.lr;
    base_lrs_.push_back(*group.initial_lr);
  }
}

void LRScheduler::initial_step() { step(); }

void LRScheduler::step() {
  ++last_epoch_;
  apply();
}

void LRScheduler::apply() {
  std::vector<ParamGroup>& groups = optimizer_.param_groups();
  if (groups.size() != base_lrs_.size())
    throw std::logic_error(std::string(name_) + ".step: the optimizer has " + std::to_string(groups.size()) +
                           " param groups, the scheduler was made for " + std::to_string(base_lrs_.size()));
  last_lr_.resize(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].lr = lr_at(base_lrs_[g], last_epoch_);
    set_other_options(groups[g], last_epoch_);
    last_lr_[g] = groups[g].lr;
  }
}

TensorMap LRScheduler::state_dict() const {
  TensorMap out;
  out["last_epoch"] = scalar_tensor(static_cast<double>(last_epoch_), DType::Float64);
  for (size_t g = 0; g < base_lrs_.size(); ++g)
    out["base_lrs." + std::to_string(g)] = scalar_tensor(base_lrs_[g], DType::Float64);
  return out;
}

void LRScheduler::load_state_dict(const TensorMap& dict) {
  const std::string op = std::string(name_) + ".load_state_dict: ";
  auto value = [&](const std::string& key) { return scalar_entry(dict, key, op); };
  const double epoch = value("last_epoch");
  if (!(epoch >= 0.0) || epoch != std::floor(epoch))
    throw std::invalid_argument(op + "key 'last_epoch': expected a non-negative integer, got " + std::to_string(epoch));
  std::vector<double> base_lrs(base_lrs_.size());
  for (size_t g = 0; g < base_lrs.size(); ++g) base_lrs[g] = value("base_lrs." + std::to_string(g));
  for (const auto& [key, t] : dict) {
    if (key == "last_epoch") continue;
    bool known = false;
    for (size_t g = 0; g < base_lrs.size() && !known; ++g) known = key == "base_lrs." + std::to_string(g);
    if (!known)
      throw std::invalid_argument(op + "unexpected key '" + key + "' (the optimizer has " +
                                  std::to_string(base_lrs.size()) + " param groups)");
  }
  base_lrs_ = std::move(base_lrs);
  last_epoch_ = static_cast<int64_t>(epoch);
  apply();
}

// ---------------------------------------------------------------- StepLR

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer, "StepLR"), step_size_(step_size), gamma_(gamma) {
  if (step_size_ < 1) throw std::invalid_argument("StepLR: step_size must be >= 1, got " + std::to_string(step_size_));
  initial_step();
}

double StepLR::lr_at(double base_lr, int64_t epoch) const {
  return base_lr * std::pow(gamma_, static_cast<double>(epoch / step_size_));
}

// ---------------------------------------------------------------- MultiStepLR

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer, "MultiStepLR"), milestones_(std::move(milestones)), gamma_(gamma) {
  std::sort(milestones_.begin(), milestones_.end());
  initial_step();
}

double MultiStepLR::lr_at(double base_lr, int64_t epoch) const {
  const auto passed =
      std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin();  // bisect_right
  return base_lr * std::pow(gamma_, static_cast<double>(passed));
}

// ---------------------------------------------------------------- CosineAnnealingLR

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer, "CosineAnnealingLR"), T_max_(T_max), eta_min_(eta_min) {
  if (T_max_ < 1) throw std::invalid_argument("CosineAnnealingLR: T_max must be >= 1, got " + std::to_string(T_max_));
  initial_step();
}

double CosineAnnealingLR::lr_at(double base_lr, int64_t epoch) const {
  return eta_min_ + (base_lr - eta_min_) *
                        (1.0 + std::cos(std::numbers::pi * static_cast<double>(epoch) / static_cast<double>(T_max_))) /
                        2.0;
}

// ---------------------------------------------------------------- LinearWarmup

LinearWarmup::LinearWarmup(Optimizer& optimizer, int64_t warmup_steps, double start_factor,
                           std::unique_ptr<LRScheduler> after)
    : LRScheduler(optimizer, "LinearWarmup"),
      warmup_steps_(warmup_steps),
      start_factor_(start_factor),
      after_(std::move(after)) {
  if (warmup_steps_ < 1)
    throw std::invalid_argument("LinearWarmup: warmup_steps must be >= 1, got " + std::to_string(warmup_steps_));
  if (!(start_factor_ > 0.0 && start_factor_ <= 1.0))
    throw std::invalid_argument("LinearWarmup: start_factor must be in (0, 1], got " + std::to_string(start_factor_));
  if (after_ && &after_->optimizer() != &optimizer_)
    throw std::invalid_argument("LinearWarmup: the scheduler to continue with schedules another optimizer");
  initial_step();
}

double LinearWarmup::lr_at(double base_lr, int64_t epoch) const {
  if (epoch < warmup_steps_) {
    const double s = start_factor_;
    return base_lr * (s + (1.0 - s) * static_cast<double>(epoch) / static_cast<double>(warmup_steps_));
  }
  return after_ ? after_->lr_at(base_lr, epoch - warmup_steps_) : base_lr;
}

// ---------------------------------------------------------------- LinearLR

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(optimizer, "LinearLR"),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_iters_(total_iters) {
  if (!(start_factor_ > 0.0 && start_factor_ <= 1.0))
    throw std::invalid_argument("LinearLR: start_factor must be in (0, 1], got " + std::to_string(start_factor_));
  if (!(end_factor_ >= 0.0 && end_factor_ <= 1.0))
    throw std::invalid_argument("LinearLR: end_factor must be in [0, 1], got " + std::to_string(end_factor_));
  if (total_iters_ < 1)
    throw std::invalid_argument("LinearLR: total_iters must be >= 1, got " + std::to_string(total_iters_));
  initial_step();
}

double LinearLR::lr_at(double base_lr, int64_t epoch) const {
  const double t = static_cast<double>(std::min(epoch, total_iters_)) / static_cast<double>(total_iters_);
  return base_lr * (start_factor_ + (end_factor_ - start_factor_) * t);
}

// ---------------------------------------------------------------- SequentialLR

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::unique_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer, "SequentialLR"), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  if (schedulers_.empty()) throw std::invalid_argument("SequentialLR: got no schedulers");
  if (milestones_.size() + 1 != schedulers_.size())
    throw std::invalid_argument("SequentialLR: expected " + std::to_string(schedulers_.size() - 1) +
                                " milestones for " + std::to_string(schedulers_.size()) + " schedulers, got " +
                                std::to_string(milestones_.size()));
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    if (!schedulers_[i]) throw std::invalid_argument("SequentialLR: scheduler " + std::to_string(i) + " is null");
    if (&schedulers_[i]->optimizer() != &optimizer_)
      throw std::invalid_argument("SequentialLR: scheduler " + std::to_string(i) + " schedules another optimizer");
  }
  for (size_t i = 0; i < milestones_.size(); ++i)
    if (milestones_[i] < 1 || (i > 0 && milestones_[i] <= milestones_[i - 1]))
      throw std::invalid_argument("SequentialLR: milestones must be positive and increasing, got " +
                                  std::to_string(milestones_[i]) + " at position " + std::to_string(i));
  initial_step();
}

double SequentialLR::lr_at(double base_lr, int64_t epoch) const {
  const size_t i =
      static_cast<size_t>(std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin());
  return schedulers_[i]->lr_at(base_lr, epoch - (i == 0 ? 0 : milestones_[i - 1]));
}

// ---------------------------------------------------------------- OneCycleLR

OneCycleLR::OneCycleLR(Optimizer& optimizer, OneCycleLROptions options)
    : LRScheduler(optimizer, "OneCycleLR"), options_(options) {
  const OneCycleLROptions& o = options_;
  if (o.total_steps < 1)
    throw std::invalid_argument("OneCycleLR: total_steps must be >= 1, got " + std::to_string(o.total_steps));
  if (!(o.pct_start >= 0.0 && o.pct_start <= 1.0))
    throw std::invalid_argument("OneCycleLR: pct_start must be in [0, 1], got " + std::to_string(o.pct_start));
  if (!(o.max_lr > 0.0 && o.div_factor > 0.0 && o.final_div_factor > 0.0))
    throw std::invalid_argument("OneCycleLR: max_lr, div_factor and final_div_factor must be positive");
  if (o.cycle_momentum) {
    if (!optimizer_.has_momentum())
      throw std::invalid_argument("OneCycleLR: cycle_momentum needs an optimizer with a momentum (" +
                                  optimizer_.name() +
                                  " here has none: SGD needs momentum > 0); pass .cycle_momentum = false");
    if (!(o.base_momentum >= 0.0 && o.base_momentum < 1.0 && o.max_momentum >= 0.0 && o.max_momentum < 1.0))
      throw std::invalid_argument("OneCycleLR: base_momentum and max_momentum must be in [0, 1), got " +
                                  std::to_string(o.base_momentum) + " and " + std::to_string(o.max_momentum));
  }
  const double initial = o.max_lr / o.div_factor, min_lr = initial / o.final_div_factor;
  const double total = static_cast<double>(o.total_steps), up = o.pct_start * total;
  const double lo = o.base_momentum, hi = o.max_momentum;
  if (o.three_phase)
    phases_ = {{up - 1, initial, o.max_lr, hi, lo},
               {2 * up - 2, o.max_lr, initial, lo, hi},
               {total - 1, initial, min_lr, hi, hi}};
  else
    phases_ = {{up - 1, initial, o.max_lr, hi, lo}, {total - 1, o.max_lr, min_lr, lo, hi}};
  for (ParamGroup& g : optimizer_.param_groups()) g.initial_lr = initial;  // as torch records it
  initial_step();
}

std::pair<const OneCycleLR::Phase*, double> OneCycleLR::phase_at(int64_t epoch) const {
  if (epoch > options_.total_steps)
    throw std::invalid_argument("OneCycleLR: tried to step " + std::to_string(epoch) +
                                " times; the specified number of total steps is " +
                                std::to_string(options_.total_steps));
  const double step = static_cast<double>(epoch);
  double start = 0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& p = phases_[i];
    if (step <= p.end_step || i + 1 == phases_.size()) return {&p, (step - start) / (p.end_step - start)};
    start = p.end_step;
  }
  return {&phases_.back(), 1.0};
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (options_.cos_anneal) return end + (start - end) / 2.0 * (std::cos(std::numbers::pi * pct) + 1.0);
  return (end - start) * pct + start;
}

double OneCycleLR::lr_at(double, int64_t epoch) const {
  const auto [phase, pct] = phase_at(epoch);
  return anneal(phase->start_lr, phase->end_lr, pct);
}

void OneCycleLR::set_other_options(ParamGroup& group, int64_t epoch) const {
  if (!options_.cycle_momentum) return;
  const auto [phase, pct] = phase_at(epoch);
  group.momentum = anneal(phase->start_momentum, phase->end_momentum, pct);
}

// ---------------------------------------------------------------- ReduceLROnPlateau

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options)
    : optimizer_(optimizer), options_(options) {
  if (!(options_.factor < 1.0 && options_.factor >= 0.0))
    throw std::invalid_argument("ReduceLROnPlateau: factor must be in [0, 1), got " + std::to_string(options_.factor));
  if (options_.patience < 0 || options_.cooldown < 0)
    throw std::invalid_argument("ReduceLROnPlateau: patience and cooldown must be >= 0");
  best_ = options_.mode_max ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  for (const ParamGroup& g : optimizer_.param_groups()) last_lr_.push_back(g.lr);
}

bool ReduceLROnPlateau::is_better(double a) const {
  const double t = options_.threshold;
  if (!options_.mode_max) return options_.threshold_abs ? a < best_ - t : a < best_ * (1.0 - t);
  return options_.threshold_abs ? a > best_ + t : a > best_ * (1.0 + t);
}

void ReduceLROnPlateau::step(double metric) {
  ++last_epoch_;
  if (is_better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;  // bad epochs in cooldown do not count
  }
  if (num_bad_epochs_ > options_.patience) {
    for (ParamGroup& g : optimizer_.param_groups()) {
      const double new_lr = std::max(g.lr * options_.factor, options_.min_lr);
      if (g.lr - new_lr > options_.eps) g.lr = new_lr;
    }
    cooldown_counter_ = options_.cooldown;
    num_bad_epochs_ = 0;
  }
  last_lr_.clear();
  for (const ParamGroup& g : optimizer_.param_groups()) last_lr_.push_back(g.lr);
}

TensorMap ReduceLROnPlateau::state_dict() const {
  TensorMap out;
  out["best"] = scalar_tensor(best_, DType::Float64);
  out["num_bad_epochs"] = scalar_tensor(static_cast<double>(num_bad_epochs_), DType::Float64);
  out["cooldown_counter"] = scalar_tensor(static_cast<double>(cooldown_counter_), DType::Float64);
  out["last_epoch"] = scalar_tensor(static_cast<double>(last_epoch_), DType::Float64);
  return out;
}

void ReduceLROnPlateau::load_state_dict(const TensorMap& dict) {
  const std::string op = "ReduceLROnPlateau.load_state_dict: ";
  const char* keys[] = {"best", "num_bad_epochs", "cooldown_counter", "last_epoch"};
  double v[4];
  for (int k = 0; k < 4; ++k) {
    v[k] = scalar_entry(dict, keys[k], op);
    // the three counters are non-negative integers; best may be +-inf (no metric seen yet), not NaN
    if (k > 0 ? !(v[k] >= 0.0 && v[k] == std::floor(v[k]) && v[k] < 9e15) : std::isnan(v[k]))
      throw std::invalid_argument(op + "key '" + keys[k] + "': invalid value " + std::to_string(v[k]));
  }
  for (const auto& entry : dict)
    if (std::find(std::begin(keys), std::end(keys), entry.first) == std::end(keys))
      throw std::invalid_argument(op + "unexpected key '" + entry.first + "'");
  best_ = v[0];
  num_bad_epochs_ = static_cast<int64_t>(v[1]);
  cooldown_counter_ = static_cast<int64_t>(v[2]);
  last_epoch_ = static_cast<int64_t>(v[3]);
  last_lr_.clear();
  for (const ParamGroup& g : optimizer_.param_groups()) last_lr_.push_back(g.lr);
}

}  // namespace minidl::optim
