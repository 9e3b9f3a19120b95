// tensor/dtype.h — element types a Tensor can hold, their sizes and names, and `dispatch`,
// which calls a generic lambda with a value of the C++ type behind a runtime DType.
// BFloat16 and Float16 (mixed precision) are storage formats: their elements are bit patterns
// (`bfloat16`, `float16` below; conversions in kernels/cpu/half.h), and the ops that accept them
// compute in float32 and round back. `dispatch` never hands them to a generic lambda: it throws,
// naming the op and the dtype, so an op that has no half-precision path cannot compute garbage.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace minidl {

enum class DType : uint8_t { Float32, Float64, Int64, UInt8, BFloat16, Float16 };

// One element of a BFloat16 / Float16 tensor: the raw bit pattern (Tensor::data<bfloat16>()).
struct bfloat16 {
  uint16_t bits;
};
struct float16 {
  uint16_t bits;
};

inline constexpr size_t element_size(DType t) {
  switch (t) {
    case DType::Float32:
      return 4;
    case DType::Float64:
      return 8;
    case DType::Int64:
      return 8;
    case DType::UInt8:
      return 1;
    case DType::BFloat16:
    case DType::Float16:
      return 2;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
    case DType::Int64:
      return "int64";
    case DType::UInt8:
      return "uint8";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Float16:
      return "float16";
  }
  return "?";
}

inline bool is_half(DType t) { return t == DType::BFloat16 || t == DType::Float16; }  // the 16-bit floats
inline bool is_floating(DType t) { return t == DType::Float32 || t == DType::Float64 || is_half(t); }

// The error of an op that has no bfloat16 / float16 path.
inline std::invalid_argument half_unsupported(const char* op, DType t) {
  return std::invalid_argument(std::string(op) + ": not implemented for " + dtype_name(t) +
                               " (convert with .to(DType::Float32) first)");
}

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::UInt8; };
template <> struct dtype_of<bfloat16> { static constexpr DType value = DType::BFloat16; };
template <> struct dtype_of<float16> { static constexpr DType value = DType::Float16; };

// dispatch(dtype, op, [&](auto tag) { using T = decltype(tag); ... }) — any dtype but the
// 16-bit floats, which throw half_unsupported(op, dtype).
template <class F> decltype(auto) dispatch(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Float32:
      return f(float{});
    case DType::Float64:
      return f(double{});
    case DType::Int64:
      return f(int64_t{});
    case DType::UInt8:
      return f(uint8_t{});
    case DType::BFloat16:
    case DType::Float16:
      throw half_unsupported(op, t);
  }
  throw std::logic_error("dispatch: unknown dtype");
}

// dispatch_floating: float32 / float64 only; anything else is an error naming the op.
template <class F> decltype(auto) dispatch_floating(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Float32:
      return f(float{});
    case DType::Float64:
      return f(double{});
    case DType::BFloat16:
    case DType::Float16:
      throw half_unsupported(op, t);
    default:
      throw std::invalid_argument(std::string(op) + ": expected a floating dtype (float32 or float64), got " +
                                  dtype_name(t));
  }
}

}  // namespace minidl
