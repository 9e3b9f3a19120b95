// tests/common/gradcheck.cpp — central-difference gradient check (see gradcheck.h).
#include "tests/common/gradcheck.h"

#include <gtest/gtest.h>

#include <cmath>

#include "minidl/tensor/tensor_all.h"

namespace minidl::testing {

namespace {
double weighted_sum(const Tensor& y, const Tensor& w) {
  const auto vy = y.to_vector<double>(), vw = w.to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < vy.size(); ++i) s += vy[i] * vw[i];
  return s;
}
}  // namespace

bool gradcheck(const VarFn& f, const std::vector<Tensor>& inputs, const std::string& what,
               const GradcheckOptions& opt) {
  std::vector<Variable> vars;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const bool req = opt.needs_grad.empty() || opt.needs_grad[i];
    vars.emplace_back(inputs[i].to(DType::Float64).clone(), req);
  }
  Variable y = f(vars);
  Tensor w = randn(y.shape(), RandomKey{12345, 7}, DType::Float64);
  y.backward(w);

  bool ok = true;
  for (size_t i = 0; i < vars.size(); ++i) {
    if (!vars[i].requires_grad()) continue;
    const Tensor analytic = vars[i].grad();
    if (!analytic.defined()) {
      ADD_FAILURE() << what << ": input " << i << " got no gradient";
      ok = false;
      continue;
    }
    const auto va = analytic.to_vector<double>();
    Tensor base = vars[i].data().clone();
    double* p = base.data<double>();
    for (int64_t j = 0; j < base.numel(); ++j) {
      const double orig = p[j];
      auto eval = [&](double v) {
        p[j] = v;
        std::vector<Variable> vs;
        for (size_t k = 0; k < vars.size(); ++k) vs.emplace_back(k == i ? base.clone() : vars[k].data(), false);
        NoGradGuard ng;
        return weighted_sum(f(vs).data(), w);
      };
      const double num = (eval(orig + opt.eps) - eval(orig - opt.eps)) / (2 * opt.eps);
      p[j] = orig;
      if (std::fabs(num - va[j]) > opt.atol + opt.rtol * std::fabs(num)) {
        ADD_FAILURE() << what << ": d/d input" << i << "[" << j << "]: analytic " << va[j] << ", numeric " << num;
        ok = false;
        break;
      }
    }
  }
  return ok;
}

}  // namespace minidl::testing
