// tensor/tensor.cpp — Tensor metadata, copies and element access (views: tensor_views.cpp).
#include "minidl/tensor/tensor.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "minidl/kernels/cpu/copy.h"
#include "minidl/kernels/cpu/half.h"
#include "minidl/kernels/cpu/half_span.h"
#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/cuda_api.h"
#include "minidl/tensor/cuda_dispatch.h"

namespace minidl {

namespace {
std::atomic<uint64_t> host_reads{0};  // see host_read_count()

// Calls f(S{}, load) with the element type S of a float32 / bfloat16 / float16 tensor and its
// conversion to float32 (the 16-bit floats are uint16_t bit patterns).
template <class F> void with_load(DType t, F&& f) {
  if (t == DType::BFloat16)
    f(uint16_t{}, [](uint16_t h) { return kernels::cpu::bf16_to_float(h); });
  else if (t == DType::Float16)
    f(uint16_t{}, [](uint16_t h) { return kernels::cpu::fp16_to_float(h); });
  else
    f(float{}, [](float v) { return v; });
}
// Same for a destination: f(D{}, store), store rounding a float32 to nearest, ties to even.
template <class F> void with_store(DType t, F&& f) {
  if (t == DType::BFloat16)
    f(uint16_t{}, [](float v) { return kernels::cpu::float_to_bf16(v); });
  else if (t == DType::Float16)
    f(uint16_t{}, [](float v) { return kernels::cpu::float_to_fp16(v); });
  else
    f(float{}, [](float v) { return v; });
}

// dst = src (already dst's shape, both on the CPU) when either is bfloat16 / float16: through
// float32, as PyTorch converts (a float64 source is first rounded to float32).
void copy_through_float(Tensor& dst, const Tensor& src) {
  if (!is_half(src.dtype()) && src.dtype() != DType::Float32) return copy_through_float(dst, src.to(DType::Float32));
  if (!is_half(dst.dtype()) && dst.dtype() != DType::Float32) {
    Tensor widened(dst.shape(), DType::Float32);
    copy_through_float(widened, src);
    dst.copy_(widened);
    return;
  }
  if (src.is_contiguous() && dst.is_contiguous()) {  // float32 <-> bfloat16 span by span (kernels/cpu/half_span.h)
    const int64_t n = src.numel();
    if (src.dtype() == DType::Float32 && dst.dtype() == DType::BFloat16) {
      const float* x = src.data<float>();
      auto* y = static_cast<uint16_t*>(dst.raw_data());
      kernels::cpu::parallel_for(n, 1 << 16,
                                 [&](int64_t b, int64_t e) { kernels::cpu::float_to_bf16_span(x + b, y + b, e - b); });
      return;
    }
    if (src.dtype() == DType::BFloat16 && dst.dtype() == DType::Float32) {
      const auto* h = static_cast<const uint16_t*>(src.raw_data());
      float* y = dst.data<float>();
      kernels::cpu::parallel_for(n, 1 << 16,
                                 [&](int64_t b, int64_t e) { kernels::cpu::bf16_to_float_span(h + b, y + b, e - b); });
      return;
    }
  }
  with_load(src.dtype(), [&](auto stag, auto load) {
    using S = decltype(stag);
    with_store(dst.dtype(), [&](auto dtag, auto store) {
      using D = decltype(dtag);
      kernels::cpu::strided_copy(static_cast<const S*>(src.raw_data()), src.strides(), static_cast<D*>(dst.raw_data()),
                                 dst.strides(), dst.shape(), [&](S v) { return store(load(v)); });
    });
  });
}
}  // namespace

uint64_t host_read_count() { return host_reads.load(std::memory_order_relaxed); }

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (int64_t i = static_cast<int64_t>(s.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= std::max<int64_t>(s[i], 1);
  }
  return st;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  const int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  if (dim < lo || dim > hi)
    throw std::out_of_range(std::string(op) + ": dimension " + std::to_string(dim) + " out of range for a " +
                            std::to_string(ndim) + "-d tensor (expected in [" + std::to_string(lo) + ", " +
                            std::to_string(hi) + "])");
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

Tensor::Tensor(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset, DType dtype)
    : storage_(std::move(storage)),
      shape_(std::move(shape)),
      strides_(std::move(strides)),
      offset_(offset),
      numel_(shape_numel(shape_)),
      dtype_(dtype) {
  for (int64_t d : shape_)
    if (d < 0) throw std::invalid_argument("Tensor: negative size in shape " + shape_str(shape_));
}

Tensor::Tensor(const Shape& shape, DType dtype, Device device)
    : shape_(shape), strides_(contiguous_strides(shape)), numel_(shape_numel(shape)), dtype_(dtype) {
  for (int64_t d : shape_)
    if (d < 0) throw std::invalid_argument("empty: negative size in shape " + shape_str(shape_));
  storage_ = std::make_shared<Storage>(static_cast<size_t>(numel_) * element_size(dtype), device);
}

int64_t Tensor::size(int64_t d) const { return shape_[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides_[wrap_dim(d, dim(), "stride")]; }
Device Tensor::device() const { return storage_ ? storage_->device() : Device::cpu(); }

bool Tensor::is_contiguous() const {
  if (numel_ == 0) return true;  // as PyTorch: no element out of place, whatever the strides
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

std::string Tensor::desc() const {
  if (!defined()) return "undefined tensor";
  return std::string(dtype_name(dtype_)) + shape_str(shape_) + " on " + device().str();
}

void* Tensor::raw_data() const {
  if (!defined()) throw std::logic_error("Tensor::raw_data: undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(element_size(dtype_));
}

// ---------------------------------------------------------------- copies

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out(shape_, dtype_, device());
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(DType dt) const {
  if (dt == dtype_) return *this;
  Tensor out(shape_, dt, device());
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(Device dev) const {
  if (dev == device()) return *this;
  if (dev.is_cpu()) host_reads.fetch_add(1, std::memory_order_relaxed);  // a device -> host copy
  Tensor src = contiguous();
  Tensor out(shape_, dtype_, dev);
  const size_t nbytes = static_cast<size_t>(numel_) * element_size(dtype_);
  if (dev.is_cuda() && src.device().is_cuda())  // another device: after the source device's queued work
    kernels::cuda::memcpy_between_devices(out.raw_data(), dev.index, src.raw_data(), src.device().index, nbytes);
  else if (dev.is_cuda())
    kernels::cuda::memcpy(out.raw_data(), src.raw_data(), nbytes, 0, dev.index);
  else
    kernels::cuda::memcpy(out.raw_data(), src.raw_data(), nbytes, 1, src.device().index);
  return out;
}

Tensor& Tensor::fill_(double value) {
  if (device().is_cuda()) {
    const auto it = cuda_dispatch::make_iter(shape_, {&strides_}, "fill_");
    cuda_dispatch::use_device(*this);
    kernels::cuda::fill(cuda_dispatch::elem(dtype_), it, raw_data(), value);
    return *this;
  }
  if (is_half(dtype_)) {  // the rounded bit pattern, like any other element
    const float f = static_cast<float>(value);
    const uint16_t bits = dtype_ == DType::BFloat16 ? kernels::cpu::float_to_bf16(f) : kernels::cpu::float_to_fp16(f);
    uint16_t* p = static_cast<uint16_t*>(raw_data());
    if (is_contiguous())
      std::fill(p, p + numel_, bits);
    else
      for_each_offset(shape_, strides_, [&](int64_t, int64_t off) { p[off] = bits; });
    return *this;
  }
  dispatch(dtype_, "fill_", [&](auto tag) {
    using T = decltype(tag);
    T* p = data<T>();
    const T v = static_cast<T>(value);
    if (is_contiguous()) {
      std::fill(p, p + numel_, v);
    } else {
      for_each_offset(shape_, strides_, [&](int64_t, int64_t off) { p[off] = v; });
    }
  });
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  if (!src.defined()) throw std::invalid_argument("copy_: source is undefined");
  Tensor s = src.shape_ == shape_ ? src : src.expand(shape_);
  if (device().is_cuda() && src.device() == device()) {  // on one device: strided, broadcast, dtype-converting
    const auto it = cuda_dispatch::make_iter(shape_, {&strides_, &s.strides_}, "copy_");
    cuda_dispatch::use_device(*this);
    kernels::cuda::copy(cuda_dispatch::elem(dtype_), cuda_dispatch::elem(s.dtype_), it, raw_data(), s.raw_data());
    return *this;
  }
  if (device().is_cpu() && src.device().is_cuda()) return copy_(src.to(device()));  // to the host, then below
  if (device().is_cuda()) {  // from the host or another device
    if (shape_ != src.shape_ || dtype_ != src.dtype_ || !is_contiguous()) return copy_(src.to(device()));
    const Tensor c = src.contiguous();
    const size_t nbytes = static_cast<size_t>(numel_) * element_size(dtype_);
    if (c.device().is_cpu())
      kernels::cuda::memcpy(raw_data(), c.raw_data(), nbytes, 0, device().index);
    else
      kernels::cuda::memcpy_between_devices(raw_data(), device().index, c.raw_data(), c.device().index, nbytes);
    return *this;
  }
  if (is_half(dtype_) || is_half(s.dtype_)) {
    copy_through_float(*this, s);
    return *this;
  }
  dispatch(dtype_, "copy_", [&](auto dtag) {
    using D = decltype(dtag);
    dispatch(s.dtype_, "copy_", [&](auto stag) {
      using S = decltype(stag);
      kernels::cpu::strided_copy<S, D>(s.data<S>(), s.strides_, data<D>(), strides_, shape_);
    });
  });
  return *this;
}

// ---------------------------------------------------------------- values

double Tensor::item() const {
  if (numel_ != 1) throw std::invalid_argument("item: only one-element tensors can be converted, got " + desc());
  if (is_half(dtype_)) return to(DType::Float32).item();  // exact: float32 holds every 16-bit float
  if (device().is_cpu()) host_reads.fetch_add(1, std::memory_order_relaxed);  // (from CUDA: counted by cpu())
  Tensor c = cpu();
  return dispatch(dtype_, "item", [&](auto tag) -> double {
    using T = decltype(tag);
    return static_cast<double>(*c.data<T>());
  });
}

template <class T> std::vector<T> Tensor::to_vector() const {
  std::vector<T> out(static_cast<size_t>(numel_));
  if (numel_ == 0) return out;
  if (is_half(dtype_)) return to(DType::Float32).to_vector<T>();  // through float32, exactly
  if (device().is_cpu()) host_reads.fetch_add(1, std::memory_order_relaxed);  // (from CUDA: counted by cpu())
  Tensor c = cpu();
  dispatch(dtype_, "to_vector", [&](auto tag) {
    using S = decltype(tag);
    const S* p = c.data<S>();
    for_each_offset(c.shape_, c.strides_, [&](int64_t i, int64_t off) { out[i] = static_cast<T>(p[off]); });
  });
  return out;
}

template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;
template std::vector<int> Tensor::to_vector<int>() const;

}  // namespace minidl
