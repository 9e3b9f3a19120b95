// nn/conv.cpp — Conv2d and ConvTranspose2d layers (see conv.h).
#include "minidl/nn/conv.h"

#include <cmath>
#include <cstdio>

#include "minidl/nn/init.h"

namespace minidl::nn {

Conv2dPadding::Conv2dPadding(const std::string& n, int) {
  if (n == "same")
    same = true;
  else if (n != "valid")
    throw std::invalid_argument("Conv2d: padding must be a number, \"same\" or \"valid\", got \"" + n + "\"");
}

Conv2d::Conv2d(const Conv2dOptions& o) : options(o) {
  const int64_t kh = o.kernel_h > 0 ? o.kernel_h : o.kernel, kw = o.kernel_w > 0 ? o.kernel_w : o.kernel;
  const int64_t pad = o.padding.amount;
  if (o.in <= 0 || o.out <= 0 || kh <= 0 || kw <= 0 || o.stride <= 0 || o.dilation <= 0 || pad < 0)
    throw std::invalid_argument("Conv2d: invalid options (in=" + std::to_string(o.in) + ", out=" +
                                std::to_string(o.out) + ", kernel=" + std::to_string(kh) + "x" + std::to_string(kw) +
                                ", stride=" + std::to_string(o.stride) + ", padding=" + std::to_string(pad) + ")");
  if (o.padding.same && o.stride != 1)
    throw std::invalid_argument(
        "Conv2d: padding=\"same\" is not supported for strided convolutions (stride=" + std::to_string(o.stride) + ")");
  const std::string& mode = o.padding_mode;
  if (mode != "zeros" && mode != "reflect" && mode != "replicate" && mode != "circular")
    throw std::invalid_argument("Conv2d: padding_mode must be zeros, reflect, replicate or circular, got '" + mode +
                                "'");
  if (o.groups <= 0 || o.in % o.groups != 0 || o.out % o.groups != 0)
    throw std::invalid_argument("Conv2d: in (" + std::to_string(o.in) + ") and out (" + std::to_string(o.out) +
                                ") must be divisible by groups (" + std::to_string(o.groups) + ")");
  // (left, right) per spatial dim; "same": the total dilation (k - 1), the odd one on the right
  int64_t l_h = pad, r_h = pad, l_w = pad, r_w = pad;
  if (o.padding.same) {
    const int64_t th = o.dilation * (kh - 1), tw = o.dilation * (kw - 1);
    l_h = th / 2, r_h = th - l_h, l_w = tw / 2, r_w = tw - l_w;
  }
  const bool zeros_symmetric = mode == "zeros" && l_h == r_h && l_w == r_w;
  params = {.stride_h = o.stride,
            .stride_w = o.stride,
            .pad_h = zeros_symmetric ? l_h : 0,
            .pad_w = zeros_symmetric ? l_w : 0,
            .dilation_h = o.dilation,
            .dilation_w = o.dilation,
            .groups = o.groups};
  if (!zeros_symmetric) input_padding = {l_w, r_w, l_h, r_h};
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
  if (options.padding.same)
    s += ", padding=same";
  else if (options.padding.amount)
    s += ", padding=(" + std::to_string(options.padding.amount) + ", " + std::to_string(options.padding.amount) + ")";
  if (options.dilation != 1)
    s += ", dilation=(" + std::to_string(options.dilation) + ", " + std::to_string(options.dilation) + ")";
  if (options.groups != 1) s += ", groups=" + std::to_string(options.groups);
  if (!options.bias) s += ", bias=False";
  if (options.padding_mode != "zeros") s += ", padding_mode=" + options.padding_mode;
  return s;
}

Variable Conv2d::forward(const Variable& x) {
  if (input_padding.empty()) return conv2d(x, weight, bias, params);
  const std::string& m = options.padding_mode;
  const PadMode mode = m == "reflect"     ? PadMode::Reflect
                       : m == "replicate" ? PadMode::Replicate
                       : m == "circular"  ? PadMode::Circular
                                          : PadMode::Constant;
  return conv2d(pad(x, input_padding, mode), weight, bias, params);
}

ConvTranspose2d::ConvTranspose2d(const ConvTranspose2dOptions& o) : options(o) {
  if (o.in <= 0 || o.out <= 0 || o.kernel <= 0 || o.stride <= 0 || o.dilation <= 0 || o.padding < 0 ||
      o.output_padding < 0 || o.output_padding >= o.stride)
    throw std::invalid_argument("ConvTranspose2d: invalid options (in=" + std::to_string(o.in) +
                                ", out=" + std::to_string(o.out) + ", kernel=" + std::to_string(o.kernel) +
                                ", stride=" + std::to_string(o.stride) + ", padding=" + std::to_string(o.padding) +
                                ", output_padding=" + std::to_string(o.output_padding) +
                                "; output_padding must be smaller than stride)");
  if (o.groups <= 0 || o.in % o.groups != 0 || o.out % o.groups != 0)
    throw std::invalid_argument("ConvTranspose2d: in (" + std::to_string(o.in) + ") and out (" + std::to_string(o.out) +
                                ") must be divisible by groups (" + std::to_string(o.groups) + ")");
  params = {.stride_h = o.stride,
            .stride_w = o.stride,
            .pad_h = o.padding,
            .pad_w = o.padding,
            .output_padding_h = o.output_padding,
            .output_padding_w = o.output_padding,
            .dilation_h = o.dilation,
            .dilation_w = o.dilation,
            .groups = o.groups};
  weight = Variable(empty({o.in, o.out / o.groups, o.kernel, o.kernel}), true);
  register_parameter("weight", weight);
  if (o.bias) {
    bias = Variable(empty({o.out}), true);
    register_parameter("bias", bias);
  }
  reset_parameters();
}

// as Conv2d's: fan_in is dim 1 times the kernel area, here out / groups * kernel^2
void ConvTranspose2d::reset_parameters() {
  init::kaiming_uniform_(weight.data(), std::sqrt(5.0));
  if (bias.defined()) {
    const auto [fan_in, fan_out] = init::calculate_fan_in_and_fan_out(weight.data());
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    init::uniform_(bias.data(), -bound, bound);
  }
}

std::string ConvTranspose2d::extra_repr() const {
  auto pair = [](int64_t v) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "(%lld, %lld)", static_cast<long long>(v), static_cast<long long>(v));
    return std::string(buf);
  };
  std::string s = std::to_string(options.in) + ", " + std::to_string(options.out) +
                  ", kernel_size=" + pair(options.kernel) + ", stride=" + pair(options.stride);
  if (options.padding) s += ", padding=" + pair(options.padding);
  if (options.output_padding) s += ", output_padding=" + pair(options.output_padding);
  if (options.dilation != 1) s += ", dilation=" + pair(options.dilation);
  if (options.groups != 1) s += ", groups=" + std::to_string(options.groups);
  if (!options.bias) s += ", bias=False";
  return s;
}

}  // namespace minidl::nn
