// examples/zoo/unet.h — a small U-Net classifying Fashion-MNIST images (N, 1, 28, 28) -> (N, 10),
// 117,226 parameters: the encoder-decoder of Ronneberger, Fischer and Brox, "U-Net: Convolutional
// Networks for Biomedical Image Segmentation" (2015) — two 3x3 convolutions per level, 2x2 max
// pooling down, 2x2 stride-2 transposed convolutions up, skip connections concatenated on the
// channels — scaled down to 2 levels of 16 and 32 channels and a 64-channel bottom, with
// GroupNorm(4 groups) after each convolution (Wu and He, "Group Normalization", 2018) and "same"
// padding so the skips need no cropping. A per-image head (global average pooling + Linear) makes
// it train with cross-entropy like the other models. Built from minidl's public API only.
#pragma once
#include "minidl/minidl.h"

namespace zoo {

// conv3x3(in, out) GroupNorm(4, out) ReLU conv3x3(out, out) GroupNorm(4, out) ReLU, no biases
// (each GroupNorm + ReLU runs as one node: UNet's constructor calls nn::fuse_for_training)
class DoubleConv : public minidl::nn::Sequential {
 public:
  DoubleConv(int64_t in, int64_t out);
  std::string type_name() const override { return "DoubleConv"; }
};

// down1 DoubleConv(1, 16)                                 s1 (N, 16, 28, 28)
// max pool 2, down2 DoubleConv(16, 32)                    s2 (N, 32, 14, 14)
// max pool 2, bottom DoubleConv(32, 64)                      (N, 64, 7, 7)
// up2 ConvTranspose2d(64, 32, 2, s2), cat s2, dec2 DoubleConv(64, 32)   (N, 32, 14, 14)
// up1 ConvTranspose2d(32, 16, 2, s2), cat s1, dec1 DoubleConv(32, 16)   (N, 16, 28, 28)
// global average pool (N, 16) -> fc Linear(16, 10)                      (N, 10)
class UNet : public minidl::nn::Module {
 public:
  UNet();
  std::string type_name() const override { return "UNet"; }
  minidl::Variable forward(const minidl::Variable& x) override;
  DoubleConv down1, down2, bottom;
  minidl::nn::ConvTranspose2d up2;
  DoubleConv dec2;
  minidl::nn::ConvTranspose2d up1;
  DoubleConv dec1;
  minidl::nn::Linear fc;
};

}  // namespace zoo
