// autograd/gradcheck.h — checks a differentiable function's backward against finite differences,
// as torch.autograd.gradcheck: in float64, for f(inputs) -> y it compares the gradients that
// backward gives for L = sum(y * w) (w a fixed random tensor of y's shape) with the central
// differences (L(x + eps) - L(x - eps)) / 2 eps, one input element at a time. An element passes
// when |numeric - analytic| <= atol + rtol * |numeric| (PyTorch's defaults below).
//
//   bool ok = autograd::gradcheck([](const std::vector<Variable>& in) { return my_op(in[0]); },
//                                 {randn({3, 4}, DType::Float64)});
//
// The inputs are converted to float64 copies; f must be deterministic and smooth near them (move
// inputs away from kinks such as relu's 0). On the first element that fails, gradcheck throws a
// std::runtime_error naming the input, the element and both values ("gradcheck: d/d input 0 [5]:
// analytic 2, numeric 3, ..."), or returns false when raise_exception is off (PyTorch's flag).
// An input that requires grad but gets no gradient fails the same way.
#pragma once
#include <functional>
#include <vector>

#include "minidl/autograd/variable.h"

namespace minidl::autograd {

using GradcheckFn = std::function<Variable(const std::vector<Variable>&)>;

struct GradcheckOptions {
  double eps = 1e-6;  // finite-difference step
  double atol = 1e-5;
  double rtol = 1e-3;
  std::vector<bool> needs_grad = {};  // per input; empty: every input is checked
  bool raise_exception = true;  // false: return false instead of throwing
};

bool gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});

}  // namespace minidl::autograd
