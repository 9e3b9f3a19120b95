// tensor/ops_nn_checks.h — argument checks shared by the tensor/ops_nn.h implementations
// (ops_conv.cpp, ops_pool.cpp, ops_norm.cpp, ops_loss.cpp). Internal: not part of the public API.
// Each check throws std::invalid_argument whose message starts with the op's name and shows the
// offending tensor as Tensor::desc() ("float32[2, 3] on cpu").
#pragma once
#include <stdexcept>
#include <string>

#include "minidl/tensor/tensor.h"

namespace minidl::nn_checks {

inline std::string desc_or_undefined(const Tensor& t) { return t.defined() ? t.desc() : "an undefined tensor"; }

inline void require_defined(const Tensor& t, const char* op, const char* name) {
  if (!t.defined()) throw std::invalid_argument(std::string(op) + ": " + name + " is undefined");
}

// Defined, floating dtype (on any device: cuda_dispatch::on_cuda has checked that the op's tensors
// share one device before these checks run).
inline void require_float(const Tensor& t, const char* op, const char* name) {
  require_defined(t, op, name);
  if (!t.is_floating_point())
    throw std::invalid_argument(std::string(op) + ": expected " + name + " to be float32 or float64, got " + t.desc());
}

inline void require_same_dtype(const Tensor& a, const Tensor& b, const char* op, const char* name_a,
                               const char* name_b) {
  if (a.dtype() != b.dtype())
    throw std::invalid_argument(std::string(op) + ": " + name_a + " and " + name_b + " must have the same dtype, got " +
                                a.desc() + " and " + b.desc());
}

// A per-channel vector: undefined is allowed when `optional`; else 1-d of size C, float.
inline void require_channel_vector(const Tensor& t, int64_t C, const char* op, const char* name, bool optional) {
  if (!t.defined()) {
    if (optional) return;
    throw std::invalid_argument(std::string(op) + ": " + name + " is undefined");
  }
  require_float(t, op, name);
  if (t.dim() != 1 || t.size(0) != C)
    throw std::invalid_argument(std::string(op) + ": expected " + name + " of shape [" + std::to_string(C) + "], got " +
                                t.desc());
}

}  // namespace minidl::nn_checks
