// autograd/autocast.cpp — the thread-local autocast state, its guard, and the operand cast of the
// matrix products (autograd/ops_linalg.cpp, ops_nn.cpp, ops_attention.cpp).
#include "minidl/autograd/autocast.h"

#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>

#include "minidl/autograd/ops.h"

namespace minidl {

namespace {
thread_local bool autocast_on = false;
thread_local DType autocast_low = DType::Float32;

// Until a bfloat16 GEMM is wired in (kernels::cpu::gemm_bf16 needs AVX512_BF16), the products run
// on float32 kernels; said once per process on CPUs without the instructions.
void note_bf16_kernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!__builtin_cpu_supports("avx512bf16"))
      std::fprintf(stderr,
                   "minidl: autocast(bfloat16): this CPU has no AVX512_BF16; bfloat16 matrix products run through "
                   "float32 kernels\n");
  });
}
}  // namespace

autocast::autocast(DType dtype, bool enabled) : prev_enabled_(autocast_on), prev_dtype_(autocast_low) {
  if (!is_half(dtype) && dtype != DType::Float32)
    throw std::invalid_argument(std::string("autocast: expected bfloat16, float16 or float32 (off), got ") +
                                dtype_name(dtype));
  autocast_on = enabled && is_half(dtype);
  autocast_low = autocast_on ? dtype : DType::Float32;
  if (autocast_on && dtype == DType::BFloat16) note_bf16_kernels();
}

autocast::~autocast() {
  autocast_on = prev_enabled_;
  autocast_low = prev_dtype_;
}

bool is_autocast_enabled() { return autocast_on; }
DType autocast_dtype() { return autocast_low; }

Variable autocast_operand(const Variable& x) {
  if (!autocast_on || !x.defined() || x.dtype() != DType::Float32) return x;
  return to(to(x, autocast_low), DType::Float32);
}

}  // namespace minidl
