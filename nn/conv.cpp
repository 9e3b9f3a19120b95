// nn/conv.cpp — Conv2d layer (see conv.h).
#include "nn/conv.h"

#include <cmath>

#include "nn/init.h"

namespace minidl::nn {

Conv2d::Conv2d(const Conv2dOptions& o) : options(o) {
  const int64_t kh = o.kernel_h > 0 ? o.kernel_h : o.kernel, kw = o.kernel_w > 0 ? o.kernel_w : o.kernel;
  if (o.in <= 0 || o.out <= 0 || kh <= 0 || kw <= 0 || o.stride <= 0 || o.dilation <= 0 || o.padding < 0)
    throw std::invalid_argument("Conv2d: invalid options (in=" + std::to_string(o.in) + ", out=" + std::to_string(o.out) +
                                ", kernel=" + std::to_string(kh) + "x" + std::to_string(kw) + ", stride=" +
                                std::to_string(o.stride) + ", padding=" + std::to_string(o.padding) + ")");
  if (o.groups <= 0 || o.in % o.groups != 0 || o.out % o.groups != 0)
    throw std::invalid_argument("Conv2d: in (" + std::to_string(o.in) + ") and out (" + std::to_string(o.out) +
                                ") must be divisible by groups (" + std::to_string(o.groups) + ")");
  params = {.stride_h = o.stride, .stride_w = o.stride, .pad_h = o.padding, .pad_w = o.padding,
            .dilation_h = o.dilation, .dilation_w = o.dilation, .groups = o.groups};
  weight = Variable(empty({o.out, o.in / o.groups, kh, kw}), true);
  register_parameter("weight", weight);
  if (o.bias) {
    bias = Variable(empty({o.out}), true);
    register_parameter("bias", bias);
  }
  reset_parameters();
}

void Conv2d::reset_parameters() {
  init::kaiming_uniform_(weight.data(), std::sqrt(5.0));
  if (bias.defined()) {
    const auto [fan_in, fan_out] = init::calculate_fan_in_and_fan_out(weight.data());
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    init::uniform_(bias.data(), -bound, bound);
  }
}

std::string Conv2d::extra_repr() const {
  std::string s = std::to_string(options.in) + ", " + std::to_string(options.out) + ", kernel_size=(" +
                  std::to_string(weight.size(2)) + ", " + std::to_string(weight.size(3)) + "), stride=(" +
                  std::to_string(options.stride) + ", " + std::to_string(options.stride) + ")";
  if (options.padding) s += ", padding=(" + std::to_string(options.padding) + ", " + std::to_string(options.padding) + ")";
  if (options.dilation != 1) s += ", dilation=(" + std::to_string(options.dilation) + ", " + std::to_string(options.dilation) + ")";
  if (options.groups != 1) s += ", groups=" + std::to_string(options.groups);
  if (!options.bias) s += ", bias=False";
  return s;
}

Variable Conv2d::forward(const Variable& x) { return conv2d(x, weight, bias, params); }

}  // namespace minidl::nn
