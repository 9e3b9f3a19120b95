// optim/lr_scheduler.cpp — LRScheduler (epoch bookkeeping, state_dict) and the closed-form
// schedules StepLR, MultiStepLR, CosineAnnealingLR and LinearWarmup.
#include "optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

#include "tensor/creation.h"

namespace minidl::optim {

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
  auto value = [&](const std::string& key) {
    auto it = dict.find(key);
    if (it == dict.end()) throw std::invalid_argument(op + "missing key '" + key + "'");
    const Tensor& t = it->second;
    if (!t.defined() || t.dim() != 0 || !t.is_floating_point())
      throw std::invalid_argument(op + "key '" + key + "': expected a 0-d floating tensor, got " +
                                  (t.defined() ? t.desc() : std::string("undefined")));
    return t.item();
  };
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

StepLR::StepLR(Optimizer& optimizer, StepLROptions options) : LRScheduler(optimizer, "StepLR"), options_(options) {
  if (options_.step_size < 1)
    throw std::invalid_argument("StepLR: step_size must be >= 1, got " + std::to_string(options_.step_size));
  initial_step();
}

double StepLR::lr_at(double base_lr, int64_t epoch) const {
  return base_lr * std::pow(options_.gamma, static_cast<double>(epoch / options_.step_size));
}

// ---------------------------------------------------------------- MultiStepLR

MultiStepLR::MultiStepLR(Optimizer& optimizer, MultiStepLROptions options)
    : LRScheduler(optimizer, "MultiStepLR"), options_(std::move(options)) {
  std::sort(options_.milestones.begin(), options_.milestones.end());
  initial_step();
}

double MultiStepLR::lr_at(double base_lr, int64_t epoch) const {
  const auto& m = options_.milestones;
  const auto passed = std::upper_bound(m.begin(), m.end(), epoch) - m.begin();  // bisect_right
  return base_lr * std::pow(options_.gamma, static_cast<double>(passed));
}

// ---------------------------------------------------------------- CosineAnnealingLR

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, CosineAnnealingLROptions options)
    : LRScheduler(optimizer, "CosineAnnealingLR"), options_(options) {
  if (options_.T_max < 1)
    throw std::invalid_argument("CosineAnnealingLR: T_max must be >= 1, got " + std::to_string(options_.T_max));
  initial_step();
}

double CosineAnnealingLR::lr_at(double base_lr, int64_t epoch) const {
  const double eta_min = options_.eta_min;
  return eta_min + (base_lr - eta_min) *
                       (1.0 + std::cos(std::numbers::pi * static_cast<double>(epoch) / static_cast<double>(options_.T_max))) / 2.0;
}

// ---------------------------------------------------------------- LinearWarmup

LinearWarmup::LinearWarmup(Optimizer& optimizer, LinearWarmupOptions options, std::unique_ptr<LRScheduler> after)
    : LRScheduler(optimizer, "LinearWarmup"), options_(options), after_(std::move(after)) {
  if (options_.warmup_steps < 1)
    throw std::invalid_argument("LinearWarmup: warmup_steps must be >= 1, got " + std::to_string(options_.warmup_steps));
  if (!(options_.start_factor > 0.0 && options_.start_factor <= 1.0))
    throw std::invalid_argument("LinearWarmup: start_factor must be in (0, 1], got " +
                                std::to_string(options_.start_factor));
  if (after_ && &after_->optimizer() != &optimizer_)
    throw std::invalid_argument("LinearWarmup: the scheduler to continue with schedules another optimizer");
  initial_step();
}

double LinearWarmup::lr_at(double base_lr, int64_t epoch) const {
  const int64_t warmup = options_.warmup_steps;
  if (epoch < warmup) {
    const double s = options_.start_factor;
    return base_lr * (s + (1.0 - s) * static_cast<double>(epoch) / static_cast<double>(warmup));
  }
  return after_ ? after_->lr_at(base_lr, epoch - warmup) : base_lr;
}

}  // namespace minidl::optim
