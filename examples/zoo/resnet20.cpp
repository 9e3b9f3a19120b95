// examples/zoo/resnet20.cpp — ResNet-20 (resnet20.h): the residual block and the network.
#include "resnet20.h"

using namespace minidl;

namespace zoo {

namespace {
nn::Conv2dOptions conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return {.in = in, .out = out, .kernel = kernel, .stride = stride, .padding = kernel / 2, .bias = false};
}
}  // namespace

BasicBlock::BasicBlock(int64_t in, int64_t out, int64_t stride)
    : conv1(conv(in, out, 3, stride)),
      bn1({.num_features = out}),
      conv2(conv(out, out, 3, 1)),
      bn2({.num_features = out}) {
  if (stride != 1 || in != out) {  // projection shortcut (option B)
    shortcut.push_back<nn::Conv2d>(conv(in, out, 1, stride));
    shortcut.push_back<nn::BatchNorm2d>(nn::BatchNormOptions{.num_features = out});
  }
  register_module("conv1", conv1);
  register_module("bn1", bn1);
  register_module("conv2", conv2);
  register_module("bn2", bn2);
  register_module("shortcut", shortcut);
}

Variable BasicBlock::forward(const Variable& x) {
  Variable y = conv2(bn1.forward_relu(conv1(x)));  // (N, out, H / stride, W / stride)
  return bn2.forward_add_relu(y, shortcut(x));  // relu(bn2(y) + shortcut(x)) as one node
}

ResNet20::ResNet20() : fc({.in = 64, .out = 10}) {
  stem.push_back<nn::Conv2d>(conv(3, 16, 3, 1));
  stem.push_back<nn::BatchNorm2d>(nn::BatchNormOptions{.num_features = 16});
  stem.push_back<nn::ReLU>();
  int64_t in = 16;
  const std::pair<int64_t, int64_t> stages[] = {{16, 1}, {32, 2}, {64, 2}};  // (channels, first stride)
  for (const auto& [out, stride] : stages)
    for (int i = 0; i < 3; ++i) {
      blocks.push_back<BasicBlock>(in, out, i == 0 ? stride : 1);
      in = out;
    }
  register_module("stem", stem);
  register_module("blocks", blocks);
  register_module("fc", fc);
  nn::fuse_for_training(*this);  // the stem's BatchNorm2d + ReLU as one node (nn/fuse.h)
}

Variable ResNet20::forward(const Variable& x) {
  Variable f = blocks(stem(x));  // (N, 64, 8, 8)
  return fc(flatten(adaptive_avg_pool2d(f, 1, 1), 1));  // (N, 64) -> (N, 10)
}

}  // namespace zoo
