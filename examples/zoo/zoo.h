// examples/zoo/zoo.h — the model zoo: five models beyond the three reference models of
// nn/models.h, each built from minidl's public API only (one model per file here) and each with a
// PyTorch twin of the same architecture and parameter count in tools/compare_pytorch.py, so that
// `bench --model NAME` and `compare_pytorch.py --models NAME` keep minidl honest about speed on
// residual, depthwise, encoder-decoder, all-MLP and language models (docs/reference-models.md).
//
//   name       parameters  input (one sample)                 output
//   resnet20      272,474  CIFAR-sized image (3, 32, 32)      10 class logits
//   mobilenet     274,250  CIFAR-sized image (3, 32, 32)      10 class logits
//   unet          117,226  Fashion-MNIST image (1, 28, 28)    10 class logits
//   mixer         294,990  Fashion-MNIST image (1, 28, 28)    10 class logits
//   tinygpt       110,336  64 token ids in [0, 96) (int64)    (64, 96) next-token logits
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "minidl/minidl.h"

namespace zoo {

struct Batch {
  minidl::Tensor x;  // images (N, C, H, W) U[0, 1), or token ids (N, T)
  minidl::Tensor y;  // classes (N), or the next tokens (N, T)
};

struct ZooModel {
  std::string name;
  minidl::Shape sample;  // one input: (C, H, W), or (T) token ids
  int64_t vocab = 0;  // token models: ids in [0, vocab); 0 for image models (10 classes)
  // Forward multiply-adds per sample: every convolution, transposed convolution, linear layer and
  // attention matmul (the full T x T, causal or not), as torch.utils.flop_counter counts the twin.
  double macs = 0;
  std::function<std::unique_ptr<minidl::nn::Module>()> make;

  // A random batch of `n` samples from `key`: images and classes, or a window of T + 1 random
  // tokens split into the input (its first T) and the targets (its last T).
  Batch random_batch(int64_t n, minidl::RandomKey key) const;
};

const std::vector<ZooModel>& models();
// The model called `name`, or nullptr when the zoo has none by that name.
const ZooModel* find(const std::string& name);
// "resnet20, mobilenet, unet, mixer, tinygpt"
std::string names();

// Cross-entropy of class logits (N, K) against (N), or of token logits (N, T, V) against (N, T).
minidl::Variable loss(const minidl::Variable& logits, const minidl::Tensor& target);

}  // namespace zoo
