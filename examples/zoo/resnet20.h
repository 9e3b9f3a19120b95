// examples/zoo/resnet20.h — ResNet-20 for CIFAR-sized images (N, 3, 32, 32) -> (N, 10), 272,474
// parameters: the CIFAR network of He, Zhang, Ren and Sun, "Deep Residual Learning for Image
// Recognition" (2016), section 4.2 (6n + 2 layers, n = 3), with projection shortcuts (their
// option B: 1x1 convolution + BatchNorm where the shape changes) and the block layout of
// torchvision's BasicBlock. Built from minidl's public API only, as a user outside the repo would.
#pragma once
#include "minidl/minidl.h"

namespace zoo {

// conv3x3(in, out, stride) BN ReLU conv3x3(out, out) BN, plus the shortcut (identity, or
// conv1x1(in, out, stride) BN when stride != 1 or in != out), then ReLU.
// (N, in, H, W) -> (N, out, H / stride, W / stride)
class BasicBlock : public minidl::nn::Module {
 public:
  BasicBlock(int64_t in, int64_t out, int64_t stride);
  std::string type_name() const override { return "BasicBlock"; }
  minidl::Variable forward(const minidl::Variable& x) override;
  minidl::nn::Conv2d conv1;
  minidl::nn::BatchNorm2d bn1;
  minidl::nn::Conv2d conv2;
  minidl::nn::BatchNorm2d bn2;
  minidl::nn::Sequential shortcut;  // empty: identity
};

// stem: conv3x3(3, 16) BN ReLU (BN + ReLU one node: nn::fuse_for_training)   (N, 16, 32, 32)
// blocks: 3 x BasicBlock(16), 3 x BasicBlock(32) from stride 2, 3 x BasicBlock(64) from stride 2
//                                                         (N, 16, 32, 32) (N, 32, 16, 16) (N, 64, 8, 8)
// global average pool (N, 64) -> fc Linear(64, 10)        (N, 10)
class ResNet20 : public minidl::nn::Module {
 public:
  ResNet20();
  std::string type_name() const override { return "ResNet20"; }
  minidl::Variable forward(const minidl::Variable& x) override;
  minidl::nn::Sequential stem, blocks;
  minidl::nn::Linear fc;
};

}  // namespace zoo
