// examples/zoo/mixer.h — MLP-Mixer for Fashion-MNIST images (N, 1, 28, 28) -> (N, 10), 294,990
// parameters: Tolstikhin et al., "MLP-Mixer: An all-MLP Architecture for Vision" (2021) — per-patch
// linear embedding (a 4x4 stride-4 convolution: 49 tokens), then blocks of a token-mixing MLP
// (across the 49 patches, per channel) and a channel-mixing MLP (per patch), each pre-LayerNorm with
// GELU and a residual, a final LayerNorm, global average pooling over tokens and a linear head.
// Width 128, 4 blocks, token MLP 49-64-49, channel MLP 128-256-128 (the paper's D_S = C / 2,
// D_C = 4 C ratios, here D_S = 64 >= C / 2). Built from minidl's public API only.
#pragma once
#include "minidl/minidl.h"

namespace zoo {

// x (N, S, C): x + token_mlp(LN(x)^T)^T, then + channel_mlp(LN(x)); MLPs Linear GELU Linear
class MixerBlock : public minidl::nn::Module {
 public:
  MixerBlock(int64_t tokens, int64_t dim, int64_t token_hidden, int64_t channel_hidden);
  std::string type_name() const override { return "MixerBlock"; }
  minidl::Variable forward(const minidl::Variable& x) override;
  minidl::nn::LayerNorm norm1;
  minidl::nn::Sequential token_mlp;  // over S: (N, C, S) -> (N, C, token_hidden) -> (N, C, S)
  minidl::nn::LayerNorm norm2;
  minidl::nn::Sequential channel_mlp;  // over C: (N, S, C) -> (N, S, channel_hidden) -> (N, S, C)
};

// stem Conv2d(1, 128, 4, stride 4) (N, 128, 7, 7) -> tokens (N, 49, 128)
// 4 x MixerBlock(49, 128, 64, 256)                       (N, 49, 128)
// norm LayerNorm(128), mean over tokens (N, 128) -> head Linear(128, 10)   (N, 10)
class Mixer : public minidl::nn::Module {
 public:
  Mixer();
  std::string type_name() const override { return "Mixer"; }
  minidl::Variable forward(const minidl::Variable& x) override;
  minidl::nn::Conv2d stem;
  minidl::nn::Sequential blocks;
  minidl::nn::LayerNorm norm;
  minidl::nn::Linear head;
};

}  // namespace zoo
