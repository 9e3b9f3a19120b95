// optim/optimizer.cpp — Optimizer: parameter groups, zero_grad, state_dict / load_state_dict.
#include "minidl/optim/optimizer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>
#include <stdexcept>
#include <unordered_set>

#include "minidl/tensor/creation.h"

namespace minidl::optim {

namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// "123" -> 123; anything else (empty, sign, trailing characters) -> nullopt
std::optional<int64_t> parse_index(const std::string& s) {
  if (s.empty()) return std::nullopt;
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

Tensor scalar64(double v) { return scalar_tensor(v, DType::Float64); }

}  // namespace

Optimizer::Optimizer(std::string name, std::vector<ParamGroupSpec> groups, double default_lr,
                     double default_weight_decay)
    : name_(std::move(name)) {
  const std::string op = name_ + ": ";
  if (groups.empty()) throw std::invalid_argument(op + "got no parameter groups");
  if (!(default_lr >= 0.0)) throw std::invalid_argument(op + "invalid learning rate " + num(default_lr));
  if (!(default_weight_decay >= 0.0))
    throw std::invalid_argument(op + "invalid weight_decay " + num(default_weight_decay));
  std::unordered_set<const VariableImpl*> seen;
  int64_t total = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    ParamGroupSpec& spec = groups[g];
    const std::string where = op + "param group " + std::to_string(g) + ": ";
    ParamGroup group;
    group.lr = spec.lr.value_or(default_lr);
    group.weight_decay = spec.weight_decay.value_or(default_weight_decay);
    if (!(group.lr >= 0.0)) throw std::invalid_argument(where + "invalid learning rate " + num(group.lr));
    if (!(group.weight_decay >= 0.0))
      throw std::invalid_argument(where + "invalid weight_decay " + num(group.weight_decay));
    for (size_t j = 0; j < spec.params.size(); ++j) {
      const Variable& p = spec.params[j];
      if (!p.defined()) throw std::invalid_argument(where + "parameter " + std::to_string(j) + " is undefined");
      if (!p.data().is_floating_point())
        throw std::invalid_argument(where + "parameter " + std::to_string(j) + " is " + p.data().desc() +
                                    "; only floating tensors can be optimized");
      if (!seen.insert(p.impl()).second)
        throw std::invalid_argument(where + "parameter " + std::to_string(j) +
                                    " appears more than once (in this or an earlier group)");
    }
    total += static_cast<int64_t>(spec.params.size());
    group.params = std::move(spec.params);
    groups_.push_back(std::move(group));
  }
  if (total == 0) throw std::invalid_argument(op + "got an empty parameter list");
  state_.resize(total);
}

void Optimizer::zero_grad(bool set_to_none) {
  for (ParamGroup& group : groups_)
    for (Variable& p : group.params) p.zero_grad(set_to_none);
}

const ParamState& Optimizer::state(int64_t i) const {
  if (i < 0 || i >= num_params())
    throw std::out_of_range(name_ + ".state: index " + std::to_string(i) + " out of range for " +
                            std::to_string(num_params()) + " parameters");
  return state_[i];
}

Tensor Optimizer::checked_grad(const Variable& p, int64_t index) const {
  const Tensor& data = p.data();
  const Tensor& grad = p.grad();
  const std::string where = name_ + ".step: parameter " + std::to_string(index) + " (" + data.desc() + ")";
  if (!data.is_contiguous()) throw std::invalid_argument(where + ": the parameter must be contiguous");
  if (grad.shape() != data.shape() || grad.dtype() != data.dtype() || grad.device() != data.device())
    throw std::invalid_argument(where + ": its gradient is " + grad.desc());
  return grad.contiguous();
}

// ---------------------------------------------------------------- state_dict

TensorMap Optimizer::state_dict() const {
  TensorMap out;
  for (size_t i = 0; i < state_.size(); ++i)
    for (const auto& [name, t] : state_[i]) out["state." + std::to_string(i) + "." + name] = t.clone();
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string prefix = "param_groups." + std::to_string(g) + ".";
    out[prefix + "lr"] = scalar64(groups_[g].lr);
    out[prefix + "weight_decay"] = scalar64(groups_[g].weight_decay);
    out[prefix + "num_params"] = scalar64(static_cast<double>(groups_[g].params.size()));
    if (groups_[g].initial_lr) out[prefix + "initial_lr"] = scalar64(*groups_[g].initial_lr);
    if (groups_[g].momentum) out[prefix + "momentum"] = scalar64(*groups_[g].momentum);
  }
  return out;
}

void Optimizer::load_state_dict(const TensorMap& dict) {
  const std::string op = name_ + ".load_state_dict: ";
  const std::vector<std::string> names = state_names();
  auto fail = [&](const std::string& key, const std::string& what) {
    throw std::invalid_argument(op + "key '" + key + "': " + what);
  };
  auto scalar_value = [&](const std::string& key, const Tensor& t) {
    if (t.dim() != 0 || !t.is_floating_point()) fail(key, "expected a 0-d floating tensor, got " + t.desc());
    return t.item();
  };

  // parameter global index -> its group's parameters, for the shape checks
  std::vector<const Variable*> params;
  for (const ParamGroup& group : groups_)
    for (const Variable& p : group.params) params.push_back(&p);

  std::vector<ParamState> new_state(state_.size());
  std::vector<ParamGroup> new_groups = groups_;
  for (ParamGroup& g : new_groups) {
    g.initial_lr.reset();
    g.momentum.reset();
  }
  std::vector<std::set<std::string>> group_fields(groups_.size());

  for (const auto& [key, t] : dict) {
    const size_t dot1 = key.find('.');
    const size_t dot2 = dot1 == std::string::npos ? std::string::npos : key.find('.', dot1 + 1);
    if (dot2 == std::string::npos) fail(key, "not a state.<i>.<name> or param_groups.<g>.<option> key");
    const std::string kind = key.substr(0, dot1);
    const std::optional<int64_t> index = parse_index(key.substr(dot1 + 1, dot2 - dot1 - 1));
    const std::string field = key.substr(dot2 + 1);
    if (!index || (kind != "state" && kind != "param_groups"))
      fail(key, "not a state.<i>.<name> or param_groups.<g>.<option> key");
    if (!t.defined()) fail(key, "undefined tensor");

    if (kind == "state") {
      if (*index >= num_params())
        fail(key, "parameter index " + std::to_string(*index) + " out of range (the optimizer has " +
                      std::to_string(num_params()) + " parameters)");
      if (std::find(names.begin(), names.end(), field) == names.end()) {
        std::string known;
        for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
        fail(key, name_ + " keeps no state named '" + field + "' (it keeps: " + (known.empty() ? "none" : known) + ")");
      }
      const Tensor& p = params[*index]->data();
      if (field == "step") {
        const double step = scalar_value(key, t);
        if (!(step >= 0.0) || step != std::floor(step))
          fail(key, "step must be a non-negative integer, got " + num(step));
        new_state[*index][field] = scalar64(step);
      } else {
        if (t.shape() != p.shape() || !t.is_floating_point())
          fail(key, "expected a floating tensor of shape " + shape_str(p.shape()) + " (parameter " +
                        std::to_string(*index) + " is " + p.desc() + "), got " + t.desc());
        new_state[*index][field] = t.to(p.dtype()).to(p.device()).clone();
      }
    } else {
      if (*index >= static_cast<int64_t>(groups_.size()))
        fail(key, "group index " + std::to_string(*index) + " out of range (the optimizer has " +
                      std::to_string(groups_.size()) + " param groups)");
      ParamGroup& group = new_groups[*index];
      const double v = scalar_value(key, t);
      if (field == "lr") {
        if (!(v >= 0.0)) fail(key, "invalid learning rate " + num(v));
        group.lr = v;
      } else if (field == "weight_decay") {
        if (!(v >= 0.0)) fail(key, "invalid weight_decay " + num(v));
        group.weight_decay = v;
      } else if (field == "initial_lr") {
        group.initial_lr = v;
      } else if (field == "momentum") {
        if (!(v >= 0.0 && v < 1.0) || !has_momentum())
          fail(key, has_momentum() ? "invalid momentum " + num(v) + " (expected 0 <= momentum < 1)"
                                   : name_ + " here has no momentum to set");
        group.momentum = v;
      } else if (field == "num_params") {
        if (v != static_cast<double>(group.params.size()))
          fail(key, "the saved group has " + num(v) + " parameters, this optimizer's group " + std::to_string(*index) +
                        " has " + std::to_string(group.params.size()));
      } else {
        fail(key, "unknown param group option '" + field + "'");
      }
      group_fields[*index].insert(field);
    }
  }

  for (size_t g = 0; g < groups_.size(); ++g)
    for (const char* field : {"lr", "weight_decay", "num_params"})
      if (!group_fields[g].count(field))
        throw std::invalid_argument(op + "missing key 'param_groups." + std::to_string(g) + "." + field + "'");
  for (size_t i = 0; i < new_state.size(); ++i) {
    if (new_state[i].empty()) continue;  // never updated: no state, as for a fresh parameter
    for (const std::string& n : names)
      if (!new_state[i].count(n))
        throw std::invalid_argument(op + "missing key 'state." + std::to_string(i) + "." + n +
                                    "' (the state of parameter " + std::to_string(i) + " is incomplete)");
  }
  state_ = std::move(new_state);
  for (size_t g = 0; g < groups_.size(); ++g) {
    groups_[g].lr = new_groups[g].lr;
    groups_[g].weight_decay = new_groups[g].weight_decay;
    groups_[g].initial_lr = new_groups[g].initial_lr;
    groups_[g].momentum = new_groups[g].momentum;
  }
}

}  // namespace minidl::optim
