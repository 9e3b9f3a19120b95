// nn/attention.h — MultiheadAttention (self- or cross-attention, fused in-projection, masks,
// optional attention weights, batch-first or sequence-first) and the pre-norm
// TransformerEncoderLayer, with PyTorch's parameter names and initialisation:
//   in_proj_weight (3E, E) xavier_uniform, in_proj_bias (3E) zeros, out_proj Linear(E, E) with bias 0.
#pragma once
#include "minidl/nn/layers.h"
#include "minidl/nn/linear.h"

namespace minidl::nn {

struct MultiheadAttentionOptions {
  int64_t embed_dim = 0;
  int64_t num_heads = 1;
  double dropout = 0.0;  // on the attention weights
  bool bias = true;
  // (B, T, E) inputs when true; (T, B, E) when false, PyTorch's default. minidl defaults to true.
  bool batch_first = true;
};

// The per-call arguments of MultiheadAttention::forward(query, key, value, ...), as PyTorch's.
struct MultiheadAttentionArgs {
  Tensor key_padding_mask = {};  // (B, S): boolean (uint8) 1 = ignore this key, or floating (added)
  Tensor attn_mask = {};  // (L, S) or (B * H, L, S): boolean 1 = may not attend, or floating (added)
  bool need_weights = true;  // also return the attention weights
  bool average_attn_weights = true;  // weights (B, L, S) averaged over heads, else (B, H, L, S)
  bool is_causal = false;  // query i attends to keys j <= i only (instead of an attn_mask)
};
struct MultiheadAttentionOutput {
  Variable output;  // like query: (B, L, E) or (L, B, E)
  Variable weights;  // undefined unless need_weights; after dropout, as PyTorch returns them
};

class MultiheadAttention : public Module {
 public:
  explicit MultiheadAttention(const MultiheadAttentionOptions& o);
  std::string type_name() const override { return "MultiheadAttention"; }
  // Self-attention without masks: x -> softmax(Q K^T / sqrt(d)) V per head, then out_proj.
  Variable forward(const Variable& x) override;
  // query (B, L, E), key and value (B, S, E) (sequence-first when !batch_first).
  MultiheadAttentionOutput forward(const Variable& query, const Variable& key, const Variable& value,
                                   const MultiheadAttentionArgs& args = {});
  // As PyTorch's self_attn(query, key, value, ...): the forward pre-hooks (given the query), then forward.
  using Module::operator();
  MultiheadAttentionOutput operator()(const Variable& query, const Variable& key, const Variable& value,
                                      const MultiheadAttentionArgs& args = {}) {
    run_forward_pre_hooks(query);
    return forward(query, key, value, args);
  }

  MultiheadAttentionOptions options;
  Variable in_proj_weight;  // (3E, E)
  Variable in_proj_bias;  // (3E)
  Linear out_proj;
};

struct TransformerEncoderLayerOptions {
  int64_t d_model = 0;
  int64_t nhead = 1;
  int64_t dim_feedforward = 2048;
  double dropout = 0.0;
  bool gelu_activation = true;  // GELU (erf) or ReLU
  double layer_norm_eps = 1e-5;
};

// Pre-norm block: x = x + SA(LN1(x)); x = x + MLP(LN2(x)), as torch's norm_first=True layer.
class TransformerEncoderLayer : public Module {
 public:
  explicit TransformerEncoderLayer(const TransformerEncoderLayerOptions& o);
  std::string type_name() const override { return "TransformerEncoderLayer"; }
  Variable forward(const Variable& x) override;
  // With masks (e.g. is_causal for a decoder-only language model); batch-first.
  Variable forward(const Variable& x, const MultiheadAttentionArgs& args);

  TransformerEncoderLayerOptions options;
  MultiheadAttention self_attn;
  Linear linear1;
  Dropout dropout;
  Linear linear2;
  LayerNorm norm1, norm2;
  Dropout dropout1, dropout2;

 private:
  Variable forward_from_attention(const Variable& x, const Variable& attended);  // the residuals and the MLP
};

}  // namespace minidl::nn
