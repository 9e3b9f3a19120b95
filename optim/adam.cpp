// optim/adam.cpp — Adam::step (AdamW is Adam with decoupled weight decay): per parameter, the
// step count on the host, then one fused pass (adam_step_, tensor/ops_optim.h).
#include "minidl/optim/adam.h"

#include <stdexcept>

#include "minidl/tensor/creation.h"
#include "minidl/tensor/ops_optim.h"

namespace minidl::optim {

namespace {
AdamOptions checked(const std::string& name, AdamOptions o) {
  auto bad = [&](const std::string& what, double v) {
    throw std::invalid_argument(name + ": invalid " + what + " " + std::to_string(v));
  };
  if (!(o.eps >= 0.0)) bad("eps", o.eps);
  if (!(o.beta1 >= 0.0 && o.beta1 < 1.0)) bad("beta1 (expected 0 <= beta1 < 1)", o.beta1);
  if (!(o.beta2 >= 0.0 && o.beta2 < 1.0)) bad("beta2 (expected 0 <= beta2 < 1)", o.beta2);
  return o;
}
AdamOptions as_adam(const AdamWOptions& o) {
  return {.lr = o.lr,
          .beta1 = o.beta1,
          .beta2 = o.beta2,
          .eps = o.eps,
          .weight_decay = o.weight_decay,
          .amsgrad = o.amsgrad};
}
}  // namespace

Adam::Adam(std::vector<Variable> params, AdamOptions options) : Adam(single_group(std::move(params)), options) {}
Adam::Adam(std::vector<ParamGroupSpec> groups, AdamOptions options) : Adam("Adam", std::move(groups), options, false) {}
Adam::Adam(std::string name, std::vector<ParamGroupSpec> groups, AdamOptions options, bool decoupled_weight_decay)
    : Optimizer(name, std::move(groups), options.lr, options.weight_decay),
      options_(checked(name, options)),
      decoupled_weight_decay_(decoupled_weight_decay) {}

AdamW::AdamW(std::vector<Variable> params, AdamWOptions options) : AdamW(single_group(std::move(params)), options) {}
AdamW::AdamW(std::vector<ParamGroupSpec> groups, AdamWOptions options)
    : Adam("AdamW", std::move(groups), as_adam(options), true) {}

std::vector<std::string> Adam::state_names() const {
  if (options_.amsgrad) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"};
  return {"exp_avg", "exp_avg_sq", "step"};
}

void Adam::step() {
  for_each_param_with_grad([&](ParamGroup& group, Variable& p, const Tensor& grad, ParamState& state) {
    if (state.empty()) {  // first update: zero moments, step 0
      state["step"] = scalar_tensor(0.0, DType::Float64);
      state["exp_avg"] = zeros_like(p.data());
      state["exp_avg_sq"] = zeros_like(p.data());
      if (options_.amsgrad) state["max_exp_avg_sq"] = zeros_like(p.data());
    }
    // the step count: a float64 scalar on the host (made here or by load_state_dict), read and
    // written in place — not item(), which on a device tensor would wait for the GPU
    double* step_count = state.at("step").data<double>();
    const double t = *step_count + 1.0;
    *step_count = t;

    AdamStepOptions op{.lr = group.lr,
                       .beta1 = group.momentum.value_or(options_.beta1),
                       .beta2 = options_.beta2,
                       .eps = options_.eps,
                       .weight_decay = group.weight_decay,
                       .decoupled_weight_decay = decoupled_weight_decay_,
                       .amsgrad = options_.amsgrad};
    op.set_step(t);
    adam_step_(p.data(), grad, state.at("exp_avg"), state.at("exp_avg_sq"),
               options_.amsgrad ? state.at("max_exp_avg_sq") : Tensor(), op, name_.c_str());
  });
}

}  // namespace minidl::optim
