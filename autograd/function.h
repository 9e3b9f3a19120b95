// autograd/function.h — a differentiable function defined outside autograd/, like PyTorch's
// torch.autograd.Function: subclass, compute the result in forward() (saving what backward
// needs in members), return one gradient per input from backward(). dist's SyncBatchNorm is one.
//
//   struct Square : autograd::Function {
//     Tensor x;
//     std::string name() const override { return "SquareBackward"; }
//     Tensor forward(const std::vector<Tensor>& in) override { x = in[0]; return mul(x, x); }
//     std::vector<Tensor> backward(const Tensor& dy) override { return {mul(dy, mul(x, 2.0))}; }
//   };
//   Variable y = autograd::Function::apply(std::make_shared<Square>(), {x});
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "minidl/autograd/variable.h"

namespace minidl::autograd {

class Function : public std::enable_shared_from_this<Function> {
 public:
  virtual ~Function() = default;
  virtual std::string name() const = 0;
  // Runs without recording a graph; inputs are the Variables' data.
  virtual Tensor forward(const std::vector<Tensor>& inputs) = 0;
  // One gradient per input, each of that input's shape (undefined: no gradient).
  virtual std::vector<Tensor> backward(const Tensor& grad_output) = 0;

  // Runs forward and records backward in the graph when any input requires grad.
  static Variable apply(const std::shared_ptr<Function>& fn, const std::vector<Variable>& inputs);
};

}  // namespace minidl::autograd
