// tensor/ops_util.h — small checks shared by the tensor/ops_*.cpp files (not a public header):
// defined, equal dtypes, dims normalisation; every message names the op. (Devices are checked
// by cuda_dispatch::on_cuda, tensor/cuda_dispatch.h.)
#pragma once
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "minidl/tensor/tensor.h"

namespace minidl::detail {

inline void check_defined(const Tensor& t, const char* op) {
  if (!t.defined()) throw std::invalid_argument(std::string(op) + ": undefined tensor");
}

inline void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  if (a.dtype() != b.dtype())
    throw std::invalid_argument(std::string(op) + ": dtype mismatch " + dtype_name(a.dtype()) + " vs " +
                                dtype_name(b.dtype()));
}

// Wraps negative dims, sorts, rejects repeats; empty = every dim.
inline Shape normalize_dims(const Shape& dims, int64_t ndim, const char* op) {
  Shape out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(wrap_dim(d, ndim, op));
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end())
    throw std::invalid_argument(std::string(op) + ": repeated dim in " + shape_str(dims));
  if (ndim == 0) out.clear();  // a 0-d tensor: dim 0 / -1 means "the whole (single) element"
  return out;
}

// The values of a CPU tensor as doubles, for a CPU kernel that takes them as a host array (row-major,
// converted as to_vector<double> converts). Not a host read of a device's value, so not counted by
// host_read_count(): the CUDA path of the same op reads nothing back.
inline std::vector<double> cpu_values(const Tensor& t) {
  if (!t.device().is_cpu()) throw std::logic_error("cpu_values: " + t.desc() + " is not on the CPU");
  const Tensor c = t.to(DType::Float64).contiguous();
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

}  // namespace minidl::detail
