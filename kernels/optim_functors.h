// kernels/optim_functors.h — the per-element math of the optimizer updates (SGD, Adam, AdamW),
// shared by the CPU kernels (kernels/cpu/optim_kernels.h) and the CUDA ones (kernels/cuda/optim.cu).
//
// Each functor updates ONE element in place: the parameter p, its gradient g and that element's
// optimizer state (momentum buffer; first and second moments). The per-step scalars (lr, bias
// corrections, ...) are computed once per parameter tensor on the host, in double precision as
// PyTorch does in Python, and converted to the element type T where PyTorch converts them.
// The operation order follows torch/optim/{sgd,adam,adamw}.py (single-tensor path, torch 1.13):
// every in-place tensor op there is one line here, so results agree to the last bits.
// PyTorch's CPU add(x, y, alpha) computes x + alpha * y as ONE fused multiply-add (its AVX2
// kernel uses vfmadd), so SgdStep writes those lines as std::fma: the result is then the same whether
// or not the compiler would contract a * b + c itself (-march=native does, a portable x86-64
// build cannot), and a portable build matches PyTorch as closely as a native one.
#pragma once
#include <cmath>
#include <limits>

#include "minidl/kernels/functors.h"  // MINIDL_HD

namespace minidl::kernels {

// torch.optim.SGD:
//   d = g + weight_decay * p                         (if weight_decay != 0)
//   buf = d                                          (first step: no dampening)
//   buf = momentum * buf + (1 - dampening) * d       (later steps)
//   d = nesterov ? d + momentum * buf : buf          (if momentum != 0)
//   p = p - lr * d
struct SgdStep {
  double lr = 0.0;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool first_step = false;  // the momentum buffer is uninitialised: it becomes d

  // without momentum (no state)
  template <class T> MINIDL_HD void operator()(T& p, T g) const {
    T d = g;
    if (weight_decay != 0.0) d = std::fma(T(weight_decay), p, d);  // d.add(p, alpha=weight_decay)
    p = std::fma(T(-lr), d, p);  // p.add_(d, alpha=-lr)
  }
  // with a momentum buffer
  template <class T> MINIDL_HD void operator()(T& p, T g, T& buf) const {
    T d = g;
    if (weight_decay != 0.0) d = std::fma(T(weight_decay), p, d);
    if (first_step) {
      buf = d;
    } else {
      buf = buf * T(momentum);  // buf.mul_(momentum)
      buf = std::fma(T(1.0 - dampening), d, buf);  // .add_(d, alpha=1 - dampening)
    }
    d = nesterov ? std::fma(T(momentum), buf, d) : buf;  // d.add(buf, alpha=momentum)
    p = std::fma(T(-lr), d, p);
  }
};

// torch.optim.Adam / AdamW at step t (t counts from 1):
//   Adam:  g = g + weight_decay * p        AdamW:  p = p * (1 - lr * weight_decay)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   v_max = max(v_max, v)                                (amsgrad; then v_max replaces v below)
//   denom = sqrt(v) / sqrt(1 - beta2^t) + eps
//   p = p - (lr / (1 - beta1^t)) * m / denom
struct AdamStep {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled_weight_decay = false;  // AdamW
  bool amsgrad = false;
  double step_size = std::numeric_limits<double>::quiet_NaN();  // lr / (1 - beta1^t): set by set_step
  double bias_correction2_sqrt = 1.0;  // sqrt(1 - beta2^t)

  // Fills the per-step scalars for step t (t >= 1).
  void set_step(double t) {
    const double bias_correction1 = 1.0 - std::pow(beta1, t);
    const double bias_correction2 = 1.0 - std::pow(beta2, t);
    step_size = lr / bias_correction1;
    bias_correction2_sqrt = std::sqrt(bias_correction2);
  }

  // v_max is read and written only when amsgrad is set.
  template <class T> MINIDL_HD void operator()(T& p, T g, T& m, T& v, T& v_max) const {
    if (decoupled_weight_decay) {
      p = p * T(1.0 - lr * weight_decay);
    } else if (weight_decay != 0.0) {
      g = g + T(weight_decay) * p;
    }
    m = m * T(beta1);
    m = m + T(1.0 - beta1) * g;
    v = v * T(beta2);
    v = v + T(1.0 - beta2) * g * g;
    T second = v;
    if (amsgrad) {
      v_max = v_max > v ? v_max : v;
      second = v_max;
    }
    const T denom = std::sqrt(second) / T(bias_correction2_sqrt) + T(eps);  // std:: works on CUDA too
    p = p + T(-step_size) * m / denom;
  }
};

}  // namespace minidl::kernels
