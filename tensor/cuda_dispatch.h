// tensor/cuda_dispatch.h — where a tensor op runs (internal, not a public header). Each op family
// file (ops_elementwise.cpp, ops_conv.cpp, ops_pool.cpp, ...) checks its arguments once, asks
// on_cuda() where its tensors are, then calls its CPU loops (kernels/cpu/) or its CUDA kernel
// (kernels/cuda_ops.h) with outputs allocated on the inputs' device. on_cuda() is false for CPU
// tensors, true when the inputs are on one CUDA device, and throws std::invalid_argument naming
// the op and both devices when they are mixed. In a build without CUDA the kernels throw "built
// without CUDA" (but no CUDA tensor can exist there: allocating one already throws). Tested by
// tests/kernels/test_cuda_host.cpp (make_iter, batch_stride, on the CPU), test_cuda_ops.cpp /
// test_cuda_nn.cpp (parity, skipped without a device) and test_cuda_stub.cpp (the mixed-device
// and no-device errors, everywhere).
#pragma once
#include <initializer_list>
#include <vector>

#include "minidl/kernels/cuda_ops.h"
#include "minidl/tensor/ops.h"

namespace minidl::cuda_dispatch {

// True when any defined tensor is on CUDA (all then on the same device); throws on mixed devices.
bool on_cuda(std::initializer_list<const Tensor*> ts, const char* op);
bool on_cuda(const std::vector<Tensor>& ts, const char* op);

inline kernels::cuda::ElemType elem(DType t) { return static_cast<kernels::cuda::ElemType>(t); }
// The strided loop over `shape` for operands with the given strides (operand 0 = output);
// size-1 dims dropped, neighbouring dims merged when contiguous for every operand (the CPU
// loops' rule: kernels/strided.h).
kernels::cuda::StridedIter make_iter(const Shape& shape, const std::vector<const Shape*>& strides, const char* op);
void use_device(const Tensor& t);  // makes t's device current for the kernels that follow
// The single element stride between consecutive matrices of t over the batch dims `batch_shape`
// (t's leading dims; size-1 dims ignored, all-broadcast gives 0): false when the batch dims do not
// step uniformly (a permuted view), and one strided-batched GEMM cannot address t as it is.
bool batch_stride(const Tensor& t, const Shape& batch_shape, int64_t& step);

// ---- element-wise through the shared functors (out has the loop's shape) ----
template <class Op> void unary(const Tensor& out, const Tensor& x, const Op& f, const char* op) {
  const auto it = make_iter(out.shape(), {&out.strides(), &x.strides()}, op);
  use_device(out);
  kernels::cuda::elementwise(elem(out.dtype()), it, out.raw_data(), x.raw_data(), f);
}
template <class Op> void binary(const Tensor& out, const Tensor& a, const Tensor& b, const Op& f, const char* op) {
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

}  // namespace minidl::cuda_dispatch
