// nn/conv.h — Conv2d: x (N, in, H, W) -> (N, out, H_out, W_out), im2col + GEMM underneath; and
// ConvTranspose2d, its adjoint in the input (col2im underneath; one GEMM and a scatter where kernel == stride).
// PyTorch's default init: kaiming_uniform(a = sqrt(5)) weights, bias ~ U(-1/sqrt(fan_in), ...).
// Padding as PyTorch's: a number, "same" (output size = input size; stride 1; an odd total goes
// to the right / bottom) or "valid" (none); padding_mode zeros, reflect, replicate or circular
// (other than zeros, and for uneven "same", the input is padded with autograd's pad first).
#pragma once
#include <string>

#include "minidl/nn/module.h"

namespace minidl::nn {

// .padding = 1 or .padding = "same" / "valid"
struct Conv2dPadding {
  Conv2dPadding(int64_t n = 0) : amount(n) {}  // NOLINT: implicit, like PyTorch's int argument
  template <size_t N>
  Conv2dPadding(const char (&name)[N]) : Conv2dPadding(std::string(name), 0) {}  // NOLINT: "same" / "valid"
  Conv2dPadding(const std::string& name, int);  // "same" or "valid"; anything else throws
  int64_t amount = 0;
  bool same = false;
};

struct Conv2dOptions {
  int64_t in = 0;
  int64_t out = 0;
  int64_t kernel = 1;  // square kernel; kernel_h/kernel_w override when > 0
  int64_t stride = 1;
  Conv2dPadding padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = true;
  int64_t kernel_h = 0, kernel_w = 0;
  std::string padding_mode = "zeros";  // zeros, reflect, replicate, circular
};

class Conv2d : public Module {
 public:
  explicit Conv2d(const Conv2dOptions& o);
  std::string type_name() const override { return "Conv2d"; }
  std::string extra_repr() const override;
  Variable forward(const Variable& x) override;
  void reset_parameters();

  Conv2dOptions options;
  Conv2dParams params;  // the convolution's own (symmetric, zero) padding
  std::vector<int64_t> input_padding;  // (left, right, top, bottom) applied first, or empty
  Variable weight;  // (out, in / groups, kh, kw)
  Variable bias;  // (out) or undefined
};

struct ConvTranspose2dOptions {
  int64_t in = 0;
  int64_t out = 0;
  int64_t kernel = 1;  // square kernel
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t output_padding = 0;  // added to one side of the output; smaller than stride
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

// ConvTranspose2d: x (N, in, H, W) -> (N, out, H_out, W_out),
// H_out = (H - 1) stride - 2 padding + dilation (kernel - 1) + output_padding + 1.
// PyTorch's weight layout (in, out / groups, kernel, kernel) and default init (as Conv2d's, with
// fan_in = out / groups * kernel^2 from that layout).
class ConvTranspose2d : public Module {
 public:
  explicit ConvTranspose2d(const ConvTranspose2dOptions& o);
  std::string type_name() const override { return "ConvTranspose2d"; }
  std::string extra_repr() const override;
  Variable forward(const Variable& x) override { return conv_transpose2d(x, weight, bias, params); }
  void reset_parameters();

  ConvTranspose2dOptions options;
  ConvTranspose2dParams params;
  Variable weight;  // (in, out / groups, kernel, kernel)
  Variable bias;  // (out) or undefined
};

}  // namespace minidl::nn
