// tensor/ops_optim.h — the fused optimizer updates as tensor ops: one pass per parameter that
// reads its gradient and optimizer state and writes the new parameter and state in place, with
// the per-element math of kernels/optim_functors.h (torch.optim's operation order), on the CPU
// (kernels/cpu/optim_kernels.h) or on CUDA (kernels/cuda/optim.cu) — wherever the tensors are.
// optim/ calls these and sees tensors only. Tested through the optimizers' PyTorch golden tests
// (tests/optim/); the CUDA kernels against the CPU ones by tests/kernels/test_cuda_optim.cpp.
#pragma once
#include "minidl/kernels/optim_functors.h"
#include "minidl/tensor/tensor.h"

namespace minidl {

// torch.optim.SGD's hyper-parameters for one update: the per-element functor itself
// (kernels/optim_functors.h gives the formula; first_step: momentum_buffer is uninitialised and
// this update sets it).
using SgdStepOptions = kernels::SgdStep;
// param, grad, momentum_buffer: one floating dtype, one device, param's shape; param and the
// buffer contiguous (updated in place). momentum_buffer is undefined when momentum == 0.
void sgd_step_(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdStepOptions& o);

// torch.optim.Adam / AdamW's hyper-parameters for one update: the per-element functor itself,
// whose set_step(t) fills the scalars of update number t (counted from 1) before the call.
using AdamStepOptions = kernels::AdamStep;
// As sgd_step_; max_exp_avg_sq is defined exactly when amsgrad is set. `op` names the caller
// ("Adam", "AdamW") in errors.
void adam_step_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const Tensor& max_exp_avg_sq, const AdamStepOptions& o, const char* op = "Adam");

}  // namespace minidl
