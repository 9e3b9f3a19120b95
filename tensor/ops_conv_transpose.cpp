// tensor/ops_conv_transpose.cpp — conv_transpose2d forward/backward on Tensors (declared in
// tensor/ops_nn.h), as torch.nn.functional.conv_transpose2d. A transposed convolution is the
// gradient of conv2d with respect to its input; kernels/cpu/conv_transpose2d.h runs it with the
// geometry of the convolution that maps y's shape to x's shape (same weight, stride, padding,
// dilation, groups): the forward as that convolution's input gradient (col2im), or, where kernel
// == stride without padding (outputs that do not overlap), as one GEMM per image and a scatter;
// the backward as conv2d's forward (dx) and weight gradient (dw), or the gather and two GEMMs.
// Shapes are checked here, once; the op runs on the CPU only.
#include <stdexcept>
#include <string>

#include "minidl/kernels/cpu/conv_transpose2d.h"
#include "minidl/tensor/cuda_dispatch.h"
#include "minidl/tensor/ops.h"
#include "minidl/tensor/ops_nn.h"
#include "minidl/tensor/ops_nn_checks.h"

namespace minidl {

namespace {

std::string params_str(const ConvTranspose2dParams& p) {
  auto pair = [](int64_t a, int64_t b) { return "(" + std::to_string(a) + ", " + std::to_string(b) + ")"; };
  return "stride " + pair(p.stride_h, p.stride_w) + ", padding " + pair(p.pad_h, p.pad_w) + ", output_padding " +
         pair(p.output_padding_h, p.output_padding_w) + ", dilation " + pair(p.dilation_h, p.dilation_w) + ", groups " +
         std::to_string(p.groups);
}

// Checks x, w (and b when defined) against each other and p; returns the geometry of the
// convolution whose input is y (N, C_out, H_out, W_out) and whose output is x (N, C_in, H, W).
kernels::cpu::Conv2dShape transposed_shape(const Tensor& x, const Tensor& w, const Tensor& b,
                                           const ConvTranspose2dParams& p, const char* op) {
  using nn_checks::require_float;
  require_float(x, op, "input");
  require_float(w, op, "weight");
  if (p.stride_h < 1 || p.stride_w < 1 || p.dilation_h < 1 || p.dilation_w < 1 || p.pad_h < 0 || p.pad_w < 0 ||
      p.groups < 1 || p.output_padding_h < 0 || p.output_padding_w < 0)
    throw std::invalid_argument(std::string(op) +
                                ": stride, dilation and groups must be positive and padding non-negative, got " +
                                params_str(p));
  if (p.output_padding_h >= p.stride_h || p.output_padding_w >= p.stride_w)
    throw std::invalid_argument(std::string(op) + ": output_padding must be smaller than the stride, got " +
                                params_str(p));
  if (w.dim() != 4)
    throw std::invalid_argument(std::string(op) + ": expected weight (C_in, C_out/groups, kH, kW), got " + w.desc());
  const int64_t C_in = w.size(0), kH = w.size(2), kW = w.size(3);
  if (C_in % p.groups != 0)
    throw std::invalid_argument(std::string(op) + ": C_in = " + std::to_string(C_in) + " of weight " + w.desc() +
                                " is not divisible by groups = " + std::to_string(p.groups));
  if (x.dim() != 4 || x.size(1) != C_in)
    throw std::invalid_argument(std::string(op) + ": expected input (N, C, H, W) with C = " + std::to_string(C_in) +
                                " (weight " + shape_str(w.shape()) + "), got " + x.desc());
  nn_checks::require_same_dtype(x, w, op, "input", "weight");
  const int64_t C_out = w.size(1) * p.groups;
  if (b.defined()) {
    require_float(b, op, "bias");
    if (b.dim() != 1 || b.size(0) != C_out || b.dtype() != x.dtype())
      throw std::invalid_argument(std::string(op) + ": expected bias " + dtype_name(x.dtype()) + "[" +
                                  std::to_string(C_out) + "] for weight " + w.desc() + ", got " + b.desc());
  }
  kernels::cpu::Conv2dShape s{};
  s.N = x.size(0), s.O = C_in, s.H_out = x.size(2), s.W_out = x.size(3);
  s.C = C_out, s.kH = kH, s.kW = kW, s.groups = p.groups;
  s.stride_h = p.stride_h, s.stride_w = p.stride_w, s.pad_h = p.pad_h, s.pad_w = p.pad_w;
  s.dil_h = p.dilation_h, s.dil_w = p.dilation_w;
  s.H = (s.H_out - 1) * p.stride_h - 2 * p.pad_h + p.dilation_h * (kH - 1) + p.output_padding_h + 1;
  s.W = (s.W_out - 1) * p.stride_w - 2 * p.pad_w + p.dilation_w * (kW - 1) + p.output_padding_w + 1;
  if (kH < 1 || kW < 1 || s.H < 1 || s.W < 1 || s.H_out < 1 || s.W_out < 1)
    throw std::invalid_argument(std::string(op) + ": input " + x.desc() + " with weight " + shape_str(w.shape()) +
                                " and " + params_str(p) + " gives an empty output (" + std::to_string(s.H) + " x " +
                                std::to_string(s.W) + ")");
  return s;
}

}  // namespace

Tensor conv_transpose2d_forward(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in,
                                const ConvTranspose2dParams& p) {
  constexpr const char* op = "conv_transpose2d";
  if (cuda_dispatch::on_cuda({&x_in, &w_in, &b_in}, op))
    throw std::invalid_argument("conv_transpose2d is not implemented on CUDA (input " + x_in.desc() + ")");
  const kernels::cpu::Conv2dShape s = transposed_shape(x_in, w_in, b_in, p, op);
  const Tensor x = x_in.contiguous(), w = w_in.contiguous();
  const Tensor b = b_in.defined() ? b_in.contiguous() : Tensor();
  Tensor y({s.N, s.C, s.H, s.W}, x.dtype());
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::conv_transpose2d_forward(x.data<T>(), w.data<T>(), b.defined() ? b.data<T>() : nullptr, s,
                                           y.data<T>());
  });
  return y;
}

Conv2dGrads conv_transpose2d_backward(const Tensor& x_in, const Tensor& w_in, const Tensor& dy_in, bool has_bias,
                                      const ConvTranspose2dParams& p, bool need_dx) {
  constexpr const char* op = "conv_transpose2d_backward";
  const kernels::cpu::Conv2dShape s = transposed_shape(x_in, w_in, Tensor(), p, op);
  nn_checks::require_float(dy_in, op, "grad_output");
  const Shape y_shape{s.N, s.C, s.H, s.W};
  if (dy_in.shape() != y_shape || dy_in.dtype() != x_in.dtype())
    throw std::invalid_argument(std::string(op) + ": expected grad_output " + dtype_name(x_in.dtype()) +
                                shape_str(y_shape) + " for input " + x_in.desc() + " and weight " +
                                shape_str(w_in.shape()) + ", got " + dy_in.desc());
  // dy's images may lie apart (a slice of torch.cat's gradient) when each image's (C, H, W) is
  // contiguous: the kernel reads them in place
  const bool images_contiguous = dy_in.stride(3) == 1 && dy_in.stride(2) == s.W && dy_in.stride(1) == s.H * s.W;
  const Tensor x = x_in.contiguous(), w = w_in.contiguous(), dy = images_contiguous ? dy_in : dy_in.contiguous();
  Conv2dGrads g;
  if (need_dx) g.dx = Tensor(x.shape(), x.dtype());
  g.dw = Tensor(w.shape(), w.dtype());
  if (has_bias) g.db = Tensor({s.C}, x.dtype());
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::conv_transpose2d_backward(x.data<T>(), w.data<T>(), dy.data<T>(), dy.stride(0), s,
                                            need_dx ? g.dx.data<T>() : nullptr, g.dw.data<T>(),
                                            has_bias ? g.db.data<T>() : nullptr);
  });
  return g;
}

}  // namespace minidl
