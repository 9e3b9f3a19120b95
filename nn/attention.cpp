// nn/attention.cpp — multi-head self-attention and the pre-norm encoder block (see attention.h).
#include "minidl/nn/attention.h"

#include <cmath>

#include "minidl/nn/init.h"

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

Variable MultiheadAttention::forward(const Variable& x) { return forward(x, x, x, {.need_weights = false}).output; }

MultiheadAttentionOutput MultiheadAttention::forward(const Variable& query_in, const Variable& key_in,
                                                     const Variable& value_in, const MultiheadAttentionArgs& args) {
  const int64_t E = options.embed_dim, H = options.num_heads, D = E / H;
  const char* layout = options.batch_first ? "(B, T, " : "(T, B, ";
  for (const Variable* t : {&query_in, &key_in, &value_in})
    if (t->dim() != 3 || t->size(2) != E)
      throw std::invalid_argument("MultiheadAttention: expected query, key and value " + std::string(layout) +
                                  std::to_string(E) + "), got " + t->data().desc());
  // batch-first from here on: query (B, L, E), key / value (B, S, E)
  auto bf = [&](const Variable& t) { return options.batch_first ? t : transpose(t, 0, 1); };
  const Variable query = bf(query_in), key = bf(key_in), value = bf(value_in);
  const int64_t B = query.size(0), L = query.size(1), S = key.size(1);
  if (key.size(0) != B || value.size(0) != B || value.size(1) != S)
    throw std::invalid_argument(
        "MultiheadAttention: key and value must have the same batch and length, and the "
        "batch of query; got query " +
        query_in.data().desc() + ", key " + key_in.data().desc() + ", value " + value_in.data().desc());
  auto heads = [&](const Variable& t, int64_t i, int64_t len) {  // projection i -> (B, H, len, D)
    Variable b = in_proj_bias.defined() ? slice(in_proj_bias, 0, i * E, (i + 1) * E) : Variable();
    Variable p = linear(t, slice(in_proj_weight, 0, i * E, (i + 1) * E), b);
    return permute(reshape(p, {B, len, H, D}), {0, 2, 1, 3});
  };
  const bool self_attention = query.is_same(key) && key.is_same(value);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const bool no_mask_tensor = !args.attn_mask.defined() && !args.key_padding_mask.defined();  // is_causal allowed
  if (self_attention && no_mask_tensor && !args.need_weights && !(training_ && options.dropout > 0.0) &&
      query.device().is_cpu()) {
    // CPU fast path: the heads are read in place from the packed projection (kernels/cpu/attention.h);
    // causal heads skip the masked half of the scores
    Variable ctx = packed_self_attention(query, in_proj_weight, in_proj_bias, H, scale, args.is_causal);  // (B, L, E)
    Variable out = out_proj(ctx);
    return {options.batch_first ? out : transpose(out, 0, 1), Variable()};
  }
  Variable q, k, v;
  if (self_attention) {  // one fused projection
    Variable qkv = linear(query, in_proj_weight, in_proj_bias);  // (B, L, 3E)
    auto split = [&](int64_t i) {
      return permute(reshape(slice(qkv, 2, i * E, (i + 1) * E), {B, L, H, D}), {0, 2, 1, 3});
    };
    q = split(0), k = split(1), v = split(2);
  } else {
    q = heads(query, 0, L), k = heads(key, 1, S), v = heads(value, 2, S);
  }

  // one additive mask broadcasting to the scores (B, H, L, S)
  Tensor mask;
  const DType dt = query.dtype();
  const Device dev = query.device();
  if (args.is_causal && args.attn_mask.defined())
    throw std::invalid_argument("MultiheadAttention: set either attn_mask or is_causal, not both");
  if (args.is_causal) mask = causal_mask(L, S, dt, dev);
  if (args.attn_mask.defined()) {
    const Tensor& m = args.attn_mask;
    const bool ok2 = m.dim() == 2 && m.size(0) == L && m.size(1) == S;
    const bool ok3 = m.dim() == 3 && m.size(0) == B * H && m.size(1) == L && m.size(2) == S;
    if (!ok2 && !ok3)
      throw std::invalid_argument("MultiheadAttention: attn_mask must be (L, S) = (" + std::to_string(L) + ", " +
                                  std::to_string(S) + ") or (B * H, L, S) = (" + std::to_string(B * H) + ", " +
                                  std::to_string(L) + ", " + std::to_string(S) + "), got " + m.desc());
    mask = additive_mask(m, /*true_means_masked=*/true, dt, dev, "MultiheadAttention attn_mask");
    if (ok3) mask = mask.reshape({B, H, L, S});
  }
  if (args.key_padding_mask.defined()) {
    const Tensor& m = args.key_padding_mask;
    if (m.dim() != 2 || m.size(0) != B || m.size(1) != S)
      throw std::invalid_argument("MultiheadAttention: key_padding_mask must be (B, S) = (" + std::to_string(B) + ", " +
                                  std::to_string(S) + "), got " + m.desc());
    Tensor kp = additive_mask(m, /*true_means_masked=*/true, dt, dev, "MultiheadAttention key_padding_mask")
                    .reshape({B, 1, 1, S});
    mask = mask.defined() ? add(mask, kp) : kp;
  }

  AttentionResult a = attention_with_weights(q, k, v, mask, scale, options.dropout, training_ && options.dropout > 0.0);
  Variable ctx = reshape(permute(a.output, {0, 2, 1, 3}), {B, L, E});  // (B, L, E)
  Variable out = out_proj(ctx);
  MultiheadAttentionOutput result{options.batch_first ? out : transpose(out, 0, 1), Variable()};
  if (args.need_weights) result.weights = args.average_attn_weights ? mean(a.weights, {1}) : a.weights;
  return result;
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
  Variable n = norm1(x);
  return forward_from_attention(x, self_attn(n, n, n, {.need_weights = false}).output);
}

Variable TransformerEncoderLayer::forward(const Variable& x, const MultiheadAttentionArgs& args) {
  Variable n = norm1(x);
  MultiheadAttentionArgs a = args;
  a.need_weights = false;
  return forward_from_attention(x, self_attn(n, n, n, a).output);
}

Variable TransformerEncoderLayer::forward_from_attention(const Variable& x, const Variable& attended) {
  Variable h = add(x, dropout1(attended));
  Variable f = linear1(norm2(h));
  f = options.gelu_activation ? gelu(f) : relu(f);
  return add(h, dropout2(linear2(dropout(f))));
}

}  // namespace minidl::nn
