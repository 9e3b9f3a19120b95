// optim/clip_grad.h — gradient clipping by the total norm over all parameters, as
// torch.nn.utils.clip_grad_norm_:
//   total = || (||g_1||_p, ||g_2||_p, ...) ||_p      (norm_type p > 0, or infinity: max |g|)
//   every g *= min(1, max_norm / (total + 1e-6))
// Parameters without a gradient are skipped. Returns the total norm before clipping.
//
//   loss.backward();
//   double norm = optim::clip_grad_norm(model.parameters(), 1.0);
//   opt.step();
#pragma once
#include <vector>

#include "minidl/autograd/variable.h"

namespace minidl::optim {

double clip_grad_norm(const std::vector<Variable>& params, double max_norm, double norm_type = 2.0);

}  // namespace minidl::optim
