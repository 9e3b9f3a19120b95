// optim/optimizer.h — Optimizer: the base of SGD, Adam and AdamW. It holds parameter groups
// (each with its own lr and weight decay, e.g. no weight decay on norms and biases), the
// per-parameter state (momentum buffers, moments, step counts), zero_grad(), and the state_dict
// as a flat TensorMap, so an optimizer checkpoint is one safetensors file:
//   state.<i>.<name>          per-parameter state; i is the parameter's global index (groups in
//                             order, parameters in order within a group), as in PyTorch
//                             e.g. state.0.momentum_buffer, state.3.exp_avg, state.3.step (0-d)
//   param_groups.<g>.lr       0-d float64; also .weight_decay, .num_params and, once an LR
//                             scheduler has set them, .initial_lr and .momentum
// Parameters whose grad is undefined are skipped by step(), as in PyTorch, and so are frozen
// parameters (requires_grad_(false)) even when they still hold a gradient from before. Updates run under
// NoGradGuard and write p.data() in place (contiguous float32/float64 tensors; on a CUDA device
// the same update functors run as one fused kernel, and the state lives on the parameter's device).
//
//   optim::SGD sgd(model.parameters(), {.lr = 0.1, .momentum = 0.9});
//   optim::AdamW adamw({{.params = decay}, {.params = no_decay, .weight_decay = 0.0}}, {.lr = 1e-3});
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "minidl/autograd/variable.h"
#include "minidl/tensor/serialize.h"

namespace minidl::optim {

// A group as the user gives it: options left unset take the optimizer's defaults.
struct ParamGroupSpec {
  std::vector<Variable> params = {};
  std::optional<double> lr = std::nullopt;
  std::optional<double> weight_decay = std::nullopt;
};

// A group as the optimizer holds it, every option resolved. LR schedulers write `lr`.
struct ParamGroup {
  std::vector<Variable> params;
  double lr = 0.0;
  double weight_decay = 0.0;
  std::optional<double> initial_lr;  // set by the first LR scheduler: the lr its schedule starts from
  // Set by OneCycleLR (cycle_momentum): this group's momentum — SGD's momentum, Adam's beta1 —
  // in place of the optimizer's option; like torch's param_group["momentum"] / ["betas"][0].
  std::optional<double> momentum;
};

// One parameter's state, by name ("momentum_buffer", "exp_avg", "step", ...).
using ParamState = std::map<std::string, Tensor>;

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient.
  virtual void step() = 0;
  // Clears every parameter's gradient (undefined when set_to_none, else zero-filled).
  void zero_grad(bool set_to_none = true);

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  int64_t num_params() const { return static_cast<int64_t>(state_.size()); }
  // The state of the parameter with global index i (empty until its first update).
  const ParamState& state(int64_t i) const;

  // A copy of the state and the group options (see the key layout above). Virtual so that an
  // optimizer whose state lives elsewhere (a sharded one) can gather it into this same layout.
  virtual TensorMap state_dict() const;
  // Replaces state and group options by those of `dict`, which must come from an optimizer of
  // the same kind over parameters of the same shapes in the same groups. Anything else (unknown,
  // missing or malformed keys, wrong shapes, other group sizes) is a std::invalid_argument naming
  // the key; the optimizer is unchanged then.
  virtual void load_state_dict(const TensorMap& dict);

  const std::string& name() const { return name_; }
  // Whether the update has a momentum a scheduler may set per group (ParamGroup::momentum):
  // SGD with momentum > 0 (its buffers exist), Adam and AdamW (beta1).
  virtual bool has_momentum() const { return false; }

 protected:
  Optimizer(std::string name, std::vector<ParamGroupSpec> groups, double default_lr, double default_weight_decay);

  // The state names a parameter has once updated; "step" is a 0-d float64 counter, any other
  // name a tensor of the parameter's shape and dtype.
  virtual std::vector<std::string> state_names() const = 0;

  // Calls fn(group, param, grad, state) for every trainable parameter with a gradient, in global index
  // order, under NoGradGuard; grad is contiguous and matches the parameter's shape and dtype.
  template <class F> void for_each_param_with_grad(F&& fn);

  std::string name_;  // "SGD", for messages
  std::vector<ParamGroup> groups_;
  std::vector<ParamState> state_;  // by global parameter index

 private:
  // Checks that p can be updated in place with gradient g; returns g as a contiguous tensor.
  Tensor checked_grad(const Variable& p, int64_t index) const;
};

// Wraps a flat parameter list as the single group of an optimizer.
inline std::vector<ParamGroupSpec> single_group(std::vector<Variable> params) {
  std::vector<ParamGroupSpec> groups(1);
  groups[0].params = std::move(params);
  return groups;
}

template <class F> void Optimizer::for_each_param_with_grad(F&& fn) {
  NoGradGuard no_grad;
  int64_t index = 0;
  for (ParamGroup& group : groups_) {
    for (Variable& p : group.params) {
      const int64_t i = index++;
      if (!p.requires_grad() || !p.grad().defined()) continue;  // frozen or no gradient
      Tensor grad = checked_grad(p, i);
      fn(group, p, grad, state_[i]);
    }
  }
}

}  // namespace minidl::optim
