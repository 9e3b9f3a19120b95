// examples/zoo/tinygpt.cpp — the small GPT (tinygpt.h).
#include "tinygpt.h"

#include <stdexcept>

using namespace minidl;

namespace zoo {

TinyGPT::TinyGPT(const TinyGPTOptions& o)
    : options(o), tok({.num_embeddings = o.vocab, .embedding_dim = o.dim}), ln_f({.normalized_shape = {o.dim}}) {
  // the untied head draws its weights first, before pos: the order of docs/tinygpt.md's run
  if (!o.tie_weights) head = std::make_unique<nn::Linear>(nn::LinearOptions{.in = o.dim, .out = o.vocab});
  pos = Variable(mul(randn({o.block, o.dim}), 0.02), true);
  for (int64_t i = 0; i < o.layers; ++i)
    blocks.push_back<nn::TransformerEncoderLayer>(
        nn::TransformerEncoderLayerOptions{.d_model = o.dim, .nhead = o.heads, .dim_feedforward = 4 * o.dim});
  register_module("tok", tok);
  register_parameter("pos", pos);
  register_module("blocks", blocks);
  register_module("ln_f", ln_f);
  if (head) register_module("head", *head);
}

Variable TinyGPT::forward(const Variable& idx) {
  if (idx.dim() != 2 || idx.data().dtype() != DType::Int64 || idx.size(1) > options.block)
    throw std::invalid_argument("TinyGPT: expected int64 token ids (N, T) with T <= " + std::to_string(options.block) +
                                ", got " + idx.data().desc());
  Variable x = tok.forward(idx.data()) + slice(pos, 0, 0, idx.size(1));  // (N, T, dim)
  for (nn::Module& b : blocks) x = static_cast<nn::TransformerEncoderLayer&>(b).forward(x, {.is_causal = true});
  x = ln_f(x);
  return head ? (*head)(x) : linear(x, tok.weight, Variable());  // (N, T, vocab)
}

}  // namespace zoo
