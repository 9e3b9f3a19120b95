// tensor/tensor.h — Tensor: a strided view (shape, strides, offset) of a shared Storage.
// Views (view, permute, transpose, narrow, slice, expand, squeeze, unsqueeze) never copy;
// reshape and contiguous copy only when the strides forbid a view. Math lives in tensor/ops.h,
// creation in tensor/creation.h, random numbers in tensor/random.h. No autograd here.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "minidl/tensor/device.h"
#include "minidl/tensor/dtype.h"
#include "minidl/tensor/storage.h"

namespace minidl {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s);  // "[2, 3]"
int64_t shape_numel(const Shape& s);
Shape contiguous_strides(const Shape& s);  // row-major
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);  // -1 -> ndim-1; throws if out of range

// Reads of tensor values by the host so far in this process: item() and to_vector() on any
// device, and copies from a CUDA device to the host (to(Device::cpu()), cpu()). On a GPU each one
// waits for every kernel queued before it (a synchronisation); counted on the CPU too, so that a
// test there can prove a code path (a training step) makes none. Atomic; never reset.
uint64_t host_read_count();

class Tensor {
 public:
  Tensor() = default;  // undefined tensor
  Tensor(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset, DType dtype);
  // A new contiguous, uninitialised tensor.
  Tensor(const Shape& shape, DType dtype, Device device = Device::cpu());

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& sizes() const { return shape_; }
  int64_t size(int64_t dim) const;
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numel() const { return numel_; }
  const Shape& strides() const { return strides_; }
  int64_t stride(int64_t dim) const;
  int64_t offset() const { return offset_; }
  DType dtype() const { return dtype_; }
  Device device() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  bool is_contiguous() const;
  bool is_floating_point() const { return is_floating(dtype_); }
  std::string desc() const;  // "float32[2, 3] on cpu", for error messages

  // Typed pointer to the first element; checks that T matches the dtype.
  template <class T> T* data() const;
  void* raw_data() const;

  // ---- views (share storage) ----
  Tensor view(const Shape& shape) const;  // -1 allowed once; requires compatible strides
  Tensor reshape(const Shape& shape) const;  // view if possible, else contiguous copy
  Tensor flatten(int64_t start = 0, int64_t end = -1) const;
  Tensor permute(const Shape& dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;  // 2-D transpose
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;  // removes dim
  Tensor expand(const Shape& shape) const;  // -1 keeps a size; new leading dims allowed
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor operator[](int64_t i) const { return select(0, i); }

  // ---- copies ----
  Tensor contiguous() const;  // *this when already contiguous
  Tensor clone() const;  // always a fresh contiguous copy
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  Tensor cpu() const { return to(Device::cpu()); }

  // ---- in-place ----
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }
  Tensor& copy_(const Tensor& src);  // src broadcast to this shape; dtype converted

  // ---- values ----
  double item() const;  // one-element tensors only
  template <class T> T item() const { return static_cast<T>(item()); }
  template <class T> std::vector<T> to_vector() const;  // row-major order, converted to T
  std::string to_string() const;

  // True when both are the same view of the same storage.
  bool is_same(const Tensor& o) const {
    return storage_ == o.storage_ && offset_ == o.offset_ && shape_ == o.shape_ && strides_ == o.strides_;
  }

 private:
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Shape strides_;
  int64_t offset_ = 0;
  int64_t numel_ = 0;
  DType dtype_ = DType::Float32;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Calls fn(const T* src, T* dst) style loops over a strided tensor in row-major order:
// fn(int64_t linear_index, int64_t element_offset) for every element (offset in elements,
// relative to t.data<T>()). Used by copies and printing; hot paths use kernels/cpu loops.
template <class F> void for_each_offset(const Shape& shape, const Shape& strides, F&& fn) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  int64_t n = shape_numel(shape);
  if (n == 0) return;
  std::vector<int64_t> idx(nd, 0);
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    fn(i, off);
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) {
        off += strides[d];
        break;
      }
      off -= strides[d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
}

template <class T> T* Tensor::data() const {
  if (!defined()) throw std::logic_error("Tensor::data: undefined tensor");
  if (dtype_of<T>::value != dtype_)
    throw std::invalid_argument(std::string("Tensor::data: tensor is ") + dtype_name(dtype_) + ", requested " +
                                dtype_name(dtype_of<T>::value));
  return static_cast<T*>(storage_->data()) + offset_;
}

}  // namespace minidl
