// autograd/ops_reduce.cpp — differentiable reductions: sum, mean, var, max over dims.
// Backward broadcasts the reduced gradient back over the reduced dims ("unreduce").
#include <algorithm>

#include "minidl/autograd/ops.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/ops.h"

namespace minidl {

namespace {
// Sorted, wrapped reduced dims; all dims when `dims` is empty.
Shape reduced_dims(const Shape& dims, int64_t ndim, const char* op) {
  Shape out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
  } else {
    for (int64_t d : dims) out.push_back(wrap_dim(d, ndim, op));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// dy has the reduced shape; returns it broadcast to in_shape (a view, no copy).
Tensor unreduce(const Tensor& dy, const Shape& in_shape, const Shape& dims, bool keepdim) {
  Tensor g = dy;
  if (!keepdim)
    for (int64_t d : dims) g = g.unsqueeze(d);
  return g.expand(in_shape);
}

int64_t reduced_count(const Shape& in_shape, const Shape& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= in_shape[d];
  return n;
}
}  // namespace

// sum: dx = dy broadcast over the reduced dims
Variable sum(const Variable& x, const Shape& dims, bool keepdim) {
  const Shape rd = reduced_dims(dims, x.dim(), "sum");
  return Variable::make_result(
      sum(x.data(), dims, keepdim), {x},
      [in = x.shape(), rd, keepdim](const Tensor& dy) -> std::vector<Tensor> {
        return {unreduce(dy, in, rd, keepdim)};
      },
      "SumBackward");
}

// mean: dx = dy / n broadcast over the reduced dims
Variable mean(const Variable& x, const Shape& dims, bool keepdim) {
  const Shape rd = reduced_dims(dims, x.dim(), "mean");
  const double n = static_cast<double>(reduced_count(x.shape(), rd));
  return Variable::make_result(
      mean(x.data(), dims, keepdim), {x},
      [in = x.shape(), rd, keepdim, n](const Tensor& dy) -> std::vector<Tensor> {
        return {unreduce(mul(dy, 1.0 / n), in, rd, keepdim)};
      },
      "MeanBackward");
}

// var: dx = dy * 2 (x - mean) / (n - correction)
Variable var(const Variable& x, const Shape& dims, int64_t correction, bool keepdim) {
  const Shape rd = reduced_dims(dims, x.dim(), "var");
  const double n = static_cast<double>(reduced_count(x.shape(), rd));
  return Variable::make_result(
      var(x.data(), dims, correction, keepdim), {x},
      [t = x.data(), dims, rd, keepdim, n, correction](const Tensor& dy) -> std::vector<Tensor> {
        Tensor xm = sub(t, mean(t, dims, /*keepdim=*/true));
        Tensor g = unreduce(mul(dy, 2.0 / (n - static_cast<double>(correction))), t.shape(), rd, keepdim);
        return {mul(g, xm)};
      },
      "VarBackward");
}

// max over a dim: the gradient goes to the (first) maximum of each slice
Variable max(const Variable& x, int64_t dim, bool keepdim) {
  dim = wrap_dim(dim, x.dim(), "max");
  MaxResult r = max(x.data(), dim, keepdim);
  return Variable::make_result(
      r.values, {x},
      [in = x.shape(), idx = r.indices, dim, keepdim, dt = x.dtype(),
       dev = x.device()](const Tensor& dy) -> std::vector<Tensor> {
        Tensor index = keepdim ? idx : idx.unsqueeze(dim);
        Shape pos_shape(in.size(), 1);
        pos_shape[dim] = in[dim];
        Tensor positions = arange(in[dim]).to(dev).reshape(pos_shape);  // (1, .., n, .., 1)
        Tensor one_hot = eq(positions.expand(in), index.expand(in)).to(dt);  // 1 at the argmax
        Tensor g = keepdim ? dy : dy.unsqueeze(dim);
        return {mul(one_hot, g.expand(in))};
      },
      "MaxBackward");
}

}  // namespace minidl
