// autograd/autocast.cpp — the thread-local autocast state, its guard, and the operand casts of the
// matrix products (autograd/ops_linalg.cpp, ops_nn.cpp, ops_attention.cpp). A CPU without
// AVX512_BF16 is reported once by the bfloat16 products themselves (tensor/ops_linalg.cpp).
#include "minidl/autograd/autocast.h"

#include <stdexcept>
#include <string>

#include "minidl/autograd/ops.h"
#include "minidl/tensor/ops.h"

namespace minidl {

namespace {
thread_local bool autocast_on = false;
thread_local DType autocast_low = DType::Float32;
}  // namespace

autocast::autocast(DType dtype, bool enabled) : prev_enabled_(autocast_on), prev_dtype_(autocast_low) {
  if (!is_half(dtype) && dtype != DType::Float32)
    throw std::invalid_argument(std::string("autocast: expected bfloat16, float16 or float32 (off), got ") +
                                dtype_name(dtype));
  autocast_on = enabled && is_half(dtype);
  autocast_low = autocast_on ? dtype : DType::Float32;
}

autocast::~autocast() {
  autocast_on = prev_enabled_;
  autocast_low = prev_dtype_;
}

bool is_autocast_enabled() { return autocast_on; }
DType autocast_dtype() { return autocast_low; }

Variable autocast_operand(const Variable& x) {
  if (!autocast_on || !x.defined() || x.dtype() != DType::Float32) return x;
  return round_to(x, autocast_low);
}

AutocastCast autocast_low_cast(const Variable& x) {
  if (!autocast_on || !x.defined() || x.dtype() != DType::Float32) return {x, x.defined() ? x.data() : Tensor(), false};
  return {x, x.data().to(autocast_low), true};
}

bool autocast_gemm_takes_low(const Variable& x) {
  return autocast_on && (autocast_low == DType::BFloat16 || (x.defined() && x.data().device().is_cuda()));
}

AutocastCast autocast_gemm_cast(const Variable& x) {
  if (autocast_gemm_takes_low(x)) return autocast_low_cast(x);
  const Variable v = autocast_operand(x);
  return {v, v.defined() ? v.data() : Tensor(), false};
}

Tensor AutocastCast::gradient(const Tensor& g, DType data_dtype, bool cast) {
  if (!g.defined()) return g;
  return cast ? round_to(g, data_dtype) : g.to(data_dtype);
}

}  // namespace minidl
