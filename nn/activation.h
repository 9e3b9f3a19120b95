// nn/activation.h — activation modules beyond ReLU / GELU / Tanh (nn/layers.h): SiLU, LeakyReLU,
// ELU, Softplus, Hardswish; thin Modules over autograd/ops.h, printed as PyTorch prints them.
#pragma once
#include <cstdio>
#include <string>

#include "minidl/nn/module.h"

namespace minidl::nn {

namespace detail {
inline std::string fmt_g(double v) {  // 0.01 -> "0.01", 1 -> "1.0" (Python's float repr for these)
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}
}  // namespace detail

class SiLU : public Module {
 public:
  std::string type_name() const override { return "SiLU"; }
  Variable forward(const Variable& x) override { return silu(x); }
};

struct LeakyReLUOptions {
  double negative_slope = 0.01;
};
class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(const LeakyReLUOptions& o = {}) : options(o) {}
  std::string type_name() const override { return "LeakyReLU"; }
  std::string extra_repr() const override { return "negative_slope=" + detail::fmt_g(options.negative_slope); }
  Variable forward(const Variable& x) override { return leaky_relu(x, options.negative_slope); }
  LeakyReLUOptions options;
};

struct ELUOptions {
  double alpha = 1.0;
};
class ELU : public Module {
 public:
  explicit ELU(const ELUOptions& o = {}) : options(o) {}
  std::string type_name() const override { return "ELU"; }
  std::string extra_repr() const override { return "alpha=" + detail::fmt_g(options.alpha); }
  Variable forward(const Variable& x) override { return elu(x, options.alpha); }
  ELUOptions options;
};

struct SoftplusOptions {
  double beta = 1.0;
  double threshold = 20.0;  // x itself where beta x > threshold
};
class Softplus : public Module {
 public:
  explicit Softplus(const SoftplusOptions& o = {}) : options(o) {}
  std::string type_name() const override { return "Softplus"; }
  std::string extra_repr() const override {
    char buf[64];
    std::snprintf(buf, sizeof buf, "beta=%g, threshold=%g", options.beta, options.threshold);
    return buf;
  }
  Variable forward(const Variable& x) override { return softplus(x, options.beta, options.threshold); }
  SoftplusOptions options;
};

class Hardswish : public Module {
 public:
  std::string type_name() const override { return "Hardswish"; }
  Variable forward(const Variable& x) override { return hardswish(x); }
};

}  // namespace minidl::nn
