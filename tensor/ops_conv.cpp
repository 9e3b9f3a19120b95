// tensor/ops_conv.cpp — conv2d forward/backward on Tensors (declared in tensor/ops_nn.h):
// stride, padding, dilation and groups, as torch.nn.functional.conv2d. Shapes are checked here,
// once, then the op runs on the CPU (im2col + GEMM, kernels/cpu/conv2d.h) or on CUDA (cuDNN,
// kernels/cuda/conv.cu). Inputs may be strided views: they are made contiguous first.
// 16-bit x and w (autocast's operands) give float32 results: on a CPU where conv2d_bf16_pays,
// bfloat16 ones run on the bfloat16 kernels (kernels/cpu/conv2d_bf16.h: an implicit GEMM on AMX
// tiles, or im2col + the bfloat16 GEMM); otherwise both are widened to float32 and take the
// float32 path.
//   x (N, C, H, W), w (O, C/groups, kH, kW), b (O) -> y (N, O, H_out, W_out)
//   H_out = (H + 2*pad_h - dil_h*(kH - 1) - 1) / stride_h + 1   (same for W)
#include <stdexcept>
#include <string>

#include "minidl/kernels/cpu/conv2d.h"
#include "minidl/kernels/cpu/conv2d_bf16.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/ops.h"
#include "minidl/tensor/ops_nn.h"
#include "minidl/tensor/cuda_dispatch.h"
#include "minidl/tensor/ops_nn_checks.h"

namespace minidl {

namespace {

std::string params_str(const Conv2dParams& p) {
  auto pair = [](int64_t a, int64_t b) { return "(" + std::to_string(a) + ", " + std::to_string(b) + ")"; };
  return "stride " + pair(p.stride_h, p.stride_w) + ", padding " + pair(p.pad_h, p.pad_w) + ", dilation " +
         pair(p.dilation_h, p.dilation_w) + ", groups " + std::to_string(p.groups);
}

// The dtype of y, b, dy and the gradients: x's, or float32 for 16-bit operands.
DType result_dtype(const Tensor& x) { return is_half(x.dtype()) ? DType::Float32 : x.dtype(); }

// Whether 16-bit operands run as the bfloat16 kernel (not widened to float32 first).
bool runs_bf16(const Tensor& x, const kernels::cpu::Conv2dShape& s) {
  return x.dtype() == DType::BFloat16 && !x.device().is_cuda() && kernels::cpu::conv2d_bf16_pays(s);
}

const uint16_t* bits(const Tensor& t) { return static_cast<const uint16_t*>(t.raw_data()); }  // bfloat16

Tensor widened(const Tensor& t) { return is_half(t.dtype()) ? t.to(DType::Float32) : t; }

// Checks x, w (and b when defined) against each other and p; returns the full geometry.
kernels::cpu::Conv2dShape conv_shape(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p,
                                     const char* op) {
  using nn_checks::require_float;
  require_float(x, op, "input");
  require_float(w, op, "weight");
  if (p.stride_h < 1 || p.stride_w < 1 || p.dilation_h < 1 || p.dilation_w < 1 || p.pad_h < 0 || p.pad_w < 0 ||
      p.groups < 1)
    throw std::invalid_argument(std::string(op) +
                                ": stride, dilation and groups must be positive and padding non-negative, got " +
                                params_str(p));
  if (w.dim() != 4)
    throw std::invalid_argument(std::string(op) + ": expected weight (C_out, C_in/groups, kH, kW), got " + w.desc());
  const int64_t O = w.size(0), Cg = w.size(1), kH = w.size(2), kW = w.size(3);
  if (O % p.groups != 0)
    throw std::invalid_argument(std::string(op) + ": C_out = " + std::to_string(O) + " of weight " + w.desc() +
                                " is not divisible by groups = " + std::to_string(p.groups));
  if (x.dim() != 4 || x.size(1) != Cg * p.groups)
    throw std::invalid_argument(
        std::string(op) + ": expected input (N, C, H, W) with C = " + std::to_string(Cg * p.groups) + " (weight " +
        shape_str(w.shape()) + (p.groups > 1 ? ", groups " + std::to_string(p.groups) : std::string()) + "), got " +
        x.desc());
  nn_checks::require_same_dtype(x, w, op, "input", "weight");
  if (b.defined()) {
    require_float(b, op, "bias");
    if (b.dim() != 1 || b.size(0) != O || b.dtype() != result_dtype(x))
      throw std::invalid_argument(std::string(op) + ": expected bias " + dtype_name(result_dtype(x)) + "[" +
                                  std::to_string(O) + "] for weight " + w.desc() + ", got " + b.desc());
  }
  kernels::cpu::Conv2dShape s{};
  s.N = x.size(0), s.C = x.size(1), s.H = x.size(2), s.W = x.size(3);
  s.O = O, s.kH = kH, s.kW = kW, s.groups = p.groups;
  s.stride_h = p.stride_h, s.stride_w = p.stride_w, s.pad_h = p.pad_h, s.pad_w = p.pad_w;
  s.dil_h = p.dilation_h, s.dil_w = p.dilation_w;
  const int64_t span_h = p.dilation_h * (kH - 1) + 1, span_w = p.dilation_w * (kW - 1) + 1;
  if (kH < 1 || kW < 1 || s.H + 2 * p.pad_h < span_h || s.W + 2 * p.pad_w < span_w)
    throw std::invalid_argument(std::string(op) + ": kernel " + shape_str(w.shape()) + " with " + params_str(p) +
                                " does not fit input " + x.desc() + " (padded input smaller than the dilated kernel)");
  s.H_out = (s.H + 2 * p.pad_h - span_h) / p.stride_h + 1;
  s.W_out = (s.W + 2 * p.pad_w - span_w) / p.stride_w + 1;
  return s;
}

// The same geometry for the cuDNN kernels (kernels/cuda_ops.h).
kernels::cuda::ConvGeometry cuda_geometry(const kernels::cpu::Conv2dShape& s) {
  return {s.N,        s.C,        s.H,     s.W,     s.O,     s.kH,    s.kW,    s.groups,
          s.stride_h, s.stride_w, s.pad_h, s.pad_w, s.dil_h, s.dil_w, s.H_out, s.W_out};
}

void* ptr_or_null(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

}  // namespace

Tensor conv2d_forward(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, const Conv2dParams& p) {
  constexpr const char* op = "conv2d";
  const bool cuda = cuda_dispatch::on_cuda({&x_in, &w_in, &b_in}, op);
  const kernels::cpu::Conv2dShape s = conv_shape(x_in, w_in, b_in, p, op);
  const Tensor b = b_in.defined() ? b_in.contiguous() : Tensor();
  if (runs_bf16(x_in, s)) {
    const Tensor x = x_in.contiguous(), w = w_in.contiguous();
    Tensor y({s.N, s.O, s.H_out, s.W_out}, DType::Float32);
    kernels::cpu::conv2d_bf16_forward(bits(x), bits(w), b.defined() ? b.data<float>() : nullptr, s, y.data<float>());
    return y;
  }
  const Tensor x = widened(x_in).contiguous(), w = widened(w_in).contiguous();
  Tensor y({s.N, s.O, s.H_out, s.W_out}, x.dtype(), x.device());
  if (cuda) {
    cuda_dispatch::use_device(x);
    kernels::cuda::conv2d_forward(cuda_dispatch::elem(x.dtype()), cuda_geometry(s), x.raw_data(), w.raw_data(),
                                  ptr_or_null(b), y.raw_data());
    return y;
  }
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::conv2d_forward(x.data<T>(), w.data<T>(), b.defined() ? b.data<T>() : nullptr, s, y.data<T>());
  });
  return y;
}

Conv2dGrads conv2d_backward(const Tensor& x_in, const Tensor& w_in, const Tensor& dy_in, bool has_bias,
                            const Conv2dParams& p, bool need_dx, DType round_dx) {
  constexpr const char* op = "conv2d_backward";
  if (round_dx != DType::Float32 && !is_half(round_dx))
    throw std::invalid_argument(std::string(op) + ": round_dx must be bfloat16, float16 or float32 (none), got " +
                                dtype_name(round_dx));
  const bool cuda = cuda_dispatch::on_cuda({&x_in, &w_in, &dy_in}, op);
  const kernels::cpu::Conv2dShape s = conv_shape(x_in, w_in, Tensor(), p, op);
  nn_checks::require_float(dy_in, op, "grad_output");
  const Shape y_shape{s.N, s.O, s.H_out, s.W_out};
  if (dy_in.shape() != y_shape || dy_in.dtype() != result_dtype(x_in))
    throw std::invalid_argument(std::string(op) + ": expected grad_output " + dtype_name(result_dtype(x_in)) +
                                shape_str(y_shape) + " for input " + x_in.desc() + " and weight " +
                                shape_str(w_in.shape()) + ", got " + dy_in.desc());
  Conv2dGrads g;
  if (runs_bf16(x_in, s)) {  // dy rounded to bfloat16 once for the GEMMs, and db from that, as linear's backward
    const Tensor x = x_in.contiguous(), w = w_in.contiguous(), dy16 = dy_in.to(DType::BFloat16);
    if (need_dx) g.dx = Tensor(x.shape(), DType::Float32);
    g.dw = Tensor(w.shape(), DType::Float32);
    kernels::cpu::conv2d_bf16_backward(bits(x), bits(w), bits(dy16), s, need_dx ? g.dx.data<float>() : nullptr,
                                       g.dw.data<float>(), round_dx == DType::BFloat16);
    if (need_dx && round_dx == DType::Float16) g.dx = round_to(g.dx, round_dx);
    if (has_bias) {
      g.db = Tensor({s.O}, DType::Float32);
      kernels::cpu::conv2d_bf16_bias_grad(bits(dy16), s, g.db.data<float>());
    }
    return g;
  }
  const Tensor x = widened(x_in).contiguous(), w = widened(w_in).contiguous(), dy = dy_in.contiguous();
  if (cuda) {
    if (need_dx) g.dx = Tensor(x.shape(), x.dtype(), x.device());
    g.dw = Tensor(w.shape(), w.dtype(), w.device());
    if (has_bias) g.db = Tensor({s.O}, x.dtype(), x.device());
    cuda_dispatch::use_device(x);
    kernels::cuda::conv2d_backward(cuda_dispatch::elem(x.dtype()), cuda_geometry(s), x.raw_data(), w.raw_data(),
                                   dy.raw_data(), need_dx ? g.dx.raw_data() : nullptr, g.dw.raw_data(),
                                   has_bias ? g.db.raw_data() : nullptr);
    if (need_dx && round_dx != DType::Float32) g.dx = round_to(g.dx, round_dx);
    return g;
  }
  if (need_dx) g.dx = Tensor(x.shape(), x.dtype());
  g.dw = Tensor(w.shape(), w.dtype());
  if (has_bias) g.db = Tensor({s.O}, x.dtype());
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::conv2d_backward(x.data<T>(), w.data<T>(), dy.data<T>(), s, need_dx ? g.dx.data<T>() : nullptr,
                                  g.dw.data<T>(), has_bias ? g.db.data<T>() : nullptr);
  });
  if (need_dx && round_dx != DType::Float32) g.dx = round_to(g.dx, round_dx);
  return g;
}

}  // namespace minidl
