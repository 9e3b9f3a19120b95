// examples/02_autograd.cpp — automatic differentiation: Variables record the ops that made them,
// backward() walks that graph in reverse and leaves gradients in .grad(); NoGradGuard turns the
// recording off; a custom Function supplies its own backward, which autograd::gradcheck checks
// against finite differences (a mismatch ends the program with its message).
//   build/examples/02_autograd
#include <iostream>
#include <memory>

#include "minidl/autograd/autograd_all.h"
#include "minidl/tensor/tensor_all.h"

using namespace minidl;

// [tutorial:custom_function]
// y = x^3, written as a custom differentiable function: forward computes, backward returns dy/dx.
struct Cube : autograd::Function {
  Tensor x;  // saved by forward for backward
  std::string name() const override { return "CubeBackward"; }
  Tensor forward(const std::vector<Tensor>& in) override {
    x = in[0];
    return x * x * x;
  }
  std::vector<Tensor> backward(const Tensor& dy) override { return {dy * x * x * 3.0}; }
};
// [/tutorial:custom_function]

int main() {
  // Leaves that require grad: the things we differentiate with respect to.
  Variable w(from_vector<float>({2.0f, -1.0f}), /*requires_grad=*/true);
  Variable x(from_vector<float>({3.0f, 4.0f}));  // data: no gradient wanted

  // loss = sum((w * x)^2): every op records a node of the graph.
  Variable loss = sum(pow(w * x, 2.0));
  std::cout << "loss = " << loss.item() << ", made by " << loss.grad_fn()->name << "\n";

  // Backward: d loss / d w = 2 * (w * x) * x = [36, -32].
  loss.backward();
  std::cout << "w.grad = " << w.grad() << "\n";

  // Gradients accumulate until cleared, as in PyTorch.
  sum(w * x).backward();
  std::cout << "after a second backward (adds x): w.grad = " << w.grad() << "\n";
  w.zero_grad();

  // Inside a NoGradGuard nothing is recorded (evaluation, optimizer updates).
  {
    NoGradGuard no_grad;
    Variable y = w * x;
    std::cout << "under NoGradGuard, y has a grad_fn? " << (y.grad_fn() ? "yes" : "no") << "\n";
  }

  // A custom Function joins the graph like any built-in op: d(sum(w^3))/dw = 3 w^2 = [12, 3].
  Variable cubed = autograd::Function::apply(std::make_shared<Cube>(), {w});
  sum(cubed).backward();
  std::cout << "d sum(w^3) / dw = " << w.grad() << "\n";

  // [tutorial:gradcheck]
  // Check the hand-written backward against central differences, in float64 with PyTorch's
  // tolerances; a mismatch throws, naming the input element and both values.
  autograd::gradcheck(
      [](const std::vector<Variable>& in) { return autograd::Function::apply(std::make_shared<Cube>(), in); },
      {randn({2, 3}, DType::Float64)});
  // [/tutorial:gradcheck]
  std::cout << "gradcheck(Cube) passed\n";
  return 0;
}
