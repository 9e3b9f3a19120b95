// optim/sgd.cpp — SGD::step: one fused pass per parameter (sgd_step_, tensor/ops_optim.h).
#include "minidl/optim/sgd.h"

#include <stdexcept>

#include "minidl/tensor/creation.h"
#include "minidl/tensor/ops_optim.h"

namespace minidl::optim {

namespace {
SGDOptions checked(SGDOptions o) {
  if (!(o.momentum >= 0.0)) throw std::invalid_argument("SGD: invalid momentum " + std::to_string(o.momentum));
  if (!(o.dampening >= 0.0 && o.dampening <= 1.0))
    throw std::invalid_argument("SGD: invalid dampening " + std::to_string(o.dampening) +
                                " (expected 0 <= dampening <= 1)");
  if (o.nesterov && (o.momentum <= 0.0 || o.dampening != 0.0))
    throw std::invalid_argument("SGD: Nesterov momentum requires a momentum > 0 and zero dampening (got momentum " +
                                std::to_string(o.momentum) + ", dampening " + std::to_string(o.dampening) + ")");
  return o;
}
}  // namespace

SGD::SGD(std::vector<Variable> params, SGDOptions options) : SGD(single_group(std::move(params)), options) {}

SGD::SGD(std::vector<ParamGroupSpec> groups, SGDOptions options)
    : Optimizer("SGD", std::move(groups), options.lr, options.weight_decay), options_(checked(options)) {}

std::vector<std::string> SGD::state_names() const {
  if (options_.momentum == 0.0) return {};
  return {"momentum_buffer"};
}

void SGD::step() {
  for_each_param_with_grad([&](ParamGroup& group, Variable& p, const Tensor& grad, ParamState& state) {
    SgdStepOptions op{.lr = group.lr,
                      .momentum = group.momentum.value_or(options_.momentum),
                      .dampening = options_.dampening,
                      .weight_decay = group.weight_decay,
                      .nesterov = options_.nesterov};
    Tensor buffer;
    if (op.momentum != 0.0) {
      auto it = state.find("momentum_buffer");
      op.first_step = it == state.end();
      if (op.first_step) it = state.emplace("momentum_buffer", empty_like(p.data())).first;
      buffer = it->second;
    }
    sgd_step_(p.data(), grad, buffer, op);
  });
}

}  // namespace minidl::optim
