// nn/init.cpp — initialisers (see init.h); formulas follow torch/nn/init.py.
#include "minidl/nn/init.h"

#include <cmath>
#include <stdexcept>

#include "minidl/tensor/random.h"

namespace minidl::nn::init {

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& w) {
  if (w.dim() < 2)
    throw std::invalid_argument("init: fan in and fan out need a tensor with at least 2 dims, got " + w.desc());
  int64_t receptive = 1;
  for (int64_t d = 2; d < w.dim(); ++d) receptive *= w.size(d);
  return {w.size(1) * receptive, w.size(0) * receptive};
}

double calculate_gain(const std::string& nl, double param) {
  if (nl == "linear" || nl == "conv2d" || nl == "sigmoid") return 1.0;
  if (nl == "tanh") return 5.0 / 3.0;
  if (nl == "relu") return std::sqrt(2.0);
  if (nl == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  throw std::invalid_argument("calculate_gain: unsupported nonlinearity '" + nl + "'");
}

Tensor& uniform_(Tensor& t, double a, double b) { return minidl::uniform_(t, a, b); }
Tensor& normal_(Tensor& t, double mean, double std) { return minidl::normal_(t, mean, std); }
Tensor& zeros_(Tensor& t) { return t.fill_(0.0); }
Tensor& ones_(Tensor& t) { return t.fill_(1.0); }
Tensor& constant_(Tensor& t, double v) { return t.fill_(v); }

namespace {
double kaiming_std(const Tensor& t, double a, const std::string& mode, const std::string& nl) {
  const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  if (mode != "fan_in" && mode != "fan_out")
    throw std::invalid_argument("kaiming init: mode must be 'fan_in' or 'fan_out', got '" + mode + "'");
  const double fan = static_cast<double>(mode == "fan_in" ? fan_in : fan_out);
  return calculate_gain(nl, a) / std::sqrt(fan);
}
}  // namespace

Tensor& kaiming_uniform_(Tensor& t, double a, const std::string& mode, const std::string& nl) {
  const double bound = std::sqrt(3.0) * kaiming_std(t, a, mode, nl);
  return minidl::uniform_(t, -bound, bound);
}

Tensor& kaiming_normal_(Tensor& t, double a, const std::string& mode, const std::string& nl) {
  return minidl::normal_(t, 0.0, kaiming_std(t, a, mode, nl));
}

Tensor& xavier_uniform_(Tensor& t, double gain) {
  const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  const double a = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  return minidl::uniform_(t, -a, a);
}

Tensor& xavier_normal_(Tensor& t, double gain) {
  const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  return minidl::normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)));
}

Tensor& trunc_normal_(Tensor& t, double mean, double std, double a, double b) {
  if (!(a < b)) throw std::invalid_argument("trunc_normal_: need a < b");
  Tensor z = randn(t.shape(), DType::Float64);
  double* p = z.data<double>();
  const int64_t n = z.numel();
  auto outside = [&](double v) { return v < a || v > b; };
  for (int round = 0; round < 100; ++round) {
    bool any = false;
    for (int64_t i = 0; i < n && !any; ++i) any = outside(mean + std * p[i]);
    if (!any) break;
    Tensor fresh = randn(t.shape(), DType::Float64);
    const double* f = fresh.data<double>();
    for (int64_t i = 0; i < n; ++i)
      if (outside(mean + std * p[i])) p[i] = f[i];
  }
  for (int64_t i = 0; i < n; ++i) p[i] = std::clamp(mean + std * p[i], a, b);
  t.copy_(z);
  return t;
}

}  // namespace minidl::nn::init
