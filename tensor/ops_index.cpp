// tensor/ops_index.cpp — joining and indexing: cat, stack, index_select, index_add (its
// backward) and gather_rows (picks x[i, target[i]], for cross-entropy and accuracy), on the CPU
// (kernels/cpu/index.h) or on CUDA (kernels/cuda/index.cu, softmax.cu). Index values are checked
// on the host for both.
#include <stdexcept>
#include <string>

#include "minidl/kernels/cpu/index.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/ops.h"
#include "minidl/tensor/cuda_dispatch.h"
#include "minidl/tensor/ops_util.h"

namespace minidl {

using detail::check_defined;
namespace kc = kernels::cuda;

namespace {

// Checks the int64 indices against `size` on the host; returns them there, contiguous (a copy
// from the device for CUDA tensors; a 0-d index counts as one index).
Tensor check_index(const Tensor& index, int64_t size, const char* op) {
  check_defined(index, op);
  if (index.dtype() != DType::Int64)
    throw std::invalid_argument(std::string(op) + ": index must be int64, got " + dtype_name(index.dtype()));
  if (index.dim() > 1) throw std::invalid_argument(std::string(op) + ": index must be 1-d, got " + index.desc());
  const Tensor c = index.cpu().contiguous();
  const int64_t* p = c.data<int64_t>();
  for (int64_t i = 0; i < c.numel(); ++i)
    if (p[i] < 0 || p[i] >= size)
      throw std::out_of_range(std::string(op) + ": index " + std::to_string(p[i]) + " out of range for size " +
                              std::to_string(size));
  return c;
}

// (outer, n, inner) around dim
void split_dims(const Shape& shape, int64_t dim, int64_t& outer, int64_t& inner) {
  outer = inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < dim) outer *= shape[d];
    if (d > dim) inner *= shape[d];
  }
}

}  // namespace

Tensor cat(const std::vector<Tensor>& ts, int64_t dim) {
  if (ts.empty()) throw std::invalid_argument("cat: expected a non-empty list of tensors");
  cuda_dispatch::on_cuda(ts, "cat");  // one device for all (then copy_ runs on it)
  const Tensor& first = ts[0];
  check_defined(first, "cat");
  if (first.dim() == 0) throw std::invalid_argument("cat: zero-dimensional tensors cannot be concatenated");
  dim = wrap_dim(dim, first.dim(), "cat");
  Shape shape = first.shape();
  shape[dim] = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    check_defined(t, "cat");
    detail::check_same_dtype(first, t, "cat");
    bool ok = t.dim() == first.dim();
    for (int64_t d = 0; ok && d < t.dim(); ++d) ok = d == dim || t.size(d) == first.size(d);
    if (!ok)
      throw std::invalid_argument("cat: tensor " + std::to_string(i) + " has shape " + shape_str(t.shape()) +
                                  ", expected " + shape_str(first.shape()) + " except in dim " + std::to_string(dim));
    shape[dim] += t.size(dim);
  }
  Tensor out(shape, first.dtype(), first.device());
  int64_t offset = 0;
  for (const Tensor& t : ts) {
    if (t.size(dim) > 0) out.narrow(dim, offset, t.size(dim)).copy_(t);
    offset += t.size(dim);
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& ts, int64_t dim) {
  if (ts.empty()) throw std::invalid_argument("stack: expected a non-empty list of tensors");
  dim = wrap_dim(dim, ts[0].dim() + 1, "stack");
  std::vector<Tensor> us;
  us.reserve(ts.size());
  cuda_dispatch::on_cuda(ts, "stack");
  for (size_t i = 0; i < ts.size(); ++i) {
    check_defined(ts[i], "stack");
    if (ts[i].shape() != ts[0].shape())
      throw std::invalid_argument("stack: tensor " + std::to_string(i) + " has shape " + shape_str(ts[i].shape()) +
                                  ", expected " + shape_str(ts[0].shape()));
    us.push_back(ts[i].unsqueeze(dim));
  }
  return cat(us, dim);
}

Tensor index_select(const Tensor& x_in, int64_t dim, const Tensor& index_in) {
  const bool cuda = cuda_dispatch::on_cuda({&x_in, &index_in}, "index_select");
  check_defined(x_in, "index_select");
  if (x_in.dim() == 0) throw std::invalid_argument("index_select: expected at least a 1-d tensor, got " + x_in.desc());
  dim = wrap_dim(dim, x_in.dim(), "index_select");
  const Tensor index_host = check_index(index_in, x_in.size(dim), "index_select");
  const Tensor x = x_in.contiguous(), index = index_in.contiguous();
  Shape shape = x.shape();
  shape[dim] = index.numel();
  Tensor out(shape, x.dtype(), x.device());  // x's shape with dim resized to index.numel()
  int64_t outer, inner;
  split_dims(x.shape(), dim, outer, inner);
  if (cuda) {  // the indices the kernel reads are the device copy
    cuda_dispatch::use_device(x);
    kc::index_select(cuda_dispatch::elem(x.dtype()), x.raw_data(), index.data<int64_t>(), out.raw_data(), outer,
                     x.size(dim), index.numel(), inner);
    return out;
  }
  dispatch(x.dtype(), "index_select", [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::index_select_kernel(x.data<T>(), index.data<int64_t>(), out.data<T>(), outer, x.size(dim),
                                      index.numel(), inner);
  });
  return out;
}

Tensor index_add(const Shape& shape, int64_t dim, const Tensor& index_in, const Tensor& src_in) {
  const bool cuda = cuda_dispatch::on_cuda({&index_in, &src_in}, "index_add");
  check_defined(src_in, "index_add");
  const int64_t nd = static_cast<int64_t>(shape.size());
  if (nd == 0) throw std::invalid_argument("index_add: expected at least a 1-d shape");
  dim = wrap_dim(dim, nd, "index_add");
  const Tensor index = check_index(index_in, shape[dim], "index_add");  // on the host
  Shape want = shape;
  want[dim] = index_in.numel();
  if (src_in.shape() != want)
    throw std::invalid_argument("index_add: src has shape " + shape_str(src_in.shape()) + ", expected " +
                                shape_str(want) + " for output shape " + shape_str(shape) + " and " +
                                std::to_string(index_in.numel()) + " indices along dim " + std::to_string(dim));
  const Tensor src = src_in.contiguous();
  int64_t outer, inner;
  split_dims(shape, dim, outer, inner);
  if (cuda) {  // the kernel zeroes out, then adds in index order (the CPU's order: the same sums)
    Tensor out(shape, src.dtype(), src.device());
    cuda_dispatch::use_device(src);
    kc::index_add(cuda_dispatch::elem(src.dtype()), src.raw_data(), index.data<int64_t>(), out.raw_data(), outer,
                  shape[dim], index.numel(), inner);
    return out;
  }
  Tensor out = zeros(shape, src.dtype());
  dispatch(src.dtype(), "index_add", [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::index_add_kernel(src.data<T>(), index.data<int64_t>(), out.data<T>(), outer, shape[dim],
                                   index.numel(), inner);
  });
  return out;
}

Tensor gather_rows(const Tensor& x, const Tensor& target) {
  const bool cuda = cuda_dispatch::on_cuda({&x, &target}, "gather_rows");
  check_defined(x, "gather_rows");
  check_defined(target, "gather_rows");
  if (x.dim() != 2) throw std::invalid_argument("gather_rows: expected a 2-d x, got " + x.desc());
  if (target.dtype() != DType::Int64 || target.dim() != 1 || target.size(0) != x.size(0))
    throw std::invalid_argument("gather_rows: target must be int64 of shape [" + std::to_string(x.size(0)) + "], got " +
                                target.desc());
  const int64_t n = x.size(0), c = x.size(1);
  const int64_t ts = n > 0 ? target.stride(0) : 1;
  const Tensor target_host = target.cpu();  // the tensor itself on the CPU; a contiguous copy from CUDA
  const int64_t* th = target_host.data<int64_t>();
  const int64_t hs = n > 0 ? target_host.stride(0) : 1;
  for (int64_t i = 0; i < n; ++i)
    if (th[i * hs] < 0 || th[i * hs] >= c)
      throw std::out_of_range("gather_rows: target " + std::to_string(th[i * hs]) + " out of range for " +
                              std::to_string(c) + " classes (row " + std::to_string(i) + ")");
  Tensor out({n}, x.dtype(), x.device());  // (N)
  if (cuda) {
    cuda_dispatch::use_device(x);
    kc::gather_rows(cuda_dispatch::elem(x.dtype()), x.raw_data(), x.stride(0), x.stride(1), target.data<int64_t>(), ts,
                    n, out.raw_data());
    return out;
  }
  const int64_t* t = target.data<int64_t>();
  dispatch(x.dtype(), "gather_rows", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* o = out.data<T>();
    for (int64_t i = 0; i < n; ++i) o[i] = px[i * x.stride(0) + t[i * ts] * x.stride(1)];
  });
  return out;
}

}  // namespace minidl
