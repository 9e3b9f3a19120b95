// autograd/ops_shape.cpp — differentiable views and joins: reshape, permute, slice, cat, ...,
// and the dtype conversion `to`. Forward returns a view where the tensor op does; backward maps
// the gradient back to the input.
#include <numeric>

#include "minidl/autograd/ops.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/ops.h"

namespace minidl {

// reshape: dx = dy reshaped back
Variable reshape(const Variable& x, const Shape& shape) {
  return Variable::make_result(
      x.data().reshape(shape), {x},
      [in = x.shape()](const Tensor& dy) -> std::vector<Tensor> { return {dy.reshape(in)}; }, "ReshapeBackward");
}

Variable flatten(const Variable& x, int64_t start, int64_t end) {
  return reshape(x, x.data().flatten(start, end).shape());
}

// permute: dx = dy permuted by the inverse permutation
Variable permute(const Variable& x, const Shape& dims) {
  Tensor y = x.data().permute(dims);
  Shape inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inverse[wrap_dim(dims[i], x.dim(), "permute")] = static_cast<int64_t>(i);
  return Variable::make_result(
      y, {x}, [inverse](const Tensor& dy) -> std::vector<Tensor> { return {dy.permute(inverse)}; }, "PermuteBackward");
}

// transpose: dx = dy transposed back
Variable transpose(const Variable& x, int64_t d0, int64_t d1) {
  return Variable::make_result(
      x.data().transpose(d0, d1), {x},
      [d0, d1](const Tensor& dy) -> std::vector<Tensor> { return {dy.transpose(d0, d1)}; }, "TransposeBackward");
}

// slice: dx = zeros with dy written into the sliced positions
Variable slice(const Variable& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  return Variable::make_result(
      x.data().slice(dim, start, end, step), {x},
      [t = x.data(), dim, start, end, step](const Tensor& dy) -> std::vector<Tensor> {
        Tensor g = zeros(t.shape(), t.dtype(), t.device());
        g.slice(dim, start, end, step).copy_(dy);
        return {g};
      },
      "SliceBackward");
}

Variable narrow(const Variable& x, int64_t dim, int64_t start, int64_t length) {
  x.data().narrow(dim, start, length);  // validates the arguments with narrow's message
  if (start < 0) start += x.size(dim);
  return slice(x, dim, start, start + length);
}

// select: dx = zeros with dy written at the selected index
Variable select(const Variable& x, int64_t dim, int64_t index) {
  return Variable::make_result(
      x.data().select(dim, index), {x},
      [in = x.shape(), dt = x.dtype(), dev = x.device(), dim, index](const Tensor& dy) -> std::vector<Tensor> {
        Tensor g = zeros(in, dt, dev);
        g.select(dim, index).copy_(dy);
        return {g};
      },
      "SelectBackward");
}

Variable unsqueeze(const Variable& x, int64_t dim) { return reshape(x, x.data().unsqueeze(dim).shape()); }
Variable squeeze(const Variable& x, int64_t dim) { return reshape(x, x.data().squeeze(dim).shape()); }

// expand: dx = dy summed over the expanded dims
Variable expand(const Variable& x, const Shape& shape) {
  return Variable::make_result(
      x.data().expand(shape), {x},
      [in = x.shape()](const Tensor& dy) -> std::vector<Tensor> { return {sum_to(dy, in)}; }, "ExpandBackward");
}

// contiguous: identity for gradients
Variable contiguous(const Variable& x) {
  return Variable::make_result(
      x.data().contiguous(), {x}, [](const Tensor& dy) -> std::vector<Tensor> { return {dy}; }, "ContiguousBackward");
}

Variable to(const Variable& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  return Variable::make_result(
      x.data().to(dtype), {x}, [from = x.dtype()](const Tensor& dy) -> std::vector<Tensor> { return {dy.to(from)}; },
      "ToCopyBackward");
}

// round_to: the pair of casts to dtype and back in one op; their backward rounds dy to dtype and
// widens it again, so does this one
Variable round_to(const Variable& x, DType dtype) {
  return Variable::make_result(
      round_to(x.data(), dtype), {x},
      [dtype](const Tensor& dy) -> std::vector<Tensor> { return {round_to(dy, dtype)}; }, "RoundToBackward");
}

// cat: each input's gradient is its slab of dy
Variable cat(const std::vector<Variable>& xs, int64_t dim) {
  std::vector<Tensor> ts;
  std::vector<int64_t> sizes;
  for (const auto& x : xs) {
    ts.push_back(x.data());
    sizes.push_back(x.dim() > 0 ? x.size(wrap_dim(dim, x.dim(), "cat")) : 0);
  }
  Tensor y = cat(ts, dim);
  const int64_t d = wrap_dim(dim, y.dim(), "cat");
  return Variable::make_result(
      y, xs,
      [sizes, d](const Tensor& dy) -> std::vector<Tensor> {
        std::vector<Tensor> gs;
        int64_t start = 0;
        for (int64_t s : sizes) {
          gs.push_back(dy.narrow(d, start, s));
          start += s;
        }
        return gs;
      },
      "CatBackward");
}

// stack: each input's gradient is dy selected at its position
Variable stack(const std::vector<Variable>& xs, int64_t dim) {
  std::vector<Tensor> ts;
  for (const auto& x : xs) ts.push_back(x.data());
  Tensor y = stack(ts, dim);
  const int64_t d = wrap_dim(dim, y.dim(), "stack");
  return Variable::make_result(
      y, xs,
      [n = xs.size(), d](const Tensor& dy) -> std::vector<Tensor> {
        std::vector<Tensor> gs;
        for (size_t i = 0; i < n; ++i) gs.push_back(dy.select(d, static_cast<int64_t>(i)));
        return gs;
      },
      "StackBackward");
}

// index_select: dx = zeros with dy's rows added back at their indices (repeats accumulate)
Variable index_select(const Variable& x, int64_t dim, const Tensor& index) {
  const int64_t d = wrap_dim(dim, x.dim(), "index_select");
  return Variable::make_result(
      index_select(x.data(), d, index), {x},
      [in = x.shape(), d, index](const Tensor& dy) -> std::vector<Tensor> { return {index_add(in, d, index, dy)}; },
      "IndexSelectBackward");
}

}  // namespace minidl
