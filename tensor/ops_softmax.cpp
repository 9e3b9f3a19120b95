// tensor/ops_softmax.cpp — softmax and log_softmax along any dim, and their backward.
// The input is made contiguous and seen as (outer, len, inner) with the softmax dim in the
// middle; kernels/cpu/softmax.h (or kernels/cuda/softmax.cu, the same layout) does the stable
// (max-subtracted) math.
#include <stdexcept>
#include <string>

#include "minidl/kernels/cpu/softmax.h"
#include "minidl/tensor/ops.h"
#include "minidl/tensor/cuda_dispatch.h"
#include "minidl/tensor/ops_util.h"

namespace minidl {

namespace {

struct SoftmaxDims {
  int64_t outer = 1, len = 1, inner = 1;
};

SoftmaxDims softmax_dims(const Tensor& x, int64_t dim, const char* op) {
  dim = wrap_dim(dim, x.dim(), op);
  SoftmaxDims s;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < dim)
      s.outer *= x.size(d);
    else if (d == dim)
      s.len = x.size(d);
    else
      s.inner *= x.size(d);
  }
  return s;
}

Tensor softmax_impl(const Tensor& x_in, int64_t dim, bool log, const char* op) {
  const bool cuda = cuda_dispatch::on_cuda({&x_in}, op);
  detail::check_defined(x_in, op);
  const SoftmaxDims s = softmax_dims(x_in, dim, op);
  if (is_half(x_in.dtype())) return softmax_impl(x_in.to(DType::Float32), dim, log, op).to(x_in.dtype());
  const Tensor x = x_in.contiguous();
  Tensor y(x.shape(), x.dtype(), x.device());
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if (cuda) {
      cuda_dispatch::use_device(x);
      kernels::cuda::softmax_forward(cuda_dispatch::elem(x.dtype()), x.raw_data(), y.raw_data(), s.outer, s.len,
                                     s.inner, log);
      return;
    }
    kernels::cpu::softmax_forward(x.data<T>(), y.data<T>(), s.outer, s.len, s.inner, log);
  });
  return y;
}

Tensor softmax_backward_impl(const Tensor& y_in, const Tensor& dy_in, int64_t dim, bool log, const char* op) {
  const bool cuda = cuda_dispatch::on_cuda({&y_in, &dy_in}, op);
  detail::check_defined(y_in, op);
  detail::check_defined(dy_in, op);
  detail::check_same_dtype(y_in, dy_in, op);
  if (y_in.shape() != dy_in.shape())
    throw std::invalid_argument(std::string(op) + ": y and dy shapes differ: " + shape_str(y_in.shape()) + " vs " +
                                shape_str(dy_in.shape()));
  const SoftmaxDims s = softmax_dims(y_in, dim, op);
  const Tensor y = y_in.contiguous(), dy = dy_in.contiguous();
  Tensor dx(y.shape(), y.dtype(), y.device());
  dispatch_floating(y.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if (cuda) {
      cuda_dispatch::use_device(y);
      kernels::cuda::softmax_backward(cuda_dispatch::elem(y.dtype()), y.raw_data(), dy.raw_data(), dx.raw_data(),
                                      s.outer, s.len, s.inner, log);
      return;
    }
    kernels::cpu::softmax_backward(y.data<T>(), dy.data<T>(), dx.data<T>(), s.outer, s.len, s.inner, log);
  });
  return dx;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, false, "softmax"); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, true, "log_softmax"); }
Tensor softmax_backward(const Tensor& y, const Tensor& dy, int64_t dim) {
  return softmax_backward_impl(y, dy, dim, false, "softmax_backward");
}
Tensor log_softmax_backward(const Tensor& y, const Tensor& dy, int64_t dim) {
  return softmax_backward_impl(y, dy, dim, true, "log_softmax_backward");
}

}  // namespace minidl
