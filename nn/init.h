// nn/init.h — parameter initialisers with PyTorch's formulas (torch.nn.init). All draw from the
// default Philox generator (manual_seed), so a model's initial weights depend only on the seed.
#pragma once
#include <string>
#include <utility>

#include "minidl/tensor/tensor.h"

namespace minidl::nn::init {

// (fan_in, fan_out) of a weight: Linear (out, in); Conv (out, in/groups, kh, kw) -> in*kh*kw, out*kh*kw
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& w);
// gain for "linear", "conv2d", "sigmoid", "tanh", "relu", "leaky_relu" (param = negative slope)
double calculate_gain(const std::string& nonlinearity, double param = 0.01);

Tensor& uniform_(Tensor& t, double a, double b);
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0);
Tensor& zeros_(Tensor& t);
Tensor& ones_(Tensor& t);
Tensor& constant_(Tensor& t, double value);
// mode: "fan_in" or "fan_out"
Tensor& kaiming_uniform_(Tensor& t, double a = 0.0, const std::string& mode = "fan_in",
                         const std::string& nonlinearity = "leaky_relu");
Tensor& kaiming_normal_(Tensor& t, double a = 0.0, const std::string& mode = "fan_in",
                        const std::string& nonlinearity = "leaky_relu");
Tensor& xavier_uniform_(Tensor& t, double gain = 1.0);
Tensor& xavier_normal_(Tensor& t, double gain = 1.0);
// normal(mean, std) truncated to [a, b] by resampling the values that fall outside
Tensor& trunc_normal_(Tensor& t, double mean = 0.0, double std = 1.0, double a = -2.0, double b = 2.0);

}  // namespace minidl::nn::init
