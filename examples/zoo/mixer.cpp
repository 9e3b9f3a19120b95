// examples/zoo/mixer.cpp — MLP-Mixer (mixer.h).
#include "mixer.h"

using namespace minidl;

namespace zoo {

namespace {
void mlp(nn::Sequential& s, int64_t dim, int64_t hidden) {  // Linear(dim, hidden) GELU Linear(hidden, dim)
  s.push_back<nn::Linear>(nn::LinearOptions{.in = dim, .out = hidden});
  s.push_back<nn::GELU>();
  s.push_back<nn::Linear>(nn::LinearOptions{.in = hidden, .out = dim});
}
}  // namespace

MixerBlock::MixerBlock(int64_t tokens, int64_t dim, int64_t token_hidden, int64_t channel_hidden)
    : norm1({.normalized_shape = {dim}}), norm2({.normalized_shape = {dim}}) {
  mlp(token_mlp, tokens, token_hidden);
  mlp(channel_mlp, dim, channel_hidden);
  register_module("norm1", norm1);
  register_module("token_mlp", token_mlp);
  register_module("norm2", norm2);
  register_module("channel_mlp", channel_mlp);
}

Variable MixerBlock::forward(const Variable& x) {
  Variable y = x + transpose(token_mlp(transpose(norm1(x), 1, 2)), 1, 2);  // mix across tokens: (N, C, S) inside
  return y + channel_mlp(norm2(y));  // mix across channels: (N, S, C)
}

Mixer::Mixer()
    : stem({.in = 1, .out = 128, .kernel = 4, .stride = 4}),
      norm({.normalized_shape = {128}}),
      head({.in = 128, .out = 10}) {
  for (int i = 0; i < 4; ++i) blocks.push_back<MixerBlock>(49, 128, 64, 256);
  register_module("stem", stem);
  register_module("blocks", blocks);
  register_module("norm", norm);
  register_module("head", head);
}

Variable Mixer::forward(const Variable& x) {
  Variable t = transpose(flatten(stem(x), 2), 1, 2);  // (N, 128, 7, 7) -> (N, 128, 49) -> (N, 49, 128)
  return head(mean(norm(blocks(t)), {1}));  // (N, 49, 128) -> (N, 128) -> (N, 10)
}

}  // namespace zoo
