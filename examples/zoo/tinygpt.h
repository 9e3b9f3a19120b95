// examples/zoo/tinygpt.h — a small GPT over token ids (N, 64) int64 in [0, 96) -> next-token logits
// (N, 64, 96), 110,336 parameters: the decoder-only transformer of Radford et al., "Language Models
// are Unsupervised Multitask Learners" (GPT-2, 2019) as Karpathy's nanoGPT builds it — token and
// learned position embeddings, pre-norm blocks with causal self-attention and a GELU MLP, a final
// LayerNorm and an output head tied to the token embedding (Press and Wolf, "Using the Output
// Embedding to Improve Language Models", 2017). With tie_weights = false the head is a Linear of
// its own, with a bias: the model examples/tinygpt.cpp trains (docs/tinygpt.md). Built from
// minidl's public API only.
#pragma once
#include <memory>

#include "minidl/minidl.h"

namespace zoo {

struct TinyGPTOptions {
  int64_t vocab = 96, block = 64, dim = 64, heads = 4, layers = 2;
  bool tie_weights = true;  // the head is tok.weight, no bias; false: head = Linear(dim, vocab)
};

// tok Embedding(vocab, dim)(idx) + pos[:T]                       (N, T, dim)
// layers x TransformerEncoderLayer(dim, heads, 4 dim), causal   (N, T, dim)
// ln_f LayerNorm(dim), then x tok.weight^T (tied) or head       (N, T, vocab)
class TinyGPT : public minidl::nn::Module {
 public:
  explicit TinyGPT(const TinyGPTOptions& o = {});
  std::string type_name() const override { return "TinyGPT"; }
  // idx: a Variable holding the int64 token ids (N, T), T <= block (no gradient flows to it)
  minidl::Variable forward(const minidl::Variable& idx) override;
  TinyGPTOptions options;
  minidl::nn::Embedding tok;
  minidl::Variable pos;  // (block, dim) ~ N(0, 0.02)
  minidl::nn::ModuleList blocks;
  minidl::nn::LayerNorm ln_f;
  std::unique_ptr<minidl::nn::Linear> head;  // null when tie_weights
};

}  // namespace zoo
