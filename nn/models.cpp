// nn/models.cpp — construction of the reference models (see models.h).
#include "minidl/nn/models.h"

#include "minidl/nn/fuse.h"
#include "minidl/nn/init.h"

namespace minidl::nn {

MLP::MLP() {
  net.push_back<Flatten>();
  net.push_back<Linear>(LinearOptions{.in = 784, .out = 256});
  net.push_back<ReLU>();
  net.push_back<Linear>(LinearOptions{.in = 256, .out = 128});
  net.push_back<ReLU>();
  net.push_back<Linear>(LinearOptions{.in = 128, .out = 10});
  register_module("net", net);
}

CNN::CNN() {
  features.push_back<Conv2d>(Conv2dOptions{.in = 1, .out = 32, .kernel = 3, .padding = 1});
  features.push_back<BatchNorm2d>(BatchNormOptions{.num_features = 32});
  features.push_back<ReLU>();
  features.push_back<MaxPool2d>(Pool2dOptions{.kernel = 2});
  features.push_back<Conv2d>(Conv2dOptions{.in = 32, .out = 64, .kernel = 3, .padding = 1});
  features.push_back<BatchNorm2d>(BatchNormOptions{.num_features = 64});
  features.push_back<ReLU>();
  features.push_back<MaxPool2d>(Pool2dOptions{.kernel = 2});
  classifier.push_back<Flatten>();
  classifier.push_back<Linear>(LinearOptions{.in = 64 * 7 * 7, .out = 128});
  classifier.push_back<ReLU>();
  classifier.push_back<Linear>(LinearOptions{.in = 128, .out = 10});
  register_module("features", features);
  register_module("classifier", classifier);
  fuse_for_training(*this);  // BatchNorm2d + ReLU + MaxPool2d as one node, twice (nn/fuse.h)
}

ViT::ViT(const ViTOptions& options)
    : patch_embed({.in = 1, .out = 64, .kernel = 4, .stride = 4}),
      norm({.normalized_shape = {64}}),
      head({.in = 64, .out = 10}) {
  register_module("patch_embed", patch_embed);
  cls_token = Variable(zeros({1, 1, 64}), true);
  register_parameter("cls_token", cls_token);
  pos_embed = Variable(empty({1, 50, 64}), true);
  init::normal_(pos_embed.data(), 0.0, 0.02);
  register_parameter("pos_embed", pos_embed);
  for (int i = 0; i < 6; ++i)
    blocks.push_back<TransformerEncoderLayer>(
        TransformerEncoderLayerOptions{.d_model = 64, .nhead = 4, .dim_feedforward = 128, .dropout = options.dropout});
  register_module("blocks", blocks);
  register_module("norm", norm);
  register_module("head", head);
}

Variable ViT::forward(const Variable& x) {
  const int64_t B = x.size(0);
  Variable t = transpose(flatten(patch_embed(x), 2), 1, 2);  // (B, 49, 64)
  t = cat({expand(cls_token, {B, 1, 64}), t}, 1);  // (B, 50, 64)
  t = add(t, pos_embed);
  t = norm(blocks(t));
  return head(select(t, 1, 0));  // (B, 10)
}

std::unique_ptr<Module> make_model(const std::string& name) {
  if (name == "mlp") return std::make_unique<MLP>();
  if (name == "cnn") return std::make_unique<CNN>();
  if (name == "vit") return std::make_unique<ViT>();
  throw std::invalid_argument("make_model: unknown model '" + name + "' (choose mlp, cnn or vit)");
}

}  // namespace minidl::nn
