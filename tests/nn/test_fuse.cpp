// tests/nn/test_fuse.cpp — nn::fuse_for_training: the explicit step that makes BatchNorm + ReLU
// (+ MaxPool2d) runs of a Sequential one fused node; the same values as the unfused children,
// names and state_dict unchanged, and a replaced child unfuses its run.
#include "minidl/nn/nn_all.h"
#include "tests/common/testing.h"

using namespace minidl;
using minidl::testing::expect_equal;

namespace {

// [Conv2d BN ReLU MaxPool2d] [BN ReLU] Flatten: two runs to fuse
void build(nn::Sequential& net) {
  net.push_back<nn::Conv2d>(nn::Conv2dOptions{.in = 1, .out = 4, .kernel = 3, .padding = 1});
  net.push_back<nn::BatchNorm2d>(nn::BatchNormOptions{.num_features = 4});
  net.push_back<nn::ReLU>();
  net.push_back<nn::MaxPool2d>(nn::Pool2dOptions{.kernel = 2});
  net.push_back<nn::BatchNorm2d>(nn::BatchNormOptions{.num_features = 4});
  net.push_back<nn::ReLU>();
  net.push_back<nn::Flatten>();
}

std::vector<Tensor> run(nn::Sequential& net, const Tensor& x0, std::string* last_node) {
  Variable x(x0.clone(), true);
  Variable y = net.forward(x);
  *last_node = y.grad_fn()->name;
  sum(mul(y, y)).backward();
  std::vector<Tensor> out{y.data(), x.grad()};
  for (auto& [name, p] : net.named_parameters()) out.push_back(p.grad().clone());
  return out;
}

}  // namespace

TEST(FuseForTraining, FusesEachBatchNormReluRunAndKeepsTheValues) {
  manual_seed(3);
  nn::Sequential plain, fused;
  build(plain);
  manual_seed(3);
  build(fused);
  EXPECT_EQ(nn::fuse_for_training(fused), 2);
  ASSERT_EQ(fused.fused_runs().size(), 2u);
  EXPECT_EQ(fused.fused_runs()[0].name, "BatchNorm2d+ReLU+MaxPool2d");
  EXPECT_EQ(fused.fused_runs()[0].first, 1u);
  EXPECT_EQ(fused.fused_runs()[1].name, "BatchNorm2d+ReLU");
  EXPECT_EQ(fused.fused_runs()[1].first, 4u);
  EXPECT_TRUE(plain.fused_runs().empty());  // nothing is fused without the call

  const Tensor x = randn({3, 1, 6, 6});
  std::string plain_node, fused_node;
  const auto a = run(plain, x, &plain_node), b = run(fused, x, &fused_node);
  ASSERT_EQ(a.size(), b.size());
  // forward values and running statistics are the same bits; gradients agree to rounding
  expect_equal(a[0], b[0], "output");
  for (size_t i = 1; i < a.size(); ++i)
    minidl::testing::expect_close(a[i], b[i], 1e-5, 1e-6, "gradient " + std::to_string(i));
  for (const char* key : {"1.running_mean", "1.running_var", "4.running_mean", "4.running_var"})
    expect_equal(plain.state_dict().at(key), fused.state_dict().at(key), key);
  EXPECT_EQ(plain.state_dict().size(), fused.state_dict().size());  // the same names
  EXPECT_EQ(nn::fuse_for_training(fused), 0);  // already fused: nothing more
}

TEST(FuseForTraining, TheFusedRunIsOneNodeInTheGraph) {
  nn::Sequential net;
  net.push_back<nn::BatchNorm2d>(nn::BatchNormOptions{.num_features = 2});
  net.push_back<nn::ReLU>();
  net.push_back<nn::MaxPool2d>(nn::Pool2dOptions{.kernel = 2});
  const Variable x(randn({2, 2, 4, 4}), true);
  EXPECT_EQ(net.forward(x).grad_fn()->name, "MaxPool2dBackward");
  nn::fuse_for_training(net);
  EXPECT_EQ(net.forward(x).grad_fn()->name, "BatchNormReluMaxPool2dBackward");
}

TEST(FuseForTraining, ReplacingAFusedChildUnfusesItsRun) {
  nn::Sequential net;
  build(net);
  nn::fuse_for_training(net);
  net.replace_module("4", std::make_unique<nn::BatchNorm2d>(nn::BatchNormOptions{.num_features = 4}));
  ASSERT_EQ(net.fused_runs().size(), 1u);  // the second run is gone, the first stays
  EXPECT_EQ(net.fused_runs()[0].first, 1u);
  const Variable y = net.forward(Variable(randn({2, 1, 6, 6})));
  EXPECT_EQ(y.shape(), (Shape{2, 36}));
}

TEST(FuseForTraining, SubclassesAndOtherOrdersAreNotFused) {
  nn::Sequential net;
  net.push_back<nn::ReLU>();  // ReLU before BatchNorm: nothing to fuse
  net.push_back<nn::BatchNorm2d>(nn::BatchNormOptions{.num_features = 2});
  net.push_back<nn::Dropout>();
  net.push_back<nn::ReLU>();
  EXPECT_EQ(nn::fuse_for_training(net), 0);
}

TEST(FuseForTraining, TheReferenceCnnFusesBothBlocks) {
  auto model = nn::make_model("cnn");
  auto& cnn = static_cast<nn::CNN&>(*model);
  ASSERT_EQ(cnn.features.fused_runs().size(), 2u);
  EXPECT_EQ(cnn.features.fused_runs()[0].name, "BatchNorm2d+ReLU+MaxPool2d");
  EXPECT_TRUE(cnn.classifier.fused_runs().empty());
}

TEST(FuseForTraining, AddFusedRunRefusesOverlapsAndBadRanges) {
  nn::Sequential net;
  build(net);
  const auto id = [](const Variable& x) { return x; };
  EXPECT_THROW(net.add_fused_run({.first = 6, .length = 2, .name = "past the end", .forward = id}),
               std::invalid_argument);
  net.add_fused_run({.first = 1, .length = 2, .name = "a", .forward = id});
  EXPECT_THROW(net.add_fused_run({.first = 2, .length = 2, .name = "b", .forward = id}), std::invalid_argument);
}
