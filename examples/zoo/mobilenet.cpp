// examples/zoo/mobilenet.cpp — the small MobileNet (mobilenet.h).
#include "mobilenet.h"

using namespace minidl;

namespace zoo {

namespace {
// Conv2d(in, out, kernel, stride, padding kernel / 2, groups, no bias) -> BatchNorm2d -> ReLU
void conv_bn_relu(nn::Sequential& s, int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t groups) {
  s.push_back<nn::Conv2d>(nn::Conv2dOptions{.in = in,
                                            .out = out,
                                            .kernel = kernel,
                                            .stride = stride,
                                            .padding = kernel / 2,
                                            .groups = groups,
                                            .bias = false});
  s.push_back<nn::BatchNorm2d>(nn::BatchNormOptions{.num_features = out});
  s.push_back<nn::ReLU>();
}
}  // namespace

MobileNet::MobileNet() : fc({.in = 512, .out = 10}) {
  conv_bn_relu(features, 3, 32, 3, 1, 1);
  int64_t in = 32;
  const std::pair<int64_t, int64_t> blocks[] = {{64, 1}, {128, 2}, {128, 1}, {256, 2}, {256, 1}, {512, 2}};
  for (const auto& [out, stride] : blocks) {  // (channels out, depthwise stride)
    conv_bn_relu(features, in, in, 3, stride, in);  // depthwise
    conv_bn_relu(features, in, out, 1, 1, 1);  // pointwise
    in = out;
  }
  register_module("features", features);
  register_module("fc", fc);
  nn::fuse_for_training(*this);  // each BatchNorm2d + ReLU as one node, 13 times (nn/fuse.h)
}

Variable MobileNet::forward(const Variable& x) {
  Variable f = features(x);  // (N, 512, 4, 4)
  return fc(flatten(adaptive_avg_pool2d(f, 1, 1), 1));  // (N, 512) -> (N, 10)
}

}  // namespace zoo
