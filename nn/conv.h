// nn/conv.h — Conv2d: x (N, in, H, W) -> (N, out, H_out, W_out), im2col + GEMM underneath.
// PyTorch's default init: kaiming_uniform(a = sqrt(5)) weights, bias ~ U(-1/sqrt(fan_in), ...).
#pragma once
#include "nn/module.h"

namespace minidl::nn {

struct Conv2dOptions {
  int64_t in = 0;
  int64_t out = 0;
  int64_t kernel = 1;  // square kernel; kernel_h/kernel_w override when > 0
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = true;
  int64_t kernel_h = 0, kernel_w = 0;
};

class Conv2d : public Module {
 public:
  explicit Conv2d(const Conv2dOptions& o);
  std::string type_name() const override { return "Conv2d"; }
  std::string extra_repr() const override;
  Variable forward(const Variable& x) override;
  void reset_parameters();

  Conv2dOptions options;
  Conv2dParams params;
  Variable weight;  // (out, in / groups, kh, kw)
  Variable bias;    // (out) or undefined
};

}  // namespace minidl::nn
