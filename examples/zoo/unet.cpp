// examples/zoo/unet.cpp — the small U-Net (unet.h).
#include "unet.h"

using namespace minidl;

namespace zoo {

DoubleConv::DoubleConv(int64_t in, int64_t out) {
  for (int64_t c : {in, out}) {
    push_back<nn::Conv2d>(nn::Conv2dOptions{.in = c, .out = out, .kernel = 3, .padding = 1, .bias = false});
    push_back<nn::GroupNorm>(nn::GroupNormOptions{.num_groups = 4, .num_channels = out});
    push_back<nn::ReLU>();
  }
}

UNet::UNet()
    : down1(1, 16),
      down2(16, 32),
      bottom(32, 64),
      up2({.in = 64, .out = 32, .kernel = 2, .stride = 2}),
      dec2(64, 32),
      up1({.in = 32, .out = 16, .kernel = 2, .stride = 2}),
      dec1(32, 16),
      fc({.in = 16, .out = 10}) {
  register_module("down1", down1);
  register_module("down2", down2);
  register_module("bottom", bottom);
  register_module("up2", up2);
  register_module("dec2", dec2);
  register_module("up1", up1);
  register_module("dec1", dec1);
  register_module("fc", fc);
  nn::fuse_for_training(*this);  // each GroupNorm + ReLU as one node, 10 times (nn/fuse.h)
}

Variable UNet::forward(const Variable& x) {
  const Pool2dParams pool{.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2};
  Variable s1 = down1(x);  // (N, 16, 28, 28)
  Variable s2 = down2(max_pool2d(s1, pool));  // (N, 32, 14, 14)
  Variable b = bottom(max_pool2d(s2, pool));  // (N, 64, 7, 7)
  Variable y = dec2(cat({up2(b), s2}, 1));  // (N, 32 + 32, 14, 14) -> (N, 32, 14, 14)
  y = dec1(cat({up1(y), s1}, 1));  // (N, 16 + 16, 28, 28) -> (N, 16, 28, 28)
  return fc(flatten(adaptive_avg_pool2d(y, 1, 1), 1));  // (N, 16) -> (N, 10)
}

}  // namespace zoo
