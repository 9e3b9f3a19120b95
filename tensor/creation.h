// tensor/creation.h — making tensors: empty, zeros, ones, full, arange, from_vector, *_like.
#pragma once
#include <vector>

#include "minidl/tensor/tensor.h"

namespace minidl {

Tensor empty(const Shape& shape, DType dtype = DType::Float32, Device device = Device::cpu());
Tensor zeros(const Shape& shape, DType dtype = DType::Float32, Device device = Device::cpu());
Tensor ones(const Shape& shape, DType dtype = DType::Float32, Device device = Device::cpu());
Tensor full(const Shape& shape, double value, DType dtype = DType::Float32, Device device = Device::cpu());
Tensor scalar_tensor(double value, DType dtype = DType::Float32);  // 0-d
// [start, end) with step; int64 unless dtype is given.
Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::Int64);
Tensor arange(int64_t end, DType dtype = DType::Int64);

Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);

// Copies values (row-major) into a new tensor of `shape`; shape {} means 1-d of values.size().
template <class T> Tensor from_vector(const std::vector<T>& values, Shape shape = {}) {
  if (shape.empty() && values.size() != 1) shape = {static_cast<int64_t>(values.size())};
  if (shape_numel(shape) != static_cast<int64_t>(values.size()))
    throw std::invalid_argument("from_vector: " + std::to_string(values.size()) + " values do not fill shape " +
                                shape_str(shape));
  Tensor out(shape, dtype_of<T>::value);
  std::copy(values.begin(), values.end(), out.data<T>());
  return out;
}
// Same, converting to dtype: from_vector({1, 2}, {2}, DType::Float64).
Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype);

}  // namespace minidl
