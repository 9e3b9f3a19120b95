// examples/zoo/mobilenet.h — a small MobileNet for CIFAR-sized images (N, 3, 32, 32) -> (N, 10),
// 274,250 parameters: the depthwise-separable blocks of Howard et al., "MobileNets: Efficient
// Convolutional Neural Networks for Mobile Vision Applications" (2017), Table 1 — a 3x3 depthwise
// convolution (groups = channels) then a 1x1 pointwise one, each followed by BatchNorm and ReLU —
// with the first six blocks of that table (64, 128 s2, 128, 256 s2, 256, 512 s2) and a stride-1
// stem for 32x32 inputs, as CIFAR ports of the network do. ReLU where the paper's v2 has ReLU6:
// minidl has no ReLU6 (nor a clamp op). Built from minidl's public API only; the constructor calls
// nn::fuse_for_training, so each BatchNorm2d + ReLU runs as one node (the same values).
#pragma once
#include "minidl/minidl.h"

namespace zoo {

// features: conv3x3(3, 32) BN ReLU                                      (N, 32, 32, 32)
//   then per block (out, stride): dw3x3(in, stride, groups in) BN ReLU, pw1x1(in, out) BN ReLU
//   (64, 1) (128, 2) (128, 1) (256, 2) (256, 1) (512, 2)               ... (N, 512, 4, 4)
// global average pool (N, 512) -> fc Linear(512, 10)                    (N, 10)
class MobileNet : public minidl::nn::Module {
 public:
  MobileNet();
  std::string type_name() const override { return "MobileNet"; }
  minidl::Variable forward(const minidl::Variable& x) override;
  minidl::nn::Sequential features;  // conv, BN, ReLU triples: Sequential fuses each BN + ReLU
  minidl::nn::Linear fc;
};

}  // namespace zoo
