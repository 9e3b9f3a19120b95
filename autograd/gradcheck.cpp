// autograd/gradcheck.cpp — central-difference gradient check (see gradcheck.h).
#include "minidl/autograd/gradcheck.h"

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>

#include "minidl/tensor/random.h"

namespace minidl::autograd {

namespace {
double weighted_sum(const Tensor& y, const Tensor& w) {
  const auto vy = y.to_vector<double>(), vw = w.to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < vy.size(); ++i) s += vy[i] * vw[i];
  return s;
}

bool fail(const GradcheckOptions& opt, const std::string& message) {
  if (opt.raise_exception) throw std::runtime_error("gradcheck: " + message);
  return false;
}
}  // namespace

bool gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& opt) {
  if (!opt.needs_grad.empty() && opt.needs_grad.size() != inputs.size())
    throw std::invalid_argument("gradcheck: needs_grad has " + std::to_string(opt.needs_grad.size()) + " entries for " +
                                std::to_string(inputs.size()) + " inputs");
  if (!(opt.eps > 0)) throw std::invalid_argument("gradcheck: eps must be positive, got " + std::to_string(opt.eps));
  std::vector<Variable> vars;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!is_floating(inputs[i].dtype()))
      throw std::invalid_argument("gradcheck: input " + std::to_string(i) + " must be a floating tensor, got " +
                                  inputs[i].desc());
    const bool req = opt.needs_grad.empty() || opt.needs_grad[i];
    vars.emplace_back(inputs[i].cpu().to(DType::Float64).clone(), req);
  }
  Variable y = f(vars);
  const Tensor w = randn(y.shape(), RandomKey{12345, 7}, DType::Float64);  // fixed: no draw from the default generator
  y.backward(w);

  for (size_t i = 0; i < vars.size(); ++i) {
    if (!vars[i].requires_grad()) continue;
    const Tensor analytic = vars[i].grad();
    if (!analytic.defined()) return fail(opt, "input " + std::to_string(i) + " got no gradient");
    const auto va = analytic.to_vector<double>();
    Tensor base = vars[i].data().clone();
    double* p = base.data<double>();
    for (int64_t j = 0; j < base.numel(); ++j) {
      const double orig = p[j];
      auto eval = [&](double v) {
        p[j] = v;
        std::vector<Variable> vs;
        for (size_t k = 0; k < vars.size(); ++k) vs.emplace_back(k == i ? base.clone() : vars[k].data(), false);
        NoGradGuard no_grad;
        return weighted_sum(f(vs).data(), w);
      };
      const double numeric = (eval(orig + opt.eps) - eval(orig - opt.eps)) / (2 * opt.eps);
      p[j] = orig;
      const double tolerance = opt.atol + opt.rtol * std::fabs(numeric);
      if (!(std::fabs(numeric - va[j]) <= tolerance)) {  // a NaN on either side fails too
        std::ostringstream m;
        m.precision(17);
        m << "d/d input " << i << " [" << j << "]: analytic " << va[j] << ", numeric " << numeric
          << " (differ by more than atol + rtol * |numeric| = " << tolerance << ")";
        return fail(opt, m.str());
      }
    }
  }
  return true;
}

}  // namespace minidl::autograd
