// tensor/ops_pool.cpp — max_pool2d, avg_pool2d and adaptive_avg_pool2d on Tensors, each forward
// beside its backward (declared in tensor/ops_nn.h). Shapes are checked here, once; then the
// per-plane loops run on the CPU (kernels/cpu/pool.h, in parallel over the N*C planes) or on
// CUDA (kernels/cuda/pool.cu).
// x is (N, C, H, W) (or (C, H, W)); outputs keep the leading dims and replace (H, W).
#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>

#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/cpu/pool.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/ops_nn.h"
#include "minidl/tensor/cuda_dispatch.h"
#include "minidl/tensor/ops_nn_checks.h"

namespace minidl {

namespace {

using nn_checks::require_float;
namespace kc = kernels::cuda;

// The CPU loop every op here shares: body(src, dst, pl) for each of the `planes` planes, with src
// plane pl of `in` (in_plane elements each) and dst plane pl of `out` (out_plane elements each),
// float or double, planes in parallel in chunks of about 16K elements of the larger planes.
template <class F>
void for_each_plane(const Tensor& in, int64_t in_plane, Tensor& out, int64_t out_plane, int64_t planes, const char* op,
                    F&& body) {
  dispatch_floating(in.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* src = in.data<T>();
    T* dst = out.data<T>();
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>({in_plane, out_plane, 1}));
    kernels::cpu::parallel_for(planes, grain, [&](int64_t b, int64_t e) {
      for (int64_t pl = b; pl < e; ++pl) body(src + pl * in_plane, dst + pl * out_plane, pl);
    });
  });
}

void require_image(const Tensor& x, const char* op) {
  require_float(x, op, "input");
  if (x.dim() != 3 && x.dim() != 4)
    throw std::invalid_argument(std::string(op) + ": expected input (N, C, H, W) or (C, H, W), got " + x.desc());
}

void require_image_shape(const Shape& s, const char* op) {
  if (s.size() != 3 && s.size() != 4)
    throw std::invalid_argument(std::string(op) + ": expected input shape (N, C, H, W) or (C, H, W), got " +
                                shape_str(s));
}

// p with a stride of 0 replaced by the kernel's extent (PyTorch's default stride).
Pool2dParams with_default_stride(Pool2dParams p) {
  if (p.stride_h == 0) p.stride_h = p.kernel_h;
  if (p.stride_w == 0) p.stride_w = p.kernel_w;
  return p;
}

std::string params_str(const Pool2dParams& p) {
  return "kernel (" + std::to_string(p.kernel_h) + ", " + std::to_string(p.kernel_w) + "), stride (" +
         std::to_string(p.stride_h) + ", " + std::to_string(p.stride_w) + "), padding (" + std::to_string(p.pad_h) +
         ", " + std::to_string(p.pad_w) + ")";
}

// Validates the window and returns {H_out, W_out} (pool2d_out_extent: floor, or ceil_mode's rule).
std::pair<int64_t, int64_t> pool_out_size(int64_t H, int64_t W, const Pool2dParams& p, const char* op,
                                          const std::string& what) {
  if (p.kernel_h <= 0 || p.kernel_w <= 0 || p.stride_h <= 0 || p.stride_w <= 0 || p.pad_h < 0 || p.pad_w < 0)
    throw std::invalid_argument(
        std::string(op) +
        ": kernel and stride must be positive (a stride of 0 is the kernel) and padding non-negative, got " +
        params_str(p));
  if (2 * p.pad_h > p.kernel_h || 2 * p.pad_w > p.kernel_w)
    throw std::invalid_argument(std::string(op) + ": padding must be at most half the kernel size, got " +
                                params_str(p));
  if (H + 2 * p.pad_h < p.kernel_h || W + 2 * p.pad_w < p.kernel_w)
    throw std::invalid_argument(std::string(op) + ": " + params_str(p) + " gives an empty output for input " + what);
  return {pool2d_out_extent(H, p.kernel_h, p.stride_h, p.pad_h, p.ceil_mode),
          pool2d_out_extent(W, p.kernel_w, p.stride_w, p.pad_w, p.ceil_mode)};
}

kernels::cpu::PoolWindow window_of(const Pool2dParams& p) {
  return {p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w};
}
kc::PoolWindow cuda_window_of(const Pool2dParams& p) {
  return {p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w};
}

Shape with_spatial(Shape s, int64_t h, int64_t w) {
  s[s.size() - 2] = h;
  s[s.size() - 1] = w;
  return s;
}

// dy must be x_shape with (H, W) replaced by the expected output size.
void require_grad_shape(const Tensor& dy, const Shape& expected, const char* op, const Shape& x_shape) {
  if (dy.shape() != expected)
    throw std::invalid_argument(std::string(op) + ": expected grad_output of shape " + shape_str(expected) +
                                " for input " + shape_str(x_shape) + ", got " + dy.desc());
}

}  // namespace

// ---- max_pool2d ----

MaxPool2dResult max_pool2d_forward(const Tensor& x_in, const Pool2dParams& params) {
  const Pool2dParams p = with_default_stride(params);
  constexpr const char* op = "max_pool2d";
  const bool cuda = cuda_dispatch::on_cuda({&x_in}, op);
  require_image(x_in, op);
  const Tensor x = x_in.contiguous();  // (P = N*C planes, H, W)
  const int64_t H = x.size(x.dim() - 2), W = x.size(x.dim() - 1);
  const auto out_size = pool_out_size(H, W, p, op, x.desc());
  const int64_t H_out = out_size.first, W_out = out_size.second;  // plain locals: clang 14 cannot capture bindings
  const Shape out_shape = with_spatial(x.shape(), H_out, W_out);
  Tensor out(out_shape, x.dtype(), x.device()), indices(out_shape, DType::Int64, x.device());
  const int64_t planes = x.numel() / std::max<int64_t>(H * W, 1);
  if (cuda) {
    cuda_dispatch::use_device(x);
    kc::max_pool2d_forward(cuda_dispatch::elem(x.dtype()), x.raw_data(), planes, H, W, out.raw_data(),
                           indices.data<int64_t>(), H_out, W_out, cuda_window_of(p));
    return {out, indices};
  }
  const auto win = window_of(p);
  int64_t* ip = indices.data<int64_t>();
  // 2x2 windows at stride 2 without padding (the reference CNN's) take the unrolled path.
  const bool two_by_two =
      p.kernel_h == 2 && p.kernel_w == 2 && p.stride_h == 2 && p.stride_w == 2 && p.pad_h == 0 && p.pad_w == 0;
  const int64_t n_out = H_out * W_out;
  for_each_plane(x, H * W, out, n_out, planes, op, [&](const auto* xp, auto* yp, int64_t pl) {
    if (two_by_two)
      kernels::cpu::max_pool2d_plane_forward_2x2(xp, H, W, yp, ip + pl * n_out, H_out, W_out);
    else
      kernels::cpu::max_pool2d_plane_forward(xp, H, W, yp, ip + pl * n_out, H_out, W_out, win);
  });
  return {out, indices};
}

Tensor max_pool2d_backward(const Tensor& dy_in, const Tensor& indices_in, const Shape& x_shape,
                           const Pool2dParams& params) {
  const Pool2dParams p = with_default_stride(params);
  constexpr const char* op = "max_pool2d_backward";
  const bool cuda = cuda_dispatch::on_cuda({&dy_in, &indices_in}, op);
  require_image_shape(x_shape, op);
  require_float(dy_in, op, "grad_output");
  nn_checks::require_defined(indices_in, op, "indices");
  if (indices_in.dtype() != DType::Int64 || indices_in.shape() != dy_in.shape())
    throw std::invalid_argument(std::string(op) + ": expected int64 indices on " + dy_in.device().str() +
                                " shaped like grad_output " + dy_in.desc() + ", got " + indices_in.desc());
  const int64_t H = x_shape[x_shape.size() - 2], W = x_shape.back();
  const auto out_size = pool_out_size(H, W, p, op, shape_str(x_shape));
  const int64_t H_out = out_size.first, W_out = out_size.second;
  require_grad_shape(dy_in, with_spatial(x_shape, H_out, W_out), op, x_shape);
  const Tensor dy = dy_in.contiguous(), indices = indices_in.contiguous();
  const int64_t n_out = H_out * W_out;
  const int64_t planes = shape_numel(x_shape) / std::max<int64_t>(H * W, 1);
  const int64_t* ip = indices.data<int64_t>();
  Tensor dx(x_shape, dy.dtype(), dy.device());  // every plane is overwritten by the kernel
  if (cuda) {
    cuda_dispatch::use_device(dy);
    kc::max_pool2d_backward(cuda_dispatch::elem(dy.dtype()), dy.raw_data(), ip, planes, H_out, W_out, H, W,
                            cuda_window_of(p), dx.raw_data());
    return dx;
  }
  std::atomic<bool> ok{true};
  for_each_plane(dy, n_out, dx, H * W, planes, op, [&](const auto* gp, auto* dxp, int64_t pl) {
    if (!kernels::cpu::max_pool2d_plane_backward(gp, ip + pl * n_out, n_out, dxp, H * W)) ok = false;
  });
  if (!ok)
    for (int64_t i = 0; i < indices.numel(); ++i)
      if (ip[i] < 0 || ip[i] >= H * W)
        throw std::invalid_argument(std::string(op) + ": index " + std::to_string(ip[i]) + " is outside the " +
                                    std::to_string(H) + "x" + std::to_string(W) + " plane of input " +
                                    shape_str(x_shape));
  return dx;
}

// ---- avg_pool2d ----

Tensor avg_pool2d_forward(const Tensor& x_in, const Pool2dParams& params) {
  const Pool2dParams p = with_default_stride(params);
  constexpr const char* op = "avg_pool2d";
  const bool cuda = cuda_dispatch::on_cuda({&x_in}, op);
  require_image(x_in, op);
  const Tensor x = x_in.contiguous();
  const int64_t H = x.size(x.dim() - 2), W = x.size(x.dim() - 1);
  const auto out_size = pool_out_size(H, W, p, op, x.desc());
  const int64_t H_out = out_size.first, W_out = out_size.second;  // plain locals: clang 14 cannot capture bindings
  Tensor out(with_spatial(x.shape(), H_out, W_out), x.dtype(), x.device());
  const int64_t planes = x.numel() / std::max<int64_t>(H * W, 1);
  if (cuda) {
    cuda_dispatch::use_device(x);
    kc::avg_pool2d_forward(cuda_dispatch::elem(x.dtype()), x.raw_data(), planes, H, W, out.raw_data(), H_out, W_out,
                           cuda_window_of(p), p.count_include_pad);
    return out;
  }
  const auto win = window_of(p);
  for_each_plane(x, H * W, out, H_out * W_out, planes, op, [&](const auto* xp, auto* yp, int64_t) {
    kernels::cpu::avg_pool2d_plane_forward(xp, H, W, yp, H_out, W_out, win, p.count_include_pad);
  });
  return out;
}

Tensor avg_pool2d_backward(const Tensor& dy_in, const Shape& x_shape, const Pool2dParams& params) {
  const Pool2dParams p = with_default_stride(params);
  constexpr const char* op = "avg_pool2d_backward";
  const bool cuda = cuda_dispatch::on_cuda({&dy_in}, op);
  require_image_shape(x_shape, op);
  require_float(dy_in, op, "grad_output");
  const int64_t H = x_shape[x_shape.size() - 2], W = x_shape.back();
  const auto out_size = pool_out_size(H, W, p, op, shape_str(x_shape));
  const int64_t H_out = out_size.first, W_out = out_size.second;  // plain locals: clang 14 cannot capture bindings
  require_grad_shape(dy_in, with_spatial(x_shape, H_out, W_out), op, x_shape);
  const Tensor dy = dy_in.contiguous();
  const int64_t planes = shape_numel(x_shape) / std::max<int64_t>(H * W, 1);
  if (cuda) {  // the kernel writes every element of dx
    Tensor dx(x_shape, dy.dtype(), dy.device());
    cuda_dispatch::use_device(dy);
    kc::avg_pool2d_backward(cuda_dispatch::elem(dy.dtype()), dy.raw_data(), planes, H_out, W_out, dx.raw_data(), H, W,
                            cuda_window_of(p), p.count_include_pad);
    return dx;
  }
  Tensor dx = zeros(x_shape, dy.dtype());
  const auto win = window_of(p);
  for_each_plane(dy, H_out * W_out, dx, H * W, planes, op, [&](const auto* gp, auto* dxp, int64_t) {
    kernels::cpu::avg_pool2d_plane_backward(gp, H_out, W_out, dxp, H, W, win, p.count_include_pad);
  });
  return dx;
}

// ---- adaptive_avg_pool2d ----

Tensor adaptive_avg_pool2d_forward(const Tensor& x_in, int64_t out_h, int64_t out_w) {
  constexpr const char* op = "adaptive_avg_pool2d";
  const bool cuda = cuda_dispatch::on_cuda({&x_in}, op);
  require_image(x_in, op);
  if (out_h <= 0 || out_w <= 0)
    throw std::invalid_argument(std::string(op) + ": output size must be positive, got (" + std::to_string(out_h) +
                                ", " + std::to_string(out_w) + ") for input " + x_in.desc());
  const Tensor x = x_in.contiguous();
  const int64_t H = x.size(x.dim() - 2), W = x.size(x.dim() - 1);
  if (H <= 0 || W <= 0)
    throw std::invalid_argument(std::string(op) + ": expected a non-empty plane, got input " + x.desc());
  Tensor out(with_spatial(x.shape(), out_h, out_w), x.dtype(), x.device());
  const int64_t planes = x.numel() / (H * W);
  if (cuda) {
    cuda_dispatch::use_device(x);
    kc::adaptive_avg_pool2d_forward(cuda_dispatch::elem(x.dtype()), x.raw_data(), planes, H, W, out.raw_data(), out_h,
                                    out_w);
    return out;
  }
  for_each_plane(x, H * W, out, out_h * out_w, planes, op, [&](const auto* xp, auto* yp, int64_t) {
    kernels::cpu::adaptive_avg_pool2d_plane_forward(xp, H, W, yp, out_h, out_w);
  });
  return out;
}

Tensor adaptive_avg_pool2d_backward(const Tensor& dy_in, const Shape& x_shape) {
  constexpr const char* op = "adaptive_avg_pool2d_backward";
  const bool cuda = cuda_dispatch::on_cuda({&dy_in}, op);
  require_image_shape(x_shape, op);
  require_float(dy_in, op, "grad_output");
  if (dy_in.dim() != static_cast<int64_t>(x_shape.size()) ||
      !std::equal(x_shape.begin(), x_shape.end() - 2, dy_in.shape().begin()))
    throw std::invalid_argument(std::string(op) + ": grad_output " + dy_in.desc() +
                                " does not match the leading dims of input " + shape_str(x_shape));
  const Tensor dy = dy_in.contiguous();
  const int64_t H = x_shape[x_shape.size() - 2], W = x_shape.back();
  const int64_t out_h = dy.size(dy.dim() - 2), out_w = dy.size(dy.dim() - 1);
  if (H <= 0 || W <= 0 || out_h <= 0 || out_w <= 0) return zeros(x_shape, dy.dtype(), dy.device());
  const int64_t planes = shape_numel(x_shape) / (H * W);
  if (!cuda && kernels::cpu::adaptive_windows_tile(H, out_h, W, out_w)) {  // each input written once
    Tensor dx(x_shape, dy.dtype());
    for_each_plane(dy, out_h * out_w, dx, H * W, planes, op, [&](const auto* gp, auto* dxp, int64_t) {
      kernels::cpu::adaptive_avg_pool2d_plane_backward_tiled(gp, out_h, out_w, dxp, H, W);
    });
    return dx;
  }
  Tensor dx = zeros(x_shape, dy.dtype(), dy.device());
  if (cuda) {
    cuda_dispatch::use_device(dy);
    kc::adaptive_avg_pool2d_backward(cuda_dispatch::elem(dy.dtype()), dy.raw_data(), planes, out_h, out_w,
                                     dx.raw_data(), H, W);
    return dx;
  }
  for_each_plane(dy, out_h * out_w, dx, H * W, planes, op, [&](const auto* gp, auto* dxp, int64_t) {
    kernels::cpu::adaptive_avg_pool2d_plane_backward(gp, out_h, out_w, dxp, H, W);
  });
  return dx;
}

}  // namespace minidl
