// autograd/ops_attention.cpp — scaled dot-product attention, composed from matmul, softmax and
// dropout (so its backward is theirs), the mask helpers that nn::MultiheadAttention shares, and
// its fast path without dropout, unmasked or causal: packed_self_attention, one node over the packed qkv.
// Masks become one additive float tensor: 0 where attending is allowed, -inf where it is not; a
// row with every key masked gives NaN, as in PyTorch.
#include <cmath>
#include <limits>

#include "minidl/autograd/autocast.h"
#include "minidl/autograd/ops.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/ops.h"
#include "minidl/tensor/ops_nn.h"

namespace minidl {

Tensor causal_mask(int64_t L, int64_t S, DType dtype, Device device) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> m(static_cast<size_t>(L * S), 0.0);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = i + 1; j < S; ++j) m[i * S + j] = -inf;  // key j after query i
  return from_vector(m, {L, S}).to(dtype).to(device);
}

Tensor additive_mask(const Tensor& mask, bool true_means_masked, DType dtype, Device device, const char* op) {
  if (mask.is_floating_point()) return mask.to(dtype).to(device);
  if (mask.dtype() != DType::UInt8)
    throw std::invalid_argument(std::string(op) + ": a mask must be boolean (uint8) or floating, got " + mask.desc());
  const double inf = std::numeric_limits<double>::infinity();
  const auto v = mask.cpu().contiguous().to_vector<uint8_t>();
  std::vector<double> m(v.size());
  for (size_t i = 0; i < v.size(); ++i) m[i] = ((v[i] != 0) == true_means_masked) ? -inf : 0.0;
  return from_vector(m, mask.shape()).to(dtype).to(device);
}

AttentionResult attention_with_weights(const Variable& q, const Variable& k, const Variable& v, const Tensor& mask,
                                       double scale, double dropout_p, bool training) {
  Variable scores = mul(matmul(q, transpose(k, -1, -2)), scale);  // (..., L, S)
  if (mask.defined()) scores = add(scores, Variable(mask));
  Variable weights = dropout(softmax(scores, -1), dropout_p, training);
  return {matmul(weights, v), weights};
}

// Under autocast qkv is rounded to its dtype first (autograd/autocast.h); the softmax stays float32.
// Under autocast(BFloat16) the fused kernel multiplies in bfloat16 as PyTorch's autocast does its
// matmuls (kernels/cpu/attention_bf16.cpp: P and dS rounded for the products too, float32 sums);
// where the CPU lacks AVX512_BF16, and under float16, the float32 kernel multiplies the rounded
// qkv (P and dS unrounded). (scaled_dot_product_attention's products are autograd matmuls: the
// bfloat16 GEMM under autocast.)
namespace {
// The attention node on a qkv already rounded where autocast wants it.
Variable packed_attention_node(const Variable& qkv, int64_t num_heads, double scale, bool is_causal) {
  const bool bf16 = is_autocast_enabled() && autocast_dtype() == DType::BFloat16;
  PackedAttentionResult r = packed_attention_forward(qkv.data(), num_heads, scale, is_causal, bf16);
  return Variable::make_result(
      r.out, {qkv},
      [x = qkv.data(), w = r.weights, num_heads, scale, is_causal, bf16](const Tensor& dy) -> std::vector<Tensor> {
        return {packed_attention_backward(x, w, dy, num_heads, scale, is_causal, bf16)};
      },
      "PackedAttentionBackward");
}
}  // namespace

Variable packed_self_attention(const Variable& qkv_in, int64_t num_heads, double scale, bool is_causal) {
  return packed_attention_node(autocast_operand(qkv_in), num_heads, scale, is_causal);
}

// Where autocast multiplies the projection in 16 bits, its GEMM stores qkv rounded (linear's
// round_output) and the rounding's backward (dqkv rounded) is what linear's backward does to its dy
// first, so it is left out; elsewhere (autocast(Float16) on the CPU) qkv is rounded as above.
Variable packed_self_attention(const Variable& x, const Variable& w, const Variable& b, int64_t num_heads, double scale,
                               bool is_causal) {
  const Variable qkv = linear(x, w, b, /*round_output=*/true);
  return packed_attention_node(autocast_gemm_takes_low(x) ? qkv : autocast_operand(qkv), num_heads, scale, is_causal);
}

// softmax(q k^T * scale + mask) v
Variable scaled_dot_product_attention(const Variable& q, const Variable& k, const Variable& v,
                                      const ScaledDotProductAttentionOptions& o) {
  constexpr const char* op = "scaled_dot_product_attention";
  if (q.dim() < 2 || k.dim() < 2 || v.dim() < 2 || q.size(-1 + q.dim()) != k.size(-1 + k.dim()) ||
      k.size(-2 + k.dim()) != v.size(-2 + v.dim()))
    throw std::invalid_argument(std::string(op) +
                                ": expected query (..., L, E), key (..., S, E), value (..., S, Ev), got " +
                                q.data().desc() + ", " + k.data().desc() + ", " + v.data().desc());
  if (o.is_causal && o.attn_mask.defined())
    throw std::invalid_argument(std::string(op) + ": set either attn_mask or is_causal, not both");
  if (!(o.dropout_p >= 0.0 && o.dropout_p < 1.0))
    throw std::invalid_argument(std::string(op) + ": dropout_p must be in [0, 1), got " + std::to_string(o.dropout_p));
  const int64_t L = q.size(-2 + q.dim()), S = k.size(-2 + k.dim()), E = q.size(-1 + q.dim());
  Tensor mask;
  if (o.is_causal) mask = causal_mask(L, S, q.dtype(), q.device());
  if (o.attn_mask.defined()) {
    mask = additive_mask(o.attn_mask, /*true_means_masked=*/false, q.dtype(), q.device(), op);
    if (mask.dim() < 2 || mask.size(-1 + mask.dim()) != S || mask.size(-2 + mask.dim()) != L)
      throw std::invalid_argument(std::string(op) + ": attn_mask " + o.attn_mask.desc() +
                                  " does not broadcast to the attention scores (..., " + std::to_string(L) + ", " +
                                  std::to_string(S) + ")");
  }
  const double scale = o.scale ? *o.scale : 1.0 / std::sqrt(static_cast<double>(E));
  return attention_with_weights(q, k, v, mask, scale, o.dropout_p, o.dropout_p > 0.0).output;
}

}  // namespace minidl
