// tests/common/gradcheck.h — finite-difference gradient check in float64.
// For f(inputs) -> y it compares backward's gradients of L = sum(y * w), w a fixed random
// tensor, with central differences (L(x + h) - L(x - h)) / 2h for every input element.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "minidl/autograd/autograd_all.h"

namespace minidl::testing {

using VarFn = std::function<Variable(const std::vector<Variable>&)>;

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-7;
  double rtol = 1e-5;
  std::vector<bool> needs_grad;  // per input; empty = all inputs
};

// Returns true when every analytic gradient matches; failures are reported with gtest.
bool gradcheck(const VarFn& f, const std::vector<Tensor>& inputs, const std::string& what,
               const GradcheckOptions& opt = {});

}  // namespace minidl::testing
