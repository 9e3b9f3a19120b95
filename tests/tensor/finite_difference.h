// tests/tensor/finite_difference.h — the numeric gradient used by the tests of tensor/ops_nn.h
// backward functions: for L(x) = sum(f(x) * dy), dL/dx[i] ~ (L(x + h e_i) - L(x - h e_i)) / 2h,
// one element at a time, in float64. Compare it to the analytic gradient with
// expect_close(analytic, numeric, 1e-6, 1e-7).
#pragma once
#include <functional>
#include <vector>

#include "tests/common/testing.h"

namespace minidl::testing {

// f is called with a float64 tensor holding the perturbed values of x (same shape).
inline Tensor numeric_grad(const std::function<Tensor(const Tensor&)>& f, const Tensor& x, const Tensor& dy,
                           double h = 1e-6) {
  Tensor xp = x.to(DType::Float64).clone();
  double* p = xp.data<double>();
  const std::vector<double> w = dy.to_vector<double>();
  auto loss = [&] {
    const std::vector<double> out = f(xp).to_vector<double>();
    EXPECT_EQ(out.size(), w.size()) << "numeric_grad: dy does not match the output size";
    double s = 0;
    for (size_t i = 0; i < out.size() && i < w.size(); ++i) s += out[i] * w[i];
    return s;
  };
  std::vector<double> g(static_cast<size_t>(xp.numel()));
  for (int64_t i = 0; i < xp.numel(); ++i) {
    const double saved = p[i];
    p[i] = saved + h;
    const double plus = loss();
    p[i] = saved - h;
    const double minus = loss();
    p[i] = saved;
    g[static_cast<size_t>(i)] = (plus - minus) / (2 * h);
  }
  return from_vector(g, x.shape());
}

// A float64 standard-normal tensor from a fixed key, for test inputs.
inline Tensor randn64(const Shape& shape, uint64_t stream) {
  return randn(shape, RandomKey{1234, stream}, DType::Float64);
}

}  // namespace minidl::testing
