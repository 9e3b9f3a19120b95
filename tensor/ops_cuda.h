// tensor/ops_cuda.h — the CUDA branch of the tensor ops (internal, not a public header). Each op in
// tensor/ops_*.cpp starts with `if (cuda_ops::on_cuda({&a, &b}, "op")) return cuda_ops::...;`:
// on_cuda() is false for CPU tensors (the CPU code then runs unchanged), true when the inputs are
// on one CUDA device, and throws std::invalid_argument naming the op and both devices when they
// are mixed. The functions here check shapes like the CPU op, allocate outputs on the inputs'
// device and call the raw kernels of kernels/cuda_ops.h — which, in a build without CUDA, throw
// "built without CUDA" (but no CUDA tensor can exist there: allocating one already throws).
// Tested by tests/kernels/test_cuda_ops.cpp / test_cuda_nn.cpp (parity, skipped without a
// device) and tests/kernels/test_cuda_stub.cpp (the mixed-device and no-device errors, everywhere).
#pragma once
#include <initializer_list>
#include <vector>

#include "minidl/kernels/cuda_ops.h"
#include "minidl/tensor/ops.h"
#include "minidl/tensor/ops_nn.h"

namespace minidl::cuda_ops {

// True when any defined tensor is on CUDA (all then on the same device); throws on mixed devices.
bool on_cuda(std::initializer_list<const Tensor*> ts, const char* op);
bool on_cuda(const std::vector<Tensor>& ts, const char* op);

inline kernels::cuda::ElemType elem(DType t) { return static_cast<kernels::cuda::ElemType>(t); }
// The strided loop over `shape` for operands with the given strides (operand 0 = output);
// size-1 dims dropped, neighbouring dims merged when contiguous for every operand.
kernels::cuda::StridedIter make_iter(const Shape& shape, const std::vector<const Shape*>& strides, const char* op);
void use_device(const Tensor& t);  // makes t's device current for the kernels that follow
// The single element stride between consecutive matrices of t over the batch dims `batch_shape`
// (t's leading dims; size-1 dims ignored, all-broadcast gives 0): false when the batch dims do not
// step uniformly (a permuted view), and one strided-batched GEMM cannot address t as it is.
bool batch_stride(const Tensor& t, const Shape& batch_shape, int64_t& step);

// ---- element-wise through the shared functors (out has the loop's shape) ----
template <class Op>
void unary(const Tensor& out, const Tensor& x, const Op& f, const char* op) {
  const auto it = make_iter(out.shape(), {&out.strides(), &x.strides()}, op);
  use_device(out);
  kernels::cuda::elementwise(elem(out.dtype()), it, out.raw_data(), x.raw_data(), f);
}
template <class Op>
void binary(const Tensor& out, const Tensor& a, const Tensor& b, const Op& f, const char* op) {
  const auto it = make_iter(out.shape(), {&out.strides(), &a.strides(), &b.strides()}, op);
  use_device(out);
  kernels::cuda::elementwise(elem(out.dtype()), it, out.raw_data(), a.raw_data(), b.raw_data(), f);
}
template <class Op>
void ternary(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c, const Op& f, const char* op) {
  const auto it = make_iter(out.shape(), {&out.strides(), &a.strides(), &b.strides(), &c.strides()}, op);
  use_device(out);
  kernels::cuda::elementwise(elem(out.dtype()), it, out.raw_data(), a.raw_data(), b.raw_data(), c.raw_data(), f);
}

// ---- tensor core ----
void fill_(const Tensor& t, double value);
void copy_(const Tensor& dst, const Tensor& src);  // same CUDA device; src broadcast; dtype converted

// ---- reductions, softmax, indexing ----
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim, bool mean, const char* op);
Tensor var(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim);
MaxResult max(const Tensor& x, const Shape& dims, bool keepdim, const char* op);
Tensor topk_indices(const Tensor& x, int64_t k);
Tensor softmax(const Tensor& x, int64_t dim, bool log, const char* op);
Tensor softmax_backward(const Tensor& y, const Tensor& dy, int64_t dim, bool log, const char* op);
Tensor cat(const std::vector<Tensor>& ts, int64_t dim);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor index_add(const Shape& shape, int64_t dim, const Tensor& index, const Tensor& src);
Tensor gather_rows(const Tensor& x, const Tensor& target);

// ---- nn ----
Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p);
Conv2dGrads conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& dy, bool has_bias, const Conv2dParams& p);
MaxPool2dResult max_pool2d_forward(const Tensor& x, const Pool2dParams& p);
Tensor max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Shape& x_shape);
Tensor avg_pool2d_forward(const Tensor& x, const Pool2dParams& p);
Tensor avg_pool2d_backward(const Tensor& dy, const Shape& x_shape, const Pool2dParams& p);
Tensor adaptive_avg_pool2d_forward(const Tensor& x, int64_t out_h, int64_t out_w);
Tensor adaptive_avg_pool2d_backward(const Tensor& dy, const Shape& x_shape);
BatchNormStats batch_norm_stats(const Tensor& x, double eps);
Tensor batch_norm_elemt(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                        const Tensor& bias);
BatchNormReduce batch_norm_backward_reduce(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                                           const Tensor& weight);
Tensor batch_norm_backward_elemt(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                                 const Tensor& weight, const Tensor& sum_dy, const Tensor& sum_dy_xmu, int64_t count);
LayerNormResult layer_norm_forward(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                                   const Tensor& bias, double eps);
LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                                   const Shape& normalized_shape, const Tensor& weight);
Tensor dropout_mask(const Shape& shape, double p, RandomKey key, DType dtype, Device device);
Tensor cross_entropy_forward(const Tensor& logits, const Tensor& target, double label_smoothing);
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& target, double label_smoothing,
                              const Tensor& grad_loss);

}  // namespace minidl::cuda_ops
