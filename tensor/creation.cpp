// tensor/creation.cpp — constructors of filled tensors.
#include "minidl/tensor/creation.h"

#include <cmath>

namespace minidl {

Tensor empty(const Shape& shape, DType dtype, Device device) { return Tensor(shape, dtype, device); }
Tensor zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t(shape, dtype, device);
  t.fill_(value);  // on a GPU a fill kernel: no host -> device copy, so no synchronisation
  return t;
}

Tensor scalar_tensor(double value, DType dtype) { return full({}, value, dtype); }

Tensor arange(double start, double end, double step, DType dtype) {
  if (step == 0) throw std::invalid_argument("arange: step must be non-zero");
  if ((end - start) / step < 0) throw std::invalid_argument("arange: the sign of step does not match end - start");
  const int64_t n = static_cast<int64_t>(std::ceil((end - start) / step));
  if (is_half(dtype)) return arange(start, end, step, DType::Float32).to(dtype);
  Tensor out({n}, dtype);
  dispatch(dtype, "arange", [&](auto tag) {
    using T = decltype(tag);
    T* p = out.data<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(start + step * static_cast<double>(i));
  });
  return out;
}

Tensor arange(int64_t end, DType dtype) { return arange(0.0, static_cast<double>(end), 1.0, dtype); }

Tensor empty_like(const Tensor& t) { return Tensor(t.shape(), t.dtype(), t.device()); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype(), t.device()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.dtype(), t.device()); }
Tensor full_like(const Tensor& t, double value) { return full(t.shape(), value, t.dtype(), t.device()); }

Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype) {
  return from_vector(values, shape).to(dtype);
}

}  // namespace minidl
