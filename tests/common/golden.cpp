// tests/common/golden.cpp — running a PyTorch golden-file case and comparing its output and gradients.
#include "tests/common/golden.h"

#include "tests/common/testing.h"

namespace minidl::testing {

std::vector<Variable> golden_inputs(const SafetensorsFile& golden, const std::string& name) {
  const auto has = [&](const std::string& key) { return golden.tensors.count(key) > 0; };
  std::vector<Variable> inputs;
  for (int i = 0; has(name + "/in" + std::to_string(i)); ++i)
    inputs.emplace_back(golden.tensors.at(name + "/in" + std::to_string(i)).clone(),
                        has(name + "/grad" + std::to_string(i)));
  return inputs;
}

int expect_golden_case(const SafetensorsFile& golden, const std::string& name, const GoldenCase& c) {
  std::vector<Variable> inputs = golden_inputs(golden, name);
  if (inputs.empty()) {
    ADD_FAILURE() << "no golden inputs for " << name;
    return 0;
  }
  Variable out = c.fn(inputs);
  expect_close(out.data(), golden.tensors.at(name + "/out"), c.tol, c.tol, name + " forward");
  if (!out.requires_grad()) {  // no gradient to compare: right only if the file records none
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].requires_grad())
        ADD_FAILURE() << name << ": the output needs no gradient, yet input " << i << " has one recorded";
    return 0;
  }
  out.backward(golden.tensors.at(name + "/dy"));
  int compared = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto grad = golden.tensors.find(name + "/grad" + std::to_string(i));
    if (grad == golden.tensors.end()) continue;
    if (!inputs[i].grad().defined()) {
      ADD_FAILURE() << name << ": no gradient for input " << i;
      return compared;
    }
    expect_close(inputs[i].grad(), grad->second, c.tol, c.tol, name + " grad of input " + std::to_string(i));
    ++compared;
  }
  return compared;
}

std::vector<std::string> golden_case_names(const std::map<std::string, GoldenCase>& cases) {
  std::vector<std::string> names;
  for (const auto& [name, c] : cases) names.push_back(name);
  return names;
}

}  // namespace minidl::testing
