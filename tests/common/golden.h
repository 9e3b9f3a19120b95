// tests/common/golden.h — PyTorch golden-file cases shared by the autograd and nn tests. A case
// NAME in a safetensors file holds inputs NAME/in0, NAME/in1, ..., the output NAME/out, the
// upstream gradient NAME/dy, and NAME/grad<i>, the gradient of sum(out * dy) for each input i
// that requires grad.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "minidl/autograd/autograd_all.h"
#include "minidl/tensor/serialize.h"

namespace minidl::testing {

// How one case runs: out = fn(inputs), compared at rtol = atol = tol.
struct GoldenCase {
  std::function<Variable(const std::vector<Variable>&)> fn;
  double tol = 1e-5;
};

// NAME/in0, NAME/in1, ... (copies), each requiring grad where NAME/grad<i> exists.
std::vector<Variable> golden_inputs(const SafetensorsFile& golden, const std::string& name);
// Runs the case on its inputs and compares the output with NAME/out; when the output requires
// grad, backpropagates NAME/dy and compares each recorded NAME/grad<i>. Returns how many
// gradients it compared.
int expect_golden_case(const SafetensorsFile& golden, const std::string& name, const GoldenCase& c);
// The cases' names, sorted: the parameters of a TEST_P over them.
std::vector<std::string> golden_case_names(const std::map<std::string, GoldenCase>& cases);

}  // namespace minidl::testing
