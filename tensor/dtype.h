// tensor/dtype.h — element types a Tensor can hold, their sizes and names, and `dispatch`,
// which calls a generic lambda with a value of the C++ type behind a runtime DType.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace minidl {

enum class DType : uint8_t { Float32, Float64, Int64, UInt8 };

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
  }
  return "?";
}

inline bool is_floating(DType t) { return t == DType::Float32 || t == DType::Float64; }

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::UInt8; };

// dispatch(dtype, op, [&](auto tag) { using T = decltype(tag); ... }) — any dtype.
template <class F> decltype(auto) dispatch(DType t, const char* /*op*/, F&& f) {
  switch (t) {
    case DType::Float32:
      return f(float{});
    case DType::Float64:
      return f(double{});
    case DType::Int64:
      return f(int64_t{});
    case DType::UInt8:
      return f(uint8_t{});
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
    default:
      throw std::invalid_argument(std::string(op) + ": expected a floating dtype (float32 or float64), got " +
                                  dtype_name(t));
  }
}

}  // namespace minidl
