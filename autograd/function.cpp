// autograd/function.cpp — Function::apply: forward without a graph, then one node for backward.
#include "minidl/autograd/function.h"

namespace minidl::autograd {

Variable Function::apply(const std::shared_ptr<Function>& fn, const std::vector<Variable>& inputs) {
  std::vector<Tensor> data;
  data.reserve(inputs.size());
  for (const auto& v : inputs) data.push_back(v.data());
  Tensor out;
  {
    NoGradGuard no_grad;
    out = fn->forward(data);
  }
  const std::string name = fn->name();
  return Variable::make_result(
      out, inputs, [fn](const Tensor& g) { return fn->backward(g); }, name.c_str());
}

}  // namespace minidl::autograd
