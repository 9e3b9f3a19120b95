// tensor/ops_optim.cpp — sgd_step_ / adam_step_ (tensor/ops_optim.h): one set of checks, then the
// fused update on the CPU or on CUDA, both from the same functor (kernels/optim_functors.h).
#include "minidl/tensor/ops_optim.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "minidl/kernels/cpu/optim_kernels.h"
#include "minidl/kernels/cuda_ops.h"
#include "minidl/tensor/cuda_dispatch.h"

namespace minidl {

namespace {
// Every defined state tensor: param's dtype and shape, contiguous (written in place).
void check_state(const Tensor& param, const Tensor& t, const char* op, const char* name) {
  if (!t.defined()) return;
  if (t.dtype() != param.dtype() || t.shape() != param.shape() || !t.is_contiguous())
    throw std::invalid_argument(std::string(op) + ": expected " + name +
                                " contiguous and shaped and typed like the "
                                "parameter " +
                                param.desc() + ", got " + t.desc());
}
void check_param(const Tensor& param, const Tensor& grad, const char* op) {
  if (!param.defined() || !grad.defined()) throw std::invalid_argument(std::string(op) + ": undefined tensor");
  dispatch_floating(param.dtype(), op, [](auto) {});
  check_state(param, param, op, "the parameter");
  if (grad.dtype() != param.dtype() || grad.shape() != param.shape())
    throw std::invalid_argument(std::string(op) + ": expected a gradient shaped and typed like the parameter " +
                                param.desc() + ", got " + grad.desc());
}
template <class T> T* data_or_null(const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }
}  // namespace

void sgd_step_(const Tensor& param, const Tensor& grad_in, const Tensor& buffer, const SgdStepOptions& o) {
  constexpr const char* op = "SGD.step";
  check_param(param, grad_in, op);
  if ((o.momentum != 0.0) != buffer.defined())
    throw std::invalid_argument(std::string(op) + ": a momentum buffer is needed exactly when momentum != 0");
  check_state(param, buffer, op, "momentum_buffer");
  const Tensor grad = grad_in.contiguous();
  if (cuda_dispatch::on_cuda({&param, &grad, &buffer}, op)) {  // the same SgdStep, one thread per element
    cuda_dispatch::use_device(param);
    kernels::cuda::sgd_step(cuda_dispatch::elem(param.dtype()), param.raw_data(), grad.raw_data(),
                            buffer.defined() ? buffer.raw_data() : nullptr, param.numel(), o);
    return;
  }
  dispatch_floating(param.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::sgd_step<T>(param.data<T>(), grad.data<T>(), data_or_null<T>(buffer), param.numel(), o);
  });
}

void adam_step_(const Tensor& param, const Tensor& grad_in, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const Tensor& max_exp_avg_sq, const AdamStepOptions& o, const char* op) {
  check_param(param, grad_in, op);
  if (!exp_avg.defined() || !exp_avg_sq.defined() || o.amsgrad != max_exp_avg_sq.defined())
    throw std::invalid_argument(std::string(op) +
                                ": expected exp_avg, exp_avg_sq and (exactly when amsgrad) "
                                "max_exp_avg_sq");
  check_state(param, exp_avg, op, "exp_avg");
  check_state(param, exp_avg_sq, op, "exp_avg_sq");
  check_state(param, max_exp_avg_sq, op, "max_exp_avg_sq");
  if (std::isnan(o.step_size))
    throw std::invalid_argument(std::string(op) + ": the options' set_step(t) was not called (the update number)");
  const Tensor grad = grad_in.contiguous();
  if (cuda_dispatch::on_cuda({&param, &grad, &exp_avg, &exp_avg_sq, &max_exp_avg_sq}, op)) {
    cuda_dispatch::use_device(param);
    kernels::cuda::adam_step(cuda_dispatch::elem(param.dtype()), param.raw_data(), grad.raw_data(), exp_avg.raw_data(),
                             exp_avg_sq.raw_data(), max_exp_avg_sq.defined() ? max_exp_avg_sq.raw_data() : nullptr,
                             param.numel(), o);
    return;
  }
  dispatch_floating(param.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::adam_step<T>(param.data<T>(), grad.data<T>(), exp_avg.data<T>(), exp_avg_sq.data<T>(),
                               data_or_null<T>(max_exp_avg_sq), param.numel(), o);
  });
}

}  // namespace minidl
