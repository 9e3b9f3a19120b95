// nn/attention.cpp — multi-head self-attention and the pre-norm encoder block (see attention.h).
#include "nn/attention.h"

#include <cmath>

#include "nn/init.h"

namespace minidl::nn {

MultiheadAttention::MultiheadAttention(const MultiheadAttentionOptions& o)
    : options(o), out_proj({.in = o.embed_dim, .out = o.embed_dim, .bias = o.bias}) {
  if (o.embed_dim <= 0 || o.num_heads <= 0 || o.embed_dim % o.num_heads != 0)
    throw std::invalid_argument("MultiheadAttention: embed_dim (" + std::to_string(o.embed_dim) +
                                ") must be divisible by num_heads (" + std::to_string(o.num_heads) + ")");
  in_proj_weight = Variable(empty({3 * o.embed_dim, o.embed_dim}), true);
  init::xavier_uniform_(in_proj_weight.data());
  register_parameter("in_proj_weight", in_proj_weight);
  if (o.bias) {
    in_proj_bias = Variable(zeros({3 * o.embed_dim}), true);
    register_parameter("in_proj_bias", in_proj_bias);
    out_proj.bias.data().fill_(0.0);
  }
  register_module("out_proj", out_proj);
}

Variable MultiheadAttention::forward(const Variable& x) {
  if (x.dim() != 3 || x.size(2) != options.embed_dim)
    throw std::invalid_argument("MultiheadAttention: expected input (B, T, " + std::to_string(options.embed_dim) +
                                "), got " + x.data().desc());
  const int64_t B = x.size(0), T = x.size(1), E = options.embed_dim, H = options.num_heads, D = E / H;
  Variable qkv = linear(x, in_proj_weight, in_proj_bias);                        // (B, T, 3E)
  auto heads = [&](int64_t i) {                                                  // (B, H, T, D)
    return permute(reshape(slice(qkv, 2, i * E, (i + 1) * E), {B, T, H, D}), {0, 2, 1, 3});
  };
  Variable q = heads(0), k = heads(1), v = heads(2);
  Variable scores = mul(matmul(q, transpose(k, -1, -2)), 1.0 / std::sqrt(static_cast<double>(D)));  // (B, H, T, T)
  Variable attn = dropout(softmax(scores, -1), options.dropout, training_);
  Variable ctx = permute(matmul(attn, v), {0, 2, 1, 3});                        // (B, T, H, D)
  return out_proj(reshape(ctx, {B, T, E}));
}

TransformerEncoderLayer::TransformerEncoderLayer(const TransformerEncoderLayerOptions& o)
    : options(o),
      self_attn({.embed_dim = o.d_model, .num_heads = o.nhead, .dropout = o.dropout}),
      linear1({.in = o.d_model, .out = o.dim_feedforward}),
      dropout({.p = o.dropout}),
      linear2({.in = o.dim_feedforward, .out = o.d_model}),
      norm1({.normalized_shape = {o.d_model}, .eps = o.layer_norm_eps}),
      norm2({.normalized_shape = {o.d_model}, .eps = o.layer_norm_eps}),
      dropout1({.p = o.dropout}),
      dropout2({.p = o.dropout}) {
  register_module("self_attn", self_attn);
  register_module("linear1", linear1);
  register_module("dropout", dropout);
  register_module("linear2", linear2);
  register_module("norm1", norm1);
  register_module("norm2", norm2);
  register_module("dropout1", dropout1);
  register_module("dropout2", dropout2);
}

Variable TransformerEncoderLayer::forward(const Variable& x) {
  Variable h = add(x, dropout1(self_attn(norm1(x))));
  Variable f = linear1(norm2(h));
  f = options.gelu_activation ? gelu(f) : relu(f);
  return add(h, dropout2(linear2(dropout(f))));
}

}  // namespace minidl::nn
