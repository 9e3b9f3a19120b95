// nn/models.h — the three reference models (docs/reference-models.md), used by
// the examples, the tests and the benchmarks. Input: Fashion-MNIST images (N, 1, 28, 28).
//   mlp  235,146 parameters   cnn  421,834 parameters   vit  205,962 parameters
#pragma once
#include <memory>
#include <string>

#include "minidl/nn/attention.h"
#include "minidl/nn/batchnorm.h"
#include "minidl/nn/conv.h"
#include "minidl/nn/layers.h"
#include "minidl/nn/linear.h"
#include "minidl/nn/sequential.h"

namespace minidl::nn {

// flatten -> Linear(784, 256) -> ReLU -> Linear(256, 128) -> ReLU -> Linear(128, 10)
class MLP : public Module {
 public:
  MLP();
  std::string type_name() const override { return "MLP"; }
  Variable forward(const Variable& x) override { return net(x); }
  Sequential net;
};

// features: [Conv2d(1,32,3,p1) BN ReLU MaxPool2d(2)] [Conv2d(32,64,3,p1) BN ReLU MaxPool2d(2)]
// classifier: Flatten -> Linear(3136, 128) -> ReLU -> Linear(128, 10)
// Its constructor calls nn::fuse_for_training (nn/fuse.h): each [BN ReLU MaxPool2d] runs as one
// fused node. The MLP and the ViT have nothing to fuse.
class CNN : public Module {
 public:
  CNN();
  std::string type_name() const override { return "CNN"; }
  Variable forward(const Variable& x) override { return classifier(features(x)); }
  Sequential features, classifier;
};

struct ViTOptions {
  double dropout = 0.0;  // in every encoder block: attention weights, MLP and both residual branches
};

// Patch embedding Conv2d(1, 64, 4, stride 4) -> 49 tokens; class token + position embedding;
// 6 pre-norm encoder blocks (4 heads, MLP 64-128-64, GELU); final LayerNorm; head on the class token.
class ViT : public Module {
 public:
  explicit ViT(const ViTOptions& options = {});
  std::string type_name() const override { return "ViT"; }
  Variable forward(const Variable& x) override;
  Conv2d patch_embed;
  Variable cls_token;  // (1, 1, 64) zeros
  Variable pos_embed;  // (1, 50, 64) ~ N(0, 0.02)
  Sequential blocks;
  LayerNorm norm;
  Linear head;
};

// "mlp", "cnn" or "vit"; anything else is an error listing the choices.
std::unique_ptr<Module> make_model(const std::string& name);

}  // namespace minidl::nn
