// optim/clip_grad.cpp — clip_grad_norm: per-gradient norms accumulated in double, combined, and
// the gradients scaled in place when the total exceeds max_norm.
#include "minidl/optim/clip_grad.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "minidl/tensor/ops.h"

namespace minidl::optim {

namespace {

// ||g||_p of one contiguous gradient (p = inf: max |g|); p = 1 and 2 avoid pow.
template <class T> double grad_norm(const T* g, int64_t n, double p) {
  double acc = 0.0;
  if (std::isinf(p)) {
    for (int64_t i = 0; i < n; ++i) acc = std::max(acc, std::abs(static_cast<double>(g[i])));
    return acc;
  }
  if (p == 1.0) {
    for (int64_t i = 0; i < n; ++i) acc += std::abs(static_cast<double>(g[i]));
    return acc;
  }
  if (p == 2.0) {
    for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(g[i]) * static_cast<double>(g[i]);
    return std::sqrt(acc);
  }
  for (int64_t i = 0; i < n; ++i) acc += std::pow(std::abs(static_cast<double>(g[i])), p);
  return std::pow(acc, 1.0 / p);
}

}  // namespace

double clip_grad_norm(const std::vector<Variable>& params, double max_norm, double norm_type) {
  std::vector<Tensor> grads;
  for (const Variable& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  return clip_grad_norm(std::move(grads), max_norm, norm_type, [](double local) { return local; });
}

double clip_grad_norm(std::vector<Tensor> grads, double max_norm, double norm_type,
                      const std::function<double(double)>& combine) {
  if (!(norm_type > 0.0))
    throw std::invalid_argument("clip_grad_norm: norm_type must be > 0 (or infinity), got " +
                                std::to_string(norm_type));
  if (!(max_norm >= 0.0))
    throw std::invalid_argument("clip_grad_norm: max_norm must be >= 0, got " + std::to_string(max_norm));
  NoGradGuard no_grad;
  for (size_t i = 0; i < grads.size(); ++i)
    if (!grads[i].is_floating_point())
      throw std::invalid_argument("clip_grad_norm: gradient " + std::to_string(i) + " is " + grads[i].desc() +
                                  "; expected a floating tensor");

  // sum of ||g||_p^p (max for p = inf), each gradient's norm accumulated in double
  const bool inf = std::isinf(norm_type);
  double total = 0.0;
  for (const Tensor& g : grads) {
    const Tensor c = g.cpu().contiguous();  // a CUDA gradient's norm is taken on a host copy (same sum order)
    const double norm = dispatch_floating(c.dtype(), "clip_grad_norm", [&](auto tag) {
      using T = decltype(tag);
      return grad_norm<T>(c.data<T>(), c.numel(), norm_type);
    });
    if (inf) {
      total = std::max(total, norm);
    } else if (norm_type == 1.0) {
      total += norm;
    } else if (norm_type == 2.0) {
      total += norm * norm;
    } else {
      total += std::pow(norm, norm_type);
    }
  }
  total = combine(total);
  if (!inf && norm_type != 1.0) total = norm_type == 2.0 ? std::sqrt(total) : std::pow(total, 1.0 / norm_type);

  const double clip_coef = max_norm / (total + 1e-6);
  if (clip_coef < 1.0) {
    for (Tensor& g : grads) {
      if (g.device().is_cuda()) {
        mul_(g, clip_coef);  // scaled in place on the device
      } else if (g.is_contiguous()) {
        dispatch_floating(g.dtype(), "clip_grad_norm", [&](auto tag) {
          using T = decltype(tag);
          T* d = g.data<T>();
          const T c = static_cast<T>(clip_coef);
          for (int64_t i = 0, n = g.numel(); i < n; ++i) d[i] *= c;
        });
      } else {
        Tensor c = g.contiguous();
        dispatch_floating(c.dtype(), "clip_grad_norm", [&](auto tag) {
          using T = decltype(tag);
          T* d = c.data<T>();
          for (int64_t i = 0, n = c.numel(); i < n; ++i) d[i] *= static_cast<T>(clip_coef);
        });
        g.copy_(c);  // writes through the strided view into the grad's storage
      }
    }
  }
  return total;
}

}  // namespace minidl::optim
