// tensor/ops_cuda.cpp — the CUDA side of the tensor ops (see tensor/ops_cuda.h): device checks,
// shape checks, output allocation on the inputs' device, then one call into kernels/cuda_ops.h.
// Data layouts follow the CPU ops exactly (reduced dims permuted last, softmax as (outer, len,
// inner), planes for pooling, (N, C, S) for batch norm) so each kernel mirrors its CPU loop.
// Tested by tests/kernels/test_cuda_ops.cpp and test_cuda_nn.cpp (CPU vs CUDA on the same inputs;
// skipped without a device) and tests/kernels/test_cuda_stub.cpp (device errors, runs everywhere).
#include "minidl/tensor/ops_cuda.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "minidl/kernels/cuda_api.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/ops_util.h"

namespace minidl::cuda_ops {

namespace kc = kernels::cuda;

namespace {

void need(bool ok, const char* op, const std::string& what) {
  if (!ok) throw std::invalid_argument(std::string(op) + ": " + what);
}
void need_float(const Tensor& t, const char* op, const char* name) {
  need(t.defined(), op, std::string(name) + " is undefined");
  need(t.is_floating_point(), op, std::string("expected ") + name + " to be float32 or float64, got " + t.desc());
}
void need_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  need(a.dtype() == b.dtype(), op, "dtype mismatch: " + a.desc() + " vs " + b.desc());
}
const void* ptr_or_null(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }
Tensor contig_or_undef(const Tensor& t) { return t.defined() ? t.contiguous() : Tensor(); }
// A per-channel vector (optional when `optional`), C values of x's dtype on x's device.
Tensor channel_vector(const Tensor& t, int64_t C, const Tensor& x, const char* op, const char* name, bool optional) {
  if (!t.defined()) {
    need(optional, op, std::string(name) + " is undefined");
    return t;
  }
  need(t.numel() == C && t.dim() == 1, op, std::string("expected ") + name + " of shape [" + std::to_string(C) +
                                               "], got " + t.desc());
  need_same_dtype(t, x, op);
  return t.contiguous();
}
// (outer, n, inner) around dim
void split_dims(const Shape& shape, int64_t dim, int64_t& outer, int64_t& inner) {
  outer = inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < dim) outer *= shape[d];
    if (d > dim) inner *= shape[d];
  }
}
// int64 indices copied to the host and range-checked (the CPU op's message); returns the copy.
Tensor checked_index_host(const Tensor& index, int64_t size, const char* op) {
  need(index.dtype() == DType::Int64, op, std::string("index must be int64, got ") + dtype_name(index.dtype()));
  need(index.dim() <= 1, op, "index must be 1-d, got " + index.desc());
  Tensor h = index.cpu().contiguous();
  const int64_t* p = h.data<int64_t>();
  for (int64_t i = 0; i < h.numel(); ++i)
    if (p[i] < 0 || p[i] >= size)
      throw std::out_of_range(std::string(op) + ": index " + std::to_string(p[i]) + " out of range for size " +
                              std::to_string(size));
  return h;
}

}  // namespace

// ---------------------------------------------------------------- devices

namespace {
bool check_devices(const Tensor* const* ts, size_t n, const char* op) {
  const Tensor* first = nullptr;
  bool cuda = false;
  for (size_t i = 0; i < n; ++i) {
    const Tensor* t = ts[i];
    if (!t->defined()) continue;
    if (!first) first = t;
    else if (t->device() != first->device())
      throw std::invalid_argument(std::string(op) + ": expected all tensors on the same device, got " +
                                  first->device().str() + " and " + t->device().str());
    cuda |= t->device().is_cuda();
  }
  return cuda;
}
}  // namespace

bool on_cuda(std::initializer_list<const Tensor*> ts, const char* op) {
  return check_devices(ts.begin(), ts.size(), op);
}

bool on_cuda(const std::vector<Tensor>& ts, const char* op) {
  std::vector<const Tensor*> p;
  for (const Tensor& t : ts) p.push_back(&t);
  return check_devices(p.data(), p.size(), op);
}

void use_device(const Tensor& t) { kc::set_device(t.device().index); }

bool batch_stride(const Tensor& t, const Shape& batch_shape, int64_t& step) {
  step = 0;
  int64_t expect = -1;
  for (int64_t d = static_cast<int64_t>(batch_shape.size()) - 1; d >= 0; --d) {
    if (batch_shape[d] == 1) continue;
    if (expect < 0) {
      step = t.stride(d);
      expect = step * batch_shape[d];
    } else if (t.stride(d) == expect) {
      expect *= batch_shape[d];
    } else if (!(t.stride(d) == 0 && step == 0)) {
      return false;
    }
  }
  return true;
}

kc::StridedIter make_iter(const Shape& shape, const std::vector<const Shape*>& strides, const char* op) {
  kc::StridedIter it;
  const int n = static_cast<int>(strides.size());
  it.numel = shape_numel(shape);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = it.ndim > 0;
    for (int k = 0; k < n && merge; ++k) merge = it.strides[k][it.ndim - 1] == (*strides[k])[d] * shape[d];
    if (merge) {
      it.shape[it.ndim - 1] *= shape[d];
      for (int k = 0; k < n; ++k) it.strides[k][it.ndim - 1] = (*strides[k])[d];
      continue;
    }
    if (it.ndim == kc::kMaxDims)
      throw std::invalid_argument(std::string(op) + ": more than " + std::to_string(kc::kMaxDims) +
                                  " non-mergeable dims are not supported on CUDA (shape " + shape_str(shape) + ")");
    it.shape[it.ndim] = shape[d];
    for (int k = 0; k < n; ++k) it.strides[k][it.ndim] = (*strides[k])[d];
    ++it.ndim;
  }
  // The fast path (offset = index) needs EVERY operand dense: at most one merged dim, stride 1 in
  // each; a strided output or input (a column of a matrix, a broadcast scalar) keeps the div/mod path.
  it.contiguous = it.ndim <= 1;
  for (int k = 0; k < n && it.ndim == 1; ++k) it.contiguous = it.contiguous && it.strides[k][0] == 1;
  return it;
}

// ---------------------------------------------------------------- tensor core

void fill_(const Tensor& t, double value) {
  const auto it = make_iter(t.shape(), {&t.strides()}, "fill_");
  use_device(t);
  kc::fill(elem(t.dtype()), it, t.raw_data(), value);
}

void copy_(const Tensor& dst, const Tensor& src_in) {
  const Tensor src = src_in.shape() == dst.shape() ? src_in : src_in.expand(dst.shape());
  const auto it = make_iter(dst.shape(), {&dst.strides(), &src.strides()}, "copy_");
  use_device(dst);
  kc::copy(elem(dst.dtype()), elem(src.dtype()), it, dst.raw_data(), src.raw_data());
}

// ---------------------------------------------------------------- reductions

namespace {
struct Plan {
  Tensor data;  // contiguous (outer, len)
  int64_t outer = 1, len = 1;
  Shape out_shape;
};
Plan plan(const Tensor& x, const Shape& dims_in, bool keepdim, const char* op) {
  const int64_t nd = x.dim();
  const Shape dims = detail::normalize_dims(dims_in, nd, op);
  std::vector<bool> red(nd, false);
  for (int64_t d : dims) red[d] = true;
  Plan p;
  Shape perm;
  for (int64_t d = 0; d < nd; ++d) {
    if (red[d]) {
      p.len *= x.size(d);
      if (keepdim) p.out_shape.push_back(1);
    } else {
      p.outer *= x.size(d);
      p.out_shape.push_back(x.size(d));
      perm.push_back(d);
    }
  }
  perm.insert(perm.end(), dims.begin(), dims.end());
  p.data = nd == 0 ? x.contiguous() : x.permute(perm).contiguous();
  return p;
}
}  // namespace

Tensor sum(const Tensor& x, const Shape& dims, bool keepdim, bool mean, const char* op) {
  if (mean) need(x.is_floating_point(), op, std::string("expected a floating dtype (float32 or float64), got ") +
                                               dtype_name(x.dtype()));
  Plan p = plan(x, dims, keepdim, op);
  Tensor out(p.out_shape, x.dtype(), x.device());
  if (p.outer == 0) return out;
  if (p.len == 0) return out.fill_(mean ? NAN : 0.0);
  use_device(x);
  kc::sum_rows(elem(x.dtype()), p.data.raw_data(), out.raw_data(), p.outer, p.len, mean ? double(p.len) : 1.0);
  return out;
}

Tensor var(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  need(x.is_floating_point(), "var", std::string("expected a floating dtype (float32 or float64), got ") +
                                         dtype_name(x.dtype()));
  Plan p = plan(x, dims, keepdim, "var");
  Tensor out(p.out_shape, x.dtype(), x.device());
  if (p.outer == 0) return out;
  if (p.len == 0) return out.fill_(NAN);
  use_device(x);
  kc::var_rows(elem(x.dtype()), p.data.raw_data(), out.raw_data(), p.outer, p.len, correction);
  return out;
}

MaxResult max(const Tensor& x, const Shape& dims, bool keepdim, const char* op) {
  if (dims.empty()) need(x.numel() > 0, op, "cannot take the maximum of an empty tensor " + x.desc());
  Plan p = plan(x, dims, keepdim, op);
  need(!(p.len == 0 && p.outer > 0), op, "cannot take the maximum over an empty dim of " + x.desc());
  MaxResult r{Tensor(p.out_shape, x.dtype(), x.device()), Tensor(p.out_shape, DType::Int64, x.device())};
  if (p.outer == 0) return r;
  use_device(x);
  kc::max_rows(elem(x.dtype()), p.data.raw_data(), r.values.raw_data(), r.indices.data<int64_t>(), p.outer, p.len);
  return r;
}

Tensor topk_indices(const Tensor& x, int64_t k) {
  // Host fallback (used for top-5 accuracy only): one copy each way.
  return minidl::topk_indices(x.cpu(), k).to(x.device());
}

// ---------------------------------------------------------------- softmax

Tensor softmax(const Tensor& x_in, int64_t dim, bool log, const char* op) {
  need_float(x_in, op, "input");
  dim = wrap_dim(dim, x_in.dim(), op);
  int64_t outer, inner;
  split_dims(x_in.shape(), dim, outer, inner);
  const int64_t len = x_in.dim() == 0 ? 1 : x_in.size(dim);
  const Tensor x = x_in.contiguous();
  Tensor y(x.shape(), x.dtype(), x.device());
  use_device(x);
  kc::softmax_forward(elem(x.dtype()), x.raw_data(), y.raw_data(), outer, len, inner, log);
  return y;
}

Tensor softmax_backward(const Tensor& y_in, const Tensor& dy_in, int64_t dim, bool log, const char* op) {
  need_float(y_in, op, "y");
  need_same_dtype(y_in, dy_in, op);
  need(y_in.shape() == dy_in.shape(), op,
       "y and dy shapes differ: " + shape_str(y_in.shape()) + " vs " + shape_str(dy_in.shape()));
  dim = wrap_dim(dim, y_in.dim(), op);
  int64_t outer, inner;
  split_dims(y_in.shape(), dim, outer, inner);
  const int64_t len = y_in.dim() == 0 ? 1 : y_in.size(dim);
  const Tensor y = y_in.contiguous(), dy = dy_in.contiguous();
  Tensor dx(y.shape(), y.dtype(), y.device());
  use_device(y);
  kc::softmax_backward(elem(y.dtype()), y.raw_data(), dy.raw_data(), dx.raw_data(), outer, len, inner, log);
  return dx;
}

// ---------------------------------------------------------------- joining and indexing

Tensor cat(const std::vector<Tensor>& ts, int64_t dim) {
  const Tensor& first = ts[0];
  need(first.dim() > 0, "cat", "zero-dimensional tensors cannot be concatenated");
  dim = wrap_dim(dim, first.dim(), "cat");
  Shape shape = first.shape();
  shape[dim] = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    need_same_dtype(first, t, "cat");
    bool ok = t.dim() == first.dim();
    for (int64_t d = 0; ok && d < t.dim(); ++d) ok = d == dim || t.size(d) == first.size(d);
    need(ok, "cat", "tensor " + std::to_string(i) + " has shape " + shape_str(t.shape()) + ", expected " +
                        shape_str(first.shape()) + " except in dim " + std::to_string(dim));
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

Tensor index_select(const Tensor& x_in, int64_t dim, const Tensor& index_in) {
  need(x_in.dim() > 0, "index_select", "expected at least a 1-d tensor, got " + x_in.desc());
  dim = wrap_dim(dim, x_in.dim(), "index_select");
  checked_index_host(index_in, x_in.size(dim), "index_select");
  const Tensor x = x_in.contiguous(), index = index_in.contiguous();
  Shape shape = x.shape();
  shape[dim] = index.numel();
  Tensor out(shape, x.dtype(), x.device());
  int64_t outer, inner;
  split_dims(x.shape(), dim, outer, inner);
  use_device(x);
  kc::index_select(elem(x.dtype()), x.raw_data(), index.data<int64_t>(), out.raw_data(), outer, x.size(dim),
                   index.numel(), inner);
  return out;
}

Tensor index_add(const Shape& shape, int64_t dim, const Tensor& index_in, const Tensor& src_in) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  need(nd > 0, "index_add", "expected at least a 1-d shape");
  dim = wrap_dim(dim, nd, "index_add");
  const Tensor index_host = checked_index_host(index_in, shape[dim], "index_add");
  Shape want = shape;
  want[dim] = index_in.numel();
  need(src_in.shape() == want, "index_add", "src has shape " + shape_str(src_in.shape()) + ", expected " +
                                                shape_str(want) + " for output shape " + shape_str(shape));
  const Tensor src = src_in.contiguous();
  Tensor out(shape, src.dtype(), src.device());
  int64_t outer, inner;
  split_dims(shape, dim, outer, inner);
  use_device(src);
  kc::index_add(elem(src.dtype()), src.raw_data(), index_host.data<int64_t>(), out.raw_data(), outer, shape[dim],
                index_host.numel(), inner);
  return out;
}

Tensor gather_rows(const Tensor& x, const Tensor& target) {
  need(x.dim() == 2, "gather_rows", "expected a 2-d x, got " + x.desc());
  need(target.dtype() == DType::Int64 && target.dim() == 1 && target.size(0) == x.size(0), "gather_rows",
       "target must be int64 of shape [" + std::to_string(x.size(0)) + "], got " + target.desc());
  const Tensor th = target.cpu();
  for (int64_t i = 0; i < th.numel(); ++i) {
    const int64_t j = th.data<int64_t>()[i * (th.numel() > 0 ? th.stride(0) : 1)];
    if (j < 0 || j >= x.size(1))
      throw std::out_of_range("gather_rows: target " + std::to_string(j) + " out of range for " +
                              std::to_string(x.size(1)) + " classes (row " + std::to_string(i) + ")");
  }
  const int64_t n = x.size(0);
  Tensor out({n}, x.dtype(), x.device());
  use_device(x);
  kc::gather_rows(elem(x.dtype()), x.raw_data(), x.stride(0), x.stride(1), target.data<int64_t>(),
                  n > 0 ? target.stride(0) : 1, n, out.raw_data());
  return out;
}

// ---------------------------------------------------------------- conv

Tensor conv2d_forward(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, const Conv2dParams& p) {
  constexpr const char* op = "conv2d";
  need_float(x_in, op, "input");
  need_float(w_in, op, "weight");
  need_same_dtype(x_in, w_in, op);
  need(w_in.dim() == 4 && x_in.dim() == 4, op, "expected input (N, C, H, W) and weight (C_out, C_in/groups, kH, kW), got " +
                                                   x_in.desc() + " and " + w_in.desc());
  need(p.groups >= 1 && w_in.size(0) % p.groups == 0 && x_in.size(1) == w_in.size(1) * p.groups, op,
       "channels of input " + x_in.desc() + " do not match weight " + w_in.desc() + " with groups " +
           std::to_string(p.groups));
  if (b_in.defined()) {
    need(b_in.dim() == 1 && b_in.size(0) == w_in.size(0), op, "expected bias [" + std::to_string(w_in.size(0)) +
                                                                  "], got " + b_in.desc());
    need_same_dtype(x_in, b_in, op);
  }
  kc::ConvGeometry g{};
  g.N = x_in.size(0), g.C = x_in.size(1), g.H = x_in.size(2), g.W = x_in.size(3);
  g.O = w_in.size(0), g.kH = w_in.size(2), g.kW = w_in.size(3), g.groups = p.groups;
  g.stride_h = p.stride_h, g.stride_w = p.stride_w, g.pad_h = p.pad_h, g.pad_w = p.pad_w;
  g.dil_h = p.dilation_h, g.dil_w = p.dilation_w;
  const int64_t span_h = p.dilation_h * (g.kH - 1) + 1, span_w = p.dilation_w * (g.kW - 1) + 1;
  need(p.stride_h >= 1 && p.stride_w >= 1 && p.dilation_h >= 1 && p.dilation_w >= 1 && p.pad_h >= 0 && p.pad_w >= 0,
       op, "stride, dilation and groups must be positive and padding non-negative");
  need(g.H + 2 * p.pad_h >= span_h && g.W + 2 * p.pad_w >= span_w, op,
       "kernel " + shape_str(w_in.shape()) + " does not fit input " + x_in.desc());
  g.H_out = (g.H + 2 * p.pad_h - span_h) / p.stride_h + 1;
  g.W_out = (g.W + 2 * p.pad_w - span_w) / p.stride_w + 1;
  const Tensor x = x_in.contiguous(), w = w_in.contiguous(), b = contig_or_undef(b_in);
  Tensor y({g.N, g.O, g.H_out, g.W_out}, x.dtype(), x.device());
  use_device(x);
  kc::conv2d_forward(elem(x.dtype()), g, x.raw_data(), w.raw_data(), ptr_or_null(b), y.raw_data());
  return y;
}

Conv2dGrads conv2d_backward(const Tensor& x_in, const Tensor& w_in, const Tensor& dy_in, bool has_bias,
                            const Conv2dParams& p) {
  need_float(dy_in, "conv2d_backward", "grad_output");
  need_same_dtype(x_in, dy_in, "conv2d_backward");
  kc::ConvGeometry g{};
  g.N = x_in.size(0), g.C = x_in.size(1), g.H = x_in.size(2), g.W = x_in.size(3);
  g.O = w_in.size(0), g.kH = w_in.size(2), g.kW = w_in.size(3), g.groups = p.groups;
  g.stride_h = p.stride_h, g.stride_w = p.stride_w, g.pad_h = p.pad_h, g.pad_w = p.pad_w;
  g.dil_h = p.dilation_h, g.dil_w = p.dilation_w;
  g.H_out = (g.H + 2 * p.pad_h - (p.dilation_h * (g.kH - 1) + 1)) / p.stride_h + 1;
  g.W_out = (g.W + 2 * p.pad_w - (p.dilation_w * (g.kW - 1) + 1)) / p.stride_w + 1;
  need(dy_in.shape() == Shape({g.N, g.O, g.H_out, g.W_out}), "conv2d_backward",
       "expected grad_output " + shape_str({g.N, g.O, g.H_out, g.W_out}) + ", got " + dy_in.desc());
  const Tensor x = x_in.contiguous(), w = w_in.contiguous(), dy = dy_in.contiguous();
  Conv2dGrads r;
  r.dx = Tensor(x.shape(), x.dtype(), x.device());
  r.dw = Tensor(w.shape(), w.dtype(), w.device());
  if (has_bias) r.db = Tensor({g.O}, x.dtype(), x.device());
  use_device(x);
  kc::conv2d_backward(elem(x.dtype()), g, x.raw_data(), w.raw_data(), dy.raw_data(), r.dx.raw_data(),
                      r.dw.raw_data(), has_bias ? r.db.raw_data() : nullptr);
  return r;
}

// ---------------------------------------------------------------- pooling

namespace {
kc::PoolWindow window_of(const Pool2dParams& p) {
  return {p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w};
}
Shape with_spatial(Shape s, int64_t h, int64_t w) {
  s[s.size() - 2] = h;
  s[s.size() - 1] = w;
  return s;
}
std::pair<int64_t, int64_t> pool_out(int64_t H, int64_t W, const Pool2dParams& p, const char* op) {
  need(p.kernel_h > 0 && p.kernel_w > 0 && p.stride_h > 0 && p.stride_w > 0 && p.pad_h >= 0 && p.pad_w >= 0 &&
           2 * p.pad_h <= p.kernel_h && 2 * p.pad_w <= p.kernel_w && H + 2 * p.pad_h >= p.kernel_h &&
           W + 2 * p.pad_w >= p.kernel_w,
       op, "invalid pooling window for a " + std::to_string(H) + "x" + std::to_string(W) + " input");
  return {pool2d_out_extent(H, p.kernel_h, p.stride_h, p.pad_h, p.ceil_mode),
          pool2d_out_extent(W, p.kernel_w, p.stride_w, p.pad_w, p.ceil_mode)};
}
void need_image(const Tensor& x, const char* op) {
  need_float(x, op, "input");
  need(x.dim() == 3 || x.dim() == 4, op, "expected input (N, C, H, W) or (C, H, W), got " + x.desc());
}
}  // namespace

MaxPool2dResult max_pool2d_forward(const Tensor& x_in, const Pool2dParams& p) {
  need_image(x_in, "max_pool2d");
  const Tensor x = x_in.contiguous();
  const int64_t H = x.size(-2), W = x.size(-1);
  const auto [Ho, Wo] = pool_out(H, W, p, "max_pool2d");
  const Shape s = with_spatial(x.shape(), Ho, Wo);
  MaxPool2dResult r{Tensor(s, x.dtype(), x.device()), Tensor(s, DType::Int64, x.device())};
  use_device(x);
  kc::max_pool2d_forward(elem(x.dtype()), x.raw_data(), x.numel() / std::max<int64_t>(H * W, 1), H, W,
                         r.out.raw_data(), r.indices.data<int64_t>(), Ho, Wo, window_of(p));
  return r;
}

Tensor max_pool2d_backward(const Tensor& dy_in, const Tensor& indices_in, const Shape& x_shape) {
  need_float(dy_in, "max_pool2d_backward", "grad_output");
  need(x_shape.size() >= 3 && indices_in.dtype() == DType::Int64 && indices_in.shape() == dy_in.shape(),
       "max_pool2d_backward", "expected int64 indices shaped like grad_output " + dy_in.desc() + ", got " +
                                  indices_in.desc());
  const Tensor dy = dy_in.contiguous(), idx = indices_in.contiguous();
  const int64_t H = x_shape[x_shape.size() - 2], W = x_shape.back();
  const int64_t n_out = dy.size(-2) * dy.size(-1);
  const int64_t planes = shape_numel(x_shape) / std::max<int64_t>(H * W, 1);
  need(planes * n_out == dy.numel(), "max_pool2d_backward",
       "grad_output " + dy.desc() + " does not match input " + shape_str(x_shape));
  Tensor dx(x_shape, dy.dtype(), dy.device());
  use_device(dy);
  kc::max_pool2d_backward(elem(dy.dtype()), dy.raw_data(), idx.data<int64_t>(), planes, n_out, H, W, dx.raw_data());
  return dx;
}

Tensor avg_pool2d_forward(const Tensor& x_in, const Pool2dParams& p) {
  need_image(x_in, "avg_pool2d");
  const Tensor x = x_in.contiguous();
  const int64_t H = x.size(-2), W = x.size(-1);
  const auto [Ho, Wo] = pool_out(H, W, p, "avg_pool2d");
  Tensor y(with_spatial(x.shape(), Ho, Wo), x.dtype(), x.device());
  use_device(x);
  kc::avg_pool2d_forward(elem(x.dtype()), x.raw_data(), x.numel() / std::max<int64_t>(H * W, 1), H, W, y.raw_data(),
                         Ho, Wo, window_of(p), p.count_include_pad);
  return y;
}

Tensor avg_pool2d_backward(const Tensor& dy_in, const Shape& x_shape, const Pool2dParams& p) {
  need_float(dy_in, "avg_pool2d_backward", "grad_output");
  need(x_shape.size() == 3 || x_shape.size() == 4, "avg_pool2d_backward", "bad input shape " + shape_str(x_shape));
  const int64_t H = x_shape[x_shape.size() - 2], W = x_shape.back();
  const auto [Ho, Wo] = pool_out(H, W, p, "avg_pool2d_backward");
  need(dy_in.shape() == with_spatial(x_shape, Ho, Wo), "avg_pool2d_backward",
       "expected grad_output of shape " + shape_str(with_spatial(x_shape, Ho, Wo)) + ", got " + dy_in.desc());
  const Tensor dy = dy_in.contiguous();
  Tensor dx(x_shape, dy.dtype(), dy.device());
  use_device(dy);
  kc::avg_pool2d_backward(elem(dy.dtype()), dy.raw_data(), shape_numel(x_shape) / std::max<int64_t>(H * W, 1), Ho, Wo,
                          dx.raw_data(), H, W, window_of(p), p.count_include_pad);
  return dx;
}

Tensor adaptive_avg_pool2d_forward(const Tensor& x_in, int64_t out_h, int64_t out_w) {
  need_image(x_in, "adaptive_avg_pool2d");
  need(out_h > 0 && out_w > 0, "adaptive_avg_pool2d", "output size must be positive");
  const Tensor x = x_in.contiguous();
  const int64_t H = x.size(-2), W = x.size(-1);
  need(H > 0 && W > 0, "adaptive_avg_pool2d", "expected a non-empty plane, got input " + x.desc());
  Tensor y(with_spatial(x.shape(), out_h, out_w), x.dtype(), x.device());
  use_device(x);
  kc::adaptive_avg_pool2d_forward(elem(x.dtype()), x.raw_data(), x.numel() / (H * W), H, W, y.raw_data(), out_h,
                                  out_w);
  return y;
}

Tensor adaptive_avg_pool2d_backward(const Tensor& dy_in, const Shape& x_shape) {
  need_float(dy_in, "adaptive_avg_pool2d_backward", "grad_output");
  need(dy_in.dim() == static_cast<int64_t>(x_shape.size()) && x_shape.size() >= 3, "adaptive_avg_pool2d_backward",
       "grad_output " + dy_in.desc() + " does not match input " + shape_str(x_shape));
  const Tensor dy = dy_in.contiguous();
  const int64_t H = x_shape[x_shape.size() - 2], W = x_shape.back();
  Tensor dx = zeros(x_shape, dy.dtype(), dy.device());
  if (H <= 0 || W <= 0) return dx;
  use_device(dy);
  kc::adaptive_avg_pool2d_backward(elem(dy.dtype()), dy.raw_data(), shape_numel(x_shape) / (H * W), dy.size(-2),
                                   dy.size(-1), dx.raw_data(), H, W);
  return dx;
}

// ---------------------------------------------------------------- batch norm

namespace {
struct NCS {
  int64_t N, C, S;
};
NCS ncs(const Tensor& x, const char* op) {
  need_float(x, op, "input");
  need(x.dim() >= 2, op, "expected input (N, C) or (N, C, *), got " + x.desc());
  const int64_t N = x.size(0), C = x.size(1);
  return {N, C, C * N == 0 ? 0 : x.numel() / (N * C)};
}
void need_like(const Tensor& dy, const Tensor& x, const char* op) {
  need(dy.shape() == x.shape() && dy.dtype() == x.dtype(), op,
       "expected grad_output shaped and typed like input " + x.desc() + ", got " + dy.desc());
}
}  // namespace

BatchNormStats batch_norm_stats(const Tensor& x_in, double eps) {
  const NCS d = ncs(x_in, "batch_norm_stats");
  need(d.N * d.S > 0, "batch_norm_stats", "expected at least one value per channel, got input " + x_in.desc());
  const Tensor x = x_in.contiguous();
  BatchNormStats s{Tensor({d.C}, x.dtype(), x.device()), Tensor({d.C}, x.dtype(), x.device())};
  use_device(x);
  kc::batch_norm_stats(elem(x.dtype()), x.raw_data(), d.N, d.C, d.S, eps, s.mean.raw_data(), s.invstd.raw_data());
  return s;
}

Tensor batch_norm_elemt(const Tensor& x_in, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                        const Tensor& bias) {
  constexpr const char* op = "batch_norm_elemt";
  const NCS d = ncs(x_in, op);
  const Tensor m = channel_vector(mean, d.C, x_in, op, "mean", false);
  const Tensor is = channel_vector(invstd, d.C, x_in, op, "invstd", false);
  const Tensor w = channel_vector(weight, d.C, x_in, op, "weight", true);
  const Tensor b = channel_vector(bias, d.C, x_in, op, "bias", true);
  const Tensor x = x_in.contiguous();
  Tensor y(x.shape(), x.dtype(), x.device());
  use_device(x);
  kc::batch_norm_elemt(elem(x.dtype()), x.raw_data(), d.N, d.C, d.S, m.raw_data(), is.raw_data(), ptr_or_null(w),
                       ptr_or_null(b), y.raw_data());
  return y;
}

BatchNormReduce batch_norm_backward_reduce(const Tensor& dy_in, const Tensor& x_in, const Tensor& mean,
                                           const Tensor& invstd, const Tensor& weight) {
  constexpr const char* op = "batch_norm_backward_reduce";
  const NCS d = ncs(x_in, op);
  need_like(dy_in, x_in, op);
  const Tensor m = channel_vector(mean, d.C, x_in, op, "mean", false);
  const Tensor is = channel_vector(invstd, d.C, x_in, op, "invstd", false);
  channel_vector(weight, d.C, x_in, op, "weight", true);
  const Tensor x = x_in.contiguous(), dy = dy_in.contiguous();
  BatchNormReduce r;
  r.sum_dy = Tensor({d.C}, x.dtype(), x.device());
  r.sum_dy_xmu = Tensor({d.C}, x.dtype(), x.device());
  if (weight.defined()) {
    r.grad_weight = Tensor({d.C}, x.dtype(), x.device());
    r.grad_bias = Tensor({d.C}, x.dtype(), x.device());
  }
  use_device(x);
  kc::batch_norm_backward_reduce(elem(x.dtype()), dy.raw_data(), x.raw_data(), d.N, d.C, d.S, m.raw_data(),
                                 is.raw_data(), r.sum_dy.raw_data(), r.sum_dy_xmu.raw_data(),
                                 r.grad_weight.defined() ? r.grad_weight.raw_data() : nullptr,
                                 r.grad_bias.defined() ? r.grad_bias.raw_data() : nullptr);
  return r;
}

Tensor batch_norm_backward_elemt(const Tensor& dy_in, const Tensor& x_in, const Tensor& mean, const Tensor& invstd,
                                 const Tensor& weight, const Tensor& sum_dy, const Tensor& sum_dy_xmu,
                                 int64_t count) {
  constexpr const char* op = "batch_norm_backward_elemt";
  const NCS d = ncs(x_in, op);
  need_like(dy_in, x_in, op);
  need(count > 0, op, "count must be positive, got " + std::to_string(count));
  const Tensor m = channel_vector(mean, d.C, x_in, op, "mean", false);
  const Tensor is = channel_vector(invstd, d.C, x_in, op, "invstd", false);
  const Tensor w = channel_vector(weight, d.C, x_in, op, "weight", true);
  const Tensor sd = channel_vector(sum_dy, d.C, x_in, op, "sum_dy", false);
  const Tensor sdx = channel_vector(sum_dy_xmu, d.C, x_in, op, "sum_dy_xmu", false);
  const Tensor x = x_in.contiguous(), dy = dy_in.contiguous();
  Tensor dx(x.shape(), x.dtype(), x.device());
  use_device(x);
  kc::batch_norm_backward_elemt(elem(x.dtype()), dy.raw_data(), x.raw_data(), d.N, d.C, d.S, m.raw_data(),
                                is.raw_data(), ptr_or_null(w), sd.raw_data(), sdx.raw_data(), count, dx.raw_data());
  return dx;
}

// ---------------------------------------------------------------- layer norm

namespace {
std::pair<int64_t, int64_t> ln_layout(const Tensor& x, const Shape& normalized, const Tensor& weight,
                                      const Tensor& bias, const char* op) {
  need_float(x, op, "input");
  const int64_t k = static_cast<int64_t>(normalized.size());
  need(k > 0 && x.dim() >= k && std::equal(normalized.begin(), normalized.end(), x.shape().end() - k), op,
       "expected input whose trailing dims are normalized_shape " + shape_str(normalized) + ", got " + x.desc());
  for (const Tensor* p : {&weight, &bias})
    if (p->defined())
      need(p->shape() == normalized && p->dtype() == x.dtype(), op,
           "expected affine parameters " + shape_str(normalized) + " matching input " + x.desc() + ", got " +
               p->desc());
  const int64_t M = shape_numel(normalized);
  return {M == 0 ? 0 : x.numel() / M, M};
}
}  // namespace

LayerNormResult layer_norm_forward(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight,
                                   const Tensor& bias, double eps) {
  const auto [rows, M] = ln_layout(x_in, normalized_shape, weight, bias, "layer_norm");
  const Tensor x = x_in.contiguous(), w = contig_or_undef(weight), b = contig_or_undef(bias);
  LayerNormResult r{Tensor(x.shape(), x.dtype(), x.device()), Tensor({rows}, x.dtype(), x.device()),
                    Tensor({rows}, x.dtype(), x.device())};
  use_device(x);
  kc::layer_norm_forward(elem(x.dtype()), x.raw_data(), rows, M, ptr_or_null(w), ptr_or_null(b), eps, r.out.raw_data(),
                         r.mean.raw_data(), r.invstd.raw_data());
  return r;
}

LayerNormGrads layer_norm_backward(const Tensor& dy_in, const Tensor& x_in, const Tensor& mean_in,
                                   const Tensor& invstd_in, const Shape& normalized_shape, const Tensor& weight) {
  constexpr const char* op = "layer_norm_backward";
  const auto [rows, M] = ln_layout(x_in, normalized_shape, weight, Tensor(), op);
  need_like(dy_in, x_in, op);
  need(mean_in.numel() == rows && invstd_in.numel() == rows && mean_in.dtype() == x_in.dtype() &&
           invstd_in.dtype() == x_in.dtype(),
       op, "expected mean and invstd with " + std::to_string(rows) + " values of x's dtype");
  const Tensor x = x_in.contiguous(), dy = dy_in.contiguous(), m = mean_in.contiguous(), is = invstd_in.contiguous();
  const Tensor w = contig_or_undef(weight);
  LayerNormGrads g;
  g.dx = Tensor(x.shape(), x.dtype(), x.device());
  if (w.defined()) {
    g.dweight = zeros(normalized_shape, x.dtype(), x.device());
    g.dbias = zeros(normalized_shape, x.dtype(), x.device());
  }
  use_device(x);
  kc::layer_norm_backward(elem(x.dtype()), dy.raw_data(), x.raw_data(), rows, M, m.raw_data(), is.raw_data(),
                          ptr_or_null(w), g.dx.raw_data(), w.defined() ? g.dweight.raw_data() : nullptr,
                          w.defined() ? g.dbias.raw_data() : nullptr);
  return g;
}

// ---------------------------------------------------------------- dropout, cross entropy

Tensor dropout_mask(const Shape& shape, double p, RandomKey key, DType dtype, Device device) {
  need(p >= 0.0 && p < 1.0, "dropout_mask", "p must be in [0, 1), got " + std::to_string(p));
  need(is_floating(dtype), "dropout_mask", std::string("expected a floating dtype, got ") + dtype_name(dtype));
  Tensor out(shape, dtype, device);
  kc::set_device(device.index);
  kc::dropout_mask(elem(dtype), out.raw_data(), out.numel(), p, key.seed, key.stream);
  return out;
}

namespace {
Tensor checked_target(const Tensor& logits, const Tensor& target, double eps, const char* op) {
  need_float(logits, op, "logits");
  need(logits.dim() == 2, op, "expected logits (N, C), got " + logits.desc());
  need(target.defined() && target.dtype() == DType::Int64 && target.dim() == 1 && target.size(0) == logits.size(0), op,
       "expected target int64[" + std::to_string(logits.size(0)) + "] for logits " + logits.desc() + ", got " +
           (target.defined() ? target.desc() : std::string("an undefined tensor")));
  need(eps >= 0.0 && eps <= 1.0, op, "label_smoothing must be in [0, 1], got " + std::to_string(eps));
  // The values are checked by the kernel on the device (no host copy in the training step): an
  // out-of-range target is raised at the next synchronisation (kernels/cuda_ops.h).
  return target.contiguous();
}
}  // namespace

Tensor cross_entropy_forward(const Tensor& logits_in, const Tensor& target_in, double label_smoothing) {
  const Tensor target = checked_target(logits_in, target_in, label_smoothing, "cross_entropy");
  const Tensor logits = logits_in.contiguous();
  Tensor loss({}, logits.dtype(), logits.device());
  use_device(logits);
  kc::cross_entropy_forward(elem(logits.dtype()), logits.raw_data(), target.data<int64_t>(), logits.size(0),
                            logits.size(1), label_smoothing, loss.raw_data());
  return loss;
}

Tensor cross_entropy_backward(const Tensor& logits_in, const Tensor& target_in, double label_smoothing,
                              const Tensor& grad_loss) {
  const Tensor target = checked_target(logits_in, target_in, label_smoothing, "cross_entropy_backward");
  need(grad_loss.defined() && grad_loss.numel() == 1, "cross_entropy_backward",
       "expected a one-element grad_loss");
  const Tensor logits = logits_in.contiguous();
  // the upstream gradient stays on the device (a CPU scalar is copied there; no item() sync)
  const Tensor g = grad_loss.to(logits.device()).to(logits.dtype()).contiguous();
  Tensor d(logits.shape(), logits.dtype(), logits.device());
  use_device(logits);
  kc::cross_entropy_backward(elem(logits.dtype()), logits.raw_data(), target.data<int64_t>(), logits.size(0),
                             logits.size(1), label_smoothing, g.raw_data(), d.raw_data());
  return d;
}

}  // namespace minidl::cuda_ops
