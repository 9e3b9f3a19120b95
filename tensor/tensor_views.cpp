// tensor/tensor_views.cpp — Tensor's views: new shapes and strides over the same storage, no
// copy (view, reshape, flatten, permute, transpose, t, narrow, slice, select, expand, squeeze,
// unsqueeze); view and expand follow PyTorch's stride rules.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "minidl/tensor/tensor.h"

namespace minidl {

namespace {
// Infers one -1 entry and checks that the element count matches.
Shape infer_shape(const Shape& shape, int64_t numel, const char* op, const Shape& from) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer >= 0)
        throw std::invalid_argument(std::string(op) + ": only one dimension can be -1, got " + shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else if (out[i] < 0) {
      throw std::invalid_argument(std::string(op) + ": invalid size in " + shape_str(shape));
    } else {
      known *= out[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0)
      throw std::invalid_argument(std::string(op) + ": shape " + shape_str(shape) + " is invalid for input of shape " +
                                  shape_str(from));
    out[infer] = numel / known;
  }
  if (shape_numel(out) != numel)
    throw std::invalid_argument(std::string(op) + ": shape " + shape_str(shape) + " is invalid for input of shape " +
                                shape_str(from) + " (" + std::to_string(numel) + " elements)");
  return out;
}

// Strides for viewing (old shape, old strides) as new shape, or empty when impossible.
// Same algorithm as PyTorch's computeStride: match groups of dims with contiguous chunks.
bool view_strides(const Shape& old_shape, const Shape& old_strides, const Shape& new_shape, Shape& out) {
  out.assign(new_shape.size(), 0);
  if (shape_numel(old_shape) == 0 || old_shape.empty()) {  // nothing to view, or one element
    out = contiguous_strides(new_shape);
    return true;
  }
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.empty() ? 1 : old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t tensor_d = static_cast<int64_t>(old_shape.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_shape[tensor_d];
    if (tensor_d == 0 ||
        (old_shape[tensor_d - 1] != 1 && old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (tensor_d > 0) {
        chunk_base_stride = old_strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}
}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  Shape ns = infer_shape(shape, numel_, "view", shape_);
  Shape st;
  if (!view_strides(shape_, strides_, ns, st))
    throw std::invalid_argument("view: cannot view " + desc() + " as " + shape_str(ns) +
                                " without a copy (its strides are incompatible); use reshape()");
  return Tensor(storage_, ns, st, offset_, dtype_);
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape ns = infer_shape(shape, numel_, "reshape", shape_);
  Shape st;
  if (view_strides(shape_, strides_, ns, st)) return Tensor(storage_, ns, st, offset_, dtype_);
  return contiguous().view(ns);
}

Tensor Tensor::flatten(int64_t start, int64_t end) const {
  if (dim() == 0) return reshape({1});
  start = wrap_dim(start, dim(), "flatten");
  end = wrap_dim(end, dim(), "flatten");
  if (start > end) throw std::invalid_argument("flatten: start dim must not come after end dim");
  Shape ns(shape_.begin(), shape_.begin() + start);
  int64_t m = 1;
  for (int64_t i = start; i <= end; ++i) m *= shape_[i];
  ns.push_back(m);
  ns.insert(ns.end(), shape_.begin() + end + 1, shape_.end());
  return reshape(ns);
}

Tensor Tensor::permute(const Shape& dims) const {
  if (static_cast<int64_t>(dims.size()) != dim())
    throw std::invalid_argument("permute: got " + std::to_string(dims.size()) + " dims " + shape_str(dims) + " for " +
                                desc());
  Shape ns(dims.size()), st(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], dim(), "permute");
    if (seen[d]) throw std::invalid_argument("permute: repeated dim in " + shape_str(dims));
    seen[d] = true;
    ns[i] = shape_[d];
    st[i] = strides_[d];
  }
  return Tensor(storage_, ns, st, offset_, dtype_);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  d0 = wrap_dim(d0, dim(), "transpose");
  d1 = wrap_dim(d1, dim(), "transpose");
  Shape ns = shape_, st = strides_;
  std::swap(ns[d0], ns[d1]);
  std::swap(st[d0], st[d1]);
  return Tensor(storage_, ns, st, offset_, dtype_);
}

Tensor Tensor::t() const {
  if (dim() != 2) throw std::invalid_argument("t: expected a 2-d tensor, got " + desc());
  return transpose(0, 1);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = wrap_dim(d, dim(), "narrow");
  if (start < 0) start += shape_[d];
  if (start < 0 || length < 0 || start + length > shape_[d])
    throw std::out_of_range("narrow: start " + std::to_string(start) + " + length " + std::to_string(length) +
                            " exceeds size " + std::to_string(shape_[d]) + " of dim " + std::to_string(d) + " of " +
                            desc());
  Shape ns = shape_;
  ns[d] = length;
  return Tensor(storage_, ns, strides_, offset_ + start * strides_[d], dtype_);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = wrap_dim(d, dim(), "slice");
  if (step <= 0) throw std::invalid_argument("slice: step must be positive, got " + std::to_string(step));
  const int64_t n = shape_[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape ns = shape_, st = strides_;
  ns[d] = (end - start + step - 1) / step;
  st[d] = strides_[d] * step;
  return Tensor(storage_, ns, st, offset_ + start * strides_[d], dtype_);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  d = wrap_dim(d, dim(), "select");
  if (index < -shape_[d] || index >= shape_[d])
    throw std::out_of_range("select: index " + std::to_string(index) + " out of range for dim " + std::to_string(d) +
                            " of size " + std::to_string(shape_[d]) + " (" + desc() + ")");
  if (index < 0) index += shape_[d];
  Shape ns = shape_, st = strides_;
  ns.erase(ns.begin() + d);
  st.erase(st.begin() + d);
  return Tensor(storage_, ns, st, offset_ + index * strides_[d], dtype_);
}

Tensor Tensor::expand(const Shape& shape) const {
  if (static_cast<int64_t>(shape.size()) < dim())
    throw std::invalid_argument("expand: target " + shape_str(shape) + " has fewer dims than " + desc());
  const int64_t lead = static_cast<int64_t>(shape.size()) - dim();
  Shape ns(shape.size()), st(shape.size());
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) {
    if (i < lead) {
      if (shape[i] < 0)
        throw std::invalid_argument("expand: -1 not allowed for new leading dims in " + shape_str(shape));
      ns[i] = shape[i];
      st[i] = 0;
      continue;
    }
    const int64_t have = shape_[i - lead];
    const int64_t want = shape[i] == -1 ? have : shape[i];
    if (have == want) {
      ns[i] = have;
      st[i] = strides_[i - lead];
    } else if (have == 1) {
      ns[i] = want;
      st[i] = 0;
    } else {
      throw std::invalid_argument("expand: cannot expand " + desc() + " to " + shape_str(shape) + " (dim " +
                                  std::to_string(i) + ": " + std::to_string(have) + " vs " + std::to_string(want) +
                                  ")");
    }
  }
  return Tensor(storage_, ns, st, offset_, dtype_);
}

Tensor Tensor::squeeze() const {
  Shape ns, st;
  for (int64_t i = 0; i < dim(); ++i)
    if (shape_[i] != 1) {
      ns.push_back(shape_[i]);
      st.push_back(strides_[i]);
    }
  return Tensor(storage_, ns, st, offset_, dtype_);
}

Tensor Tensor::squeeze(int64_t d) const {
  d = wrap_dim(d, dim(), "squeeze");
  if (shape_[d] != 1) return *this;
  Shape ns = shape_, st = strides_;
  ns.erase(ns.begin() + d);
  st.erase(st.begin() + d);
  return Tensor(storage_, ns, st, offset_, dtype_);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape ns = shape_, st = strides_;
  const int64_t s = d < dim() ? strides_[d] * shape_[d] : 1;
  ns.insert(ns.begin() + d, 1);
  st.insert(st.begin() + d, s);
  return Tensor(storage_, ns, st, offset_, dtype_);
}

}  // namespace minidl
