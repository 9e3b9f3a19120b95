// optim/grad_scaler.cpp — GradScaler: option checks, unscale_ with the inf/NaN check, step,
// update (torch's _amp_update_scale_), state_dict / load_state_dict.
#include "minidl/optim/grad_scaler.h"

#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

#include "minidl/autograd/ops.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/ops.h"

namespace minidl::optim {

namespace {

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// The first bad option, named, or an empty string.
std::string option_error(const GradScalerOptions& o) {
  if (!(o.init_scale > 0.0) || !std::isfinite(o.init_scale))
    return "init_scale must be a finite number > 0, got " + num(o.init_scale);
  if (!(o.growth_factor > 1.0) || !std::isfinite(o.growth_factor))
    return "growth_factor must be a finite number > 1, got " + num(o.growth_factor);
  if (!(o.backoff_factor > 0.0 && o.backoff_factor < 1.0))
    return "backoff_factor must be in (0, 1), got " + num(o.backoff_factor);
  if (o.growth_interval < 1) return "growth_interval must be >= 1, got " + std::to_string(o.growth_interval);
  return "";
}

GradScalerOptions checked(const GradScalerOptions& o) {
  if (const std::string e = option_error(o); !e.empty()) throw std::invalid_argument("GradScaler: " + e);
  return o;
}

// 0-d: 1 when g holds an inf or NaN, else 0, in g's dtype and on its device (no host read).
// isfinite is 1 or 0 per element, so max(-isfinite) is 0 exactly when some element is not finite.
Tensor has_non_finite(const Tensor& g) { return add(max(neg(isfinite(g))), 1.0); }

}  // namespace

GradScaler::GradScaler(const GradScalerOptions& options)
    : options_(checked(options)), scale_(static_cast<float>(options.init_scale)) {}

Variable GradScaler::scale(const Variable& loss) const {
  if (!options_.enabled) return loss;
  return mul(loss, static_cast<double>(scale_));
}

void GradScaler::unscale_(Optimizer& optimizer) {
  if (!options_.enabled) return;
  OptimizerRecord& record = records_[&optimizer];
  if (record.stage == Stage::Unscaled)
    throw std::logic_error("GradScaler: unscale_() has already been called on this optimizer since the last update()");
  if (record.stage == Stage::Stepped) throw std::logic_error("GradScaler: unscale_() is being called after step()");

  // torch: the reciprocal in float64, rounded to float32
  const double inv_scale = static_cast<float>(1.0 / static_cast<double>(scale_));
  NoGradGuard no_grad;
  Tensor found;  // float64 0-d, 1 once a gradient held an inf or NaN
  for (ParamGroup& group : optimizer.param_groups()) {
    for (Variable& p : group.params) {
      Tensor& g = p.grad();
      if (!g.defined() || g.numel() == 0) continue;
      if (!g.is_floating_point())
        throw std::invalid_argument("GradScaler.unscale_: a gradient is " + g.desc() + "; expected a floating tensor");
      const Tensor bad = has_non_finite(g).to(DType::Float64);
      found = found.defined() ? maximum(found, bad.to(found.device())) : bad;
      mul_(g, inv_scale);
    }
  }
  const bool local = found.defined() && found.item() != 0.0;  // the one host read
  record.found_inf = reducer_ ? reducer_(local) : local;
  record.stage = Stage::Unscaled;
}

bool GradScaler::step(Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  if (records_[&optimizer].stage == Stage::Stepped)
    throw std::logic_error("GradScaler: step() has already been called since the last update()");
  if (records_[&optimizer].stage == Stage::Ready) unscale_(optimizer);
  OptimizerRecord& record = records_[&optimizer];
  record.stage = Stage::Stepped;
  if (record.found_inf) return false;
  optimizer.step();
  return true;
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!options_.enabled) return;
  if (new_scale) {
    if (!(*new_scale > 0.0) || !std::isfinite(*new_scale))
      throw std::invalid_argument("GradScaler.update: new_scale must be a finite number > 0, got " + num(*new_scale));
    scale_ = static_cast<float>(*new_scale);
  } else {
    if (records_.empty())
      throw std::logic_error("GradScaler: update() found no inf checks since the last update(); call step() first");
    bool found_inf = false;
    for (const auto& [opt, record] : records_) found_inf = found_inf || record.found_inf;
    // torch's _amp_update_scale_: the products in double, stored as float32
    if (found_inf) {
      scale_ = static_cast<float>(static_cast<double>(scale_) * options_.backoff_factor);
      growth_tracker_ = 0;
    } else if (growth_tracker_ + 1 == options_.growth_interval) {
      const float grown = static_cast<float>(static_cast<double>(scale_) * options_.growth_factor);
      if (std::isfinite(grown)) scale_ = grown;
      growth_tracker_ = 0;
    } else {
      ++growth_tracker_;
    }
  }
  records_.clear();
}

double GradScaler::get_scale() const { return options_.enabled ? static_cast<double>(scale_) : 1.0; }

TensorMap GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  auto scalar64 = [](double v) { return scalar_tensor(v, DType::Float64); };
  return {{"scale", scalar64(scale_)},
          {"growth_factor", scalar64(options_.growth_factor)},
          {"backoff_factor", scalar64(options_.backoff_factor)},
          {"growth_interval", scalar64(static_cast<double>(options_.growth_interval))},
          {"_growth_tracker", scalar64(static_cast<double>(growth_tracker_))}};
}

void GradScaler::load_state_dict(const TensorMap& dict) {
  if (!options_.enabled) return;
  const std::string op = "GradScaler.load_state_dict: ";
  if (dict.empty())
    throw std::invalid_argument(op + "the state dict is empty (a disabled GradScaler saves an empty one)");
  auto value = [&](const char* key) {
    const auto it = dict.find(key);
    if (it == dict.end()) throw std::invalid_argument(op + "key '" + key + "' is missing");
    const Tensor& t = it->second;
    if (!t.defined() || t.dim() != 0 || !t.is_floating_point())
      throw std::invalid_argument(op + "key '" + key + "': expected a 0-d floating tensor, got " +
                                  (t.defined() ? t.desc() : "an undefined tensor"));
    return t.item();
  };
  auto integer = [&](const char* key) {
    const double v = value(key);
    if (v != std::floor(v) || !(std::fabs(v) < 9.0e15))
      throw std::invalid_argument(op + "key '" + key + "': expected an integer, got " + num(v));
    return static_cast<int64_t>(v);
  };
  for (const auto& [key, t] : dict)
    if (key != "scale" && key != "growth_factor" && key != "backoff_factor" && key != "growth_interval" &&
        key != "_growth_tracker")
      throw std::invalid_argument(op + "unknown key '" + key + "'");

  GradScalerOptions loaded = options_;
  loaded.init_scale = value("scale");
  loaded.growth_factor = value("growth_factor");
  loaded.backoff_factor = value("backoff_factor");
  loaded.growth_interval = integer("growth_interval");
  if (const std::string e = option_error(loaded); !e.empty()) {
    const std::string option = e.substr(0, e.find(' '));
    throw std::invalid_argument(op + "key '" + (option == "init_scale" ? "scale" : option) + "': " + e);
  }
  const int64_t tracker = integer("_growth_tracker");
  if (tracker < 0 || tracker >= loaded.growth_interval)
    throw std::invalid_argument(op + "key '_growth_tracker': expected 0 <= _growth_tracker < growth_interval (" +
                                std::to_string(loaded.growth_interval) + "), got " + std::to_string(tracker));

  options_.growth_factor = loaded.growth_factor;
  options_.backoff_factor = loaded.backoff_factor;
  options_.growth_interval = loaded.growth_interval;
  scale_ = static_cast<float>(loaded.init_scale);
  growth_tracker_ = tracker;
}

}  // namespace minidl::optim
