// autograd/ops_activation.cpp — the activations beyond ReLU/GELU/tanh/sigmoid (SiLU, LeakyReLU,
// ELU, Softplus, Hardswish) and abs: each forward (a tensor/ element-wise op over a
// kernels/functors.h functor), then its backward, which saves only the input.
#include "minidl/autograd/ops.h"
#include "minidl/tensor/ops.h"

namespace minidl {

// silu(x) = x sigmoid(x): dx = dy * s (1 + x (1 - s))
Variable silu(const Variable& x) {
  return Variable::make_result(
      silu(x.data()), {x}, [t = x.data()](const Tensor& dy) -> std::vector<Tensor> { return {silu_backward(t, dy)}; },
      "SiluBackward");
}

// leaky_relu(x): dx = dy where x > 0, slope * dy elsewhere
Variable leaky_relu(const Variable& x, double negative_slope) {
  return Variable::make_result(
      leaky_relu(x.data(), negative_slope), {x},
      [t = x.data(), negative_slope](const Tensor& dy) -> std::vector<Tensor> {
        return {leaky_relu_backward(t, dy, negative_slope)};
      },
      "LeakyReluBackward");
}

// elu(x): dx = dy where x > 0, dy * alpha e^x elsewhere
Variable elu(const Variable& x, double alpha) {
  return Variable::make_result(
      elu(x.data(), alpha), {x},
      [t = x.data(), alpha](const Tensor& dy) -> std::vector<Tensor> { return {elu_backward(t, dy, alpha)}; },
      "EluBackward");
}

// softplus(x) = log(1 + e^(beta x)) / beta: dx = dy * sigmoid(beta x) (dy where beta x > threshold)
Variable softplus(const Variable& x, double beta, double threshold) {
  if (!(beta > 0)) throw std::invalid_argument("softplus: beta must be positive, got " + std::to_string(beta));
  return Variable::make_result(
      softplus(x.data(), beta, threshold), {x},
      [t = x.data(), beta, threshold](const Tensor& dy) -> std::vector<Tensor> {
        return {softplus_backward(t, dy, beta, threshold)};
      },
      "SoftplusBackward");
}

// hardswish(x) = x relu6(x + 3) / 6: dx = dy (2x + 3) / 6 on [-3, 3], dy above, 0 below
Variable hardswish(const Variable& x) {
  return Variable::make_result(
      hardswish(x.data()), {x},
      [t = x.data()](const Tensor& dy) -> std::vector<Tensor> { return {hardswish_backward(t, dy)}; },
      "HardswishBackward");
}

// |x|: dx = dy * sign(x)
Variable abs(const Variable& x) {
  return Variable::make_result(
      abs(x.data()), {x}, [t = x.data()](const Tensor& dy) -> std::vector<Tensor> { return {abs_backward(t, dy)}; },
      "AbsBackward");
}

}  // namespace minidl
