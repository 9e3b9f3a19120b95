// tensor/ops_attention.cpp — self-attention on a packed (B, L, 3E) projection, forward beside
// backward: the CPU fast path of nn::MultiheadAttention (kernels/cpu/attention.h reads the heads
// in place; with bf16_products its bfloat16-product kernels where the CPU runs them). There is no
// CUDA kernel: on CUDA tensors these throw, and MultiheadAttention takes the composed path
// (slices, matmul, softmax), which is also the reference the tests compare with.
#include <stdexcept>
#include <string>

#include "minidl/kernels/cpu/attention.h"
#include "minidl/tensor/ops_nn.h"
#include "minidl/tensor/ops_util.h"

namespace minidl {

namespace {
// qkv (B, L, 3E) with E divisible by the heads, on the CPU; returns D = E / num_heads.
int64_t check_packed(const Tensor& qkv, int64_t num_heads, const char* op) {
  detail::check_defined(qkv, op);
  if (!qkv.device().is_cpu())
    throw std::invalid_argument(std::string(op) + ": CPU tensors only (got " + qkv.desc() +
                                "); CUDA takes the composed attention");
  if (!qkv.is_floating_point() || qkv.dim() != 3 || num_heads <= 0 || qkv.size(2) % (3 * num_heads) != 0)
    throw std::invalid_argument(std::string(op) + ": expected a floating qkv (B, L, 3 * E) with E divisible by " +
                                std::to_string(num_heads) + " heads, got " + qkv.desc());
  return qkv.size(2) / (3 * num_heads);
}
}  // namespace

PackedAttentionResult packed_attention_forward(const Tensor& qkv_in, int64_t num_heads, double scale, bool is_causal,
                                               bool bf16_products) {
  const int64_t D = check_packed(qkv_in, num_heads, "packed_attention_forward");
  const Tensor qkv = qkv_in.contiguous();
  const int64_t B = qkv.size(0), L = qkv.size(1), H = num_heads;
  PackedAttentionResult r{Tensor({B, L, H * D}, qkv.dtype()), Tensor({B, H, L, L}, qkv.dtype())};
  if (bf16_products && qkv.dtype() == DType::Float32 &&
      kernels::cpu::packed_attention_forward_bf16(qkv.data<float>(), B, L, H, D, static_cast<float>(scale),
                                                  r.weights.data<float>(), r.out.data<float>(), is_causal))
    return r;
  dispatch_floating(qkv.dtype(), "packed_attention_forward", [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::packed_attention_forward(qkv.data<T>(), B, L, H, D, static_cast<T>(scale), r.weights.data<T>(),
                                           r.out.data<T>(), is_causal);
  });
  return r;
}

Tensor packed_attention_backward(const Tensor& qkv_in, const Tensor& weights_in, const Tensor& dout_in,
                                 int64_t num_heads, double scale, bool is_causal, bool bf16_products) {
  constexpr const char* op = "packed_attention_backward";
  const int64_t D = check_packed(qkv_in, num_heads, op);
  const int64_t B = qkv_in.size(0), L = qkv_in.size(1), H = num_heads;
  detail::check_same_dtype(qkv_in, weights_in, op);
  detail::check_same_dtype(qkv_in, dout_in, op);
  if (weights_in.shape() != Shape{B, H, L, L} || dout_in.shape() != Shape{B, L, H * D})
    throw std::invalid_argument(std::string(op) + ": weights " + weights_in.desc() + " or dout " + dout_in.desc() +
                                " do not match qkv " + qkv_in.desc());
  const Tensor qkv = qkv_in.contiguous(), weights = weights_in.contiguous(), dout = dout_in.contiguous();
  Tensor dqkv(qkv.shape(), qkv.dtype());
  if (bf16_products && qkv.dtype() == DType::Float32 &&
      kernels::cpu::packed_attention_backward_bf16(qkv.data<float>(), weights.data<float>(), dout.data<float>(), B, L,
                                                   H, D, static_cast<float>(scale), dqkv.data<float>(), is_causal))
    return dqkv;
  dispatch_floating(qkv.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::packed_attention_backward(qkv.data<T>(), weights.data<T>(), dout.data<T>(), B, L, H, D,
                                            static_cast<T>(scale), dqkv.data<T>(), is_causal);
  });
  return dqkv;
}

}  // namespace minidl
