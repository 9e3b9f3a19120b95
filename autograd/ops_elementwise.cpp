// autograd/ops_elementwise.cpp — element-wise differentiable ops: each forward, then its backward.
// Broadcasting ops reduce their input gradients back to the input shapes with sum_to().
#include "minidl/autograd/ops.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/ops.h"

namespace minidl {

// a + b: d/da = dy, d/db = dy (summed over broadcast dims)
Variable add(const Variable& a, const Variable& b) {
  return Variable::make_result(
      add(a.data(), b.data()), {a, b},
      [sa = a.shape(), sb = b.shape()](const Tensor& dy) -> std::vector<Tensor> {
        return {sum_to(dy, sa), sum_to(dy, sb)};
      },
      "AddBackward");
}

// a - b: d/da = dy, d/db = -dy
Variable sub(const Variable& a, const Variable& b) {
  return Variable::make_result(
      sub(a.data(), b.data()), {a, b},
      [sa = a.shape(), sb = b.shape()](const Tensor& dy) -> std::vector<Tensor> {
        return {sum_to(dy, sa), sum_to(neg(dy), sb)};
      },
      "SubBackward");
}

// a * b: d/da = dy * b, d/db = dy * a
Variable mul(const Variable& a, const Variable& b) {
  const bool ga = a.requires_grad(), gb = b.requires_grad();
  return Variable::make_result(
      mul(a.data(), b.data()), {a, b},
      [ta = gb ? a.data() : Tensor(), tb = ga ? b.data() : Tensor(), sa = a.shape(),
       sb = b.shape()](const Tensor& dy) -> std::vector<Tensor> {
        return {tb.defined() ? sum_to(mul(dy, tb), sa) : Tensor(), ta.defined() ? sum_to(mul(dy, ta), sb) : Tensor()};
      },
      "MulBackward");
}

// a / b: d/da = dy / b, d/db = -dy * a / b^2
Variable div(const Variable& a, const Variable& b) {
  return Variable::make_result(
      div(a.data(), b.data()), {a, b},
      [ta = a.data(), tb = b.data()](const Tensor& dy) -> std::vector<Tensor> {
        Tensor da = div(dy, tb);
        Tensor db = neg(div(mul(da, ta), tb));
        return {sum_to(da, ta.shape()), sum_to(db, tb.shape())};
      },
      "DivBackward");
}

// a + s: d/da = dy
Variable add(const Variable& a, double s) {
  return Variable::make_result(
      add(a.data(), s), {a}, [](const Tensor& dy) -> std::vector<Tensor> { return {dy}; }, "AddScalarBackward");
}

// a * s: d/da = s * dy
Variable mul(const Variable& a, double s) {
  return Variable::make_result(
      mul(a.data(), s), {a}, [s](const Tensor& dy) -> std::vector<Tensor> { return {mul(dy, s)}; },
      "MulScalarBackward");
}

// -x: dx = -dy
Variable neg(const Variable& x) {
  return Variable::make_result(
      neg(x.data()), {x}, [](const Tensor& dy) -> std::vector<Tensor> { return {neg(dy)}; }, "NegBackward");
}

// exp(x): dx = dy * y
Variable exp(const Variable& x) {
  Tensor y = exp(x.data());
  return Variable::make_result(
      y, {x}, [y](const Tensor& dy) -> std::vector<Tensor> { return {mul(dy, y)}; }, "ExpBackward");
}

// log(x): dx = dy / x
Variable log(const Variable& x) {
  return Variable::make_result(
      log(x.data()), {x}, [t = x.data()](const Tensor& dy) -> std::vector<Tensor> { return {div(dy, t)}; },
      "LogBackward");
}

// sqrt(x): dx = dy / (2 y)
Variable sqrt(const Variable& x) {
  Tensor y = sqrt(x.data());
  return Variable::make_result(
      y, {x}, [y](const Tensor& dy) -> std::vector<Tensor> { return {div(mul(dy, 0.5), y)}; }, "SqrtBackward");
}

// x^p: dx = dy * p * x^(p-1)
Variable pow(const Variable& x, double p) {
  return Variable::make_result(
      pow(x.data(), p), {x},
      [t = x.data(), p](const Tensor& dy) -> std::vector<Tensor> { return {mul(dy, mul(pow(t, p - 1.0), p))}; },
      "PowBackward");
}

// tanh(x): dx = dy * (1 - y^2)
Variable tanh(const Variable& x) {
  Tensor y = tanh(x.data());
  return Variable::make_result(
      y, {x}, [y](const Tensor& dy) -> std::vector<Tensor> { return {tanh_backward(y, dy)}; }, "TanhBackward");
}

// sigmoid(x): dx = dy * y * (1 - y)
Variable sigmoid(const Variable& x) {
  Tensor y = sigmoid(x.data());
  return Variable::make_result(
      y, {x}, [y](const Tensor& dy) -> std::vector<Tensor> { return {sigmoid_backward(y, dy)}; }, "SigmoidBackward");
}

// relu(x): dx = dy where x > 0
Variable relu(const Variable& x) {
  return Variable::make_result(
      relu(x.data()), {x}, [t = x.data()](const Tensor& dy) -> std::vector<Tensor> { return {relu_backward(t, dy)}; },
      "ReluBackward");
}

// gelu(x) = x Phi(x) (or its tanh approximation): dx = dy * gelu'(x)
Variable gelu(const Variable& x, bool tanh_approximation) {
  return Variable::make_result(
      gelu(x.data(), tanh_approximation), {x},
      [t = x.data(), tanh_approximation](const Tensor& dy) -> std::vector<Tensor> {
        return {gelu_backward(t, dy, tanh_approximation)};
      },
      "GeluBackward");
}

Variable operator+(const Variable& a, const Variable& b) { return add(a, b); }
Variable operator-(const Variable& a, const Variable& b) { return sub(a, b); }
Variable operator*(const Variable& a, const Variable& b) { return mul(a, b); }
Variable operator/(const Variable& a, const Variable& b) { return div(a, b); }
Variable operator+(const Variable& a, double s) { return add(a, s); }
Variable operator-(const Variable& a, double s) { return add(a, -s); }
Variable operator*(const Variable& a, double s) { return mul(a, s); }
Variable operator/(const Variable& a, double s) { return mul(a, 1.0 / s); }
Variable operator*(double s, const Variable& a) { return mul(a, s); }
Variable operator-(const Variable& a) { return neg(a); }

}  // namespace minidl
