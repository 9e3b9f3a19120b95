// nn/attention.h — MultiheadAttention (self-attention, batch-first, fused in-projection) and the
// pre-norm TransformerEncoderLayer, with PyTorch's parameter names and initialisation:
//   in_proj_weight (3E, E) xavier_uniform, in_proj_bias (3E) zeros, out_proj Linear(E, E) with bias 0.
#pragma once
#include "nn/layers.h"
#include "nn/linear.h"

namespace minidl::nn {

struct MultiheadAttentionOptions {
  int64_t embed_dim = 0;
  int64_t num_heads = 1;
  double dropout = 0.0;  // on the attention weights
  bool bias = true;
};

class MultiheadAttention : public Module {
 public:
  explicit MultiheadAttention(const MultiheadAttentionOptions& o);
  std::string type_name() const override { return "MultiheadAttention"; }
  // x (B, T, E) -> (B, T, E): softmax(Q K^T / sqrt(d)) V per head, then out_proj
  Variable forward(const Variable& x) override;

  MultiheadAttentionOptions options;
  Variable in_proj_weight;  // (3E, E)
  Variable in_proj_bias;    // (3E)
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

  TransformerEncoderLayerOptions options;
  MultiheadAttention self_attn;
  Linear linear1;
  Dropout dropout;
  Linear linear2;
  LayerNorm norm1, norm2;
  Dropout dropout1, dropout2;
};

}  // namespace minidl::nn
