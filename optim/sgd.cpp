// optim/sgd.cpp — SGD::step: one fused pass per parameter (kernels/cpu/optim_kernels.h).
#include "minidl/optim/sgd.h"

#include <stdexcept>

#include "minidl/kernels/cpu/optim_kernels.h"
#include "minidl/kernels/cuda_ops.h"
#include "minidl/tensor/ops_cuda.h"
#include "minidl/tensor/creation.h"

namespace minidl::optim {

namespace {
SGDOptions checked(SGDOptions o) {
  if (!(o.momentum >= 0.0)) throw std::invalid_argument("SGD: invalid momentum " + std::to_string(o.momentum));
  if (!(o.dampening >= 0.0 && o.dampening <= 1.0))
    throw std::invalid_argument("SGD: invalid dampening " + std::to_string(o.dampening) + " (expected 0 <= dampening <= 1)");
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
    kernels::SgdStep op{.lr = group.lr,
                        .momentum = options_.momentum,
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
    if (cuda_ops::on_cuda({&p.data(), &grad, &buffer}, "SGD.step")) {  // the same SgdStep, one thread per element
      dispatch_floating(p.dtype(), "SGD.step", [](auto) {});
      cuda_ops::use_device(p.data());
      kernels::cuda::sgd_step(cuda_ops::elem(p.dtype()), p.data().raw_data(), grad.raw_data(),
                              buffer.defined() ? buffer.raw_data() : nullptr, p.numel(), op);
      return;
    }
    dispatch_floating(p.dtype(), "SGD.step", [&](auto tag) {
      using T = decltype(tag);
      kernels::cpu::sgd_step<T>(p.data().data<T>(), grad.data<T>(), buffer.defined() ? buffer.data<T>() : nullptr,
                                p.numel(), op);
    });
  });
}

}  // namespace minidl::optim
