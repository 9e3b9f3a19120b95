// optim/clip_grad.h — gradient clipping by the total norm over all parameters, as
// torch.nn.utils.clip_grad_norm_:
//   total = || (||g_1||_p, ||g_2||_p, ...) ||_p      (norm_type p > 0, or infinity: max |g|)
//   every g *= min(1, max_norm / (total + 1e-6))
// Parameters without a gradient are skipped. Returns the total norm before clipping.
//
//   loss.backward();
//   double norm = optim::clip_grad_norm(model.parameters(), 1.0);
//   opt.step();
//
// The second form takes the gradient tensors and a `combine` step for gradients spread over
// ranks (dist::ZeroRedundancyOptimizer::clip_grad_norm): combine(local) turns this caller's
// sum of ||g_i||_p^p (its max ||g_i||_inf for p = infinity) into the sum (max) over every rank,
// e.g. by an all-reduce, before the root is taken.
#pragma once
#include <functional>
#include <vector>

#include "minidl/autograd/variable.h"

namespace minidl::optim {

double clip_grad_norm(const std::vector<Variable>& params, double max_norm, double norm_type = 2.0);
double clip_grad_norm(std::vector<Tensor> grads, double max_norm, double norm_type,
                      const std::function<double(double)>& combine);

}  // namespace minidl::optim
