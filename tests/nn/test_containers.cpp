// tests/nn/test_containers.cpp — ModuleList, ModuleDict, the default type_name(), freezing
// parameters and gradient accumulation (two half-batch backward calls equal one full batch).
#include "minidl/nn/nn_all.h"
#include "minidl/optim/optim_all.h"
#include "tests/common/testing.h"

using namespace minidl;
using minidl::testing::expect_close;

namespace {

struct Tower : nn::Module {  // no type_name override: the default names it
  nn::ModuleList blocks;
  nn::ModuleDict heads;
  Tower() {
    for (int i = 0; i < 3; ++i) blocks.push_back<nn::Linear>(nn::LinearOptions{.in = 4, .out = 4});
    heads.emplace<nn::Linear>("cls", nn::LinearOptions{.in = 4, .out = 2});
    heads.emplace<nn::Linear>("reg", nn::LinearOptions{.in = 4, .out = 1, .bias = false});
    register_module("blocks", blocks);
    register_module("heads", heads);
  }
  Variable forward(const Variable& x) override {
    Variable h = x;
    for (nn::Module& b : blocks) h = relu(b(h));
    return heads["cls"](h);
  }
};

namespace app {
template <class T> struct Wrapped : nn::Module {};
}  // namespace app

}  // namespace

TEST(ModuleList, RegistersChildrenByIndexAndIterates) {
  Tower t;
  EXPECT_EQ(t.blocks.size(), 3u);
  std::vector<std::string> names;
  for (const auto& [n, p] : t.named_parameters()) names.push_back(n);
  EXPECT_THAT(names, ::testing::ElementsAre("blocks.0.weight", "blocks.0.bias", "blocks.1.weight", "blocks.1.bias",
                                            "blocks.2.weight", "blocks.2.bias", "heads.cls.weight", "heads.cls.bias",
                                            "heads.reg.weight"));
  EXPECT_EQ(t.blocks.at<nn::Linear>(1).options.out, 4);
  EXPECT_THROW_MSG(t.blocks[3], std::out_of_range, "index 3 is out of range for 3 modules");
  EXPECT_THROW_MSG(t.blocks.at<nn::ReLU>(0), std::invalid_argument, "child 0 is a Linear");
  Variable y = t(Variable(randn({5, 4})));
  EXPECT_EQ(y.shape(), (Shape{5, 2}));
}

TEST(ModuleDict, LooksUpByKeyInInsertionOrder) {
  Tower t;
  EXPECT_THAT(t.heads.keys(), ::testing::ElementsAre("cls", "reg"));
  EXPECT_TRUE(t.heads.contains("reg"));
  EXPECT_FALSE(t.heads.contains("seg"));
  EXPECT_THROW_MSG(t.heads["seg"], std::out_of_range, "no key 'seg' (keys: cls, reg)");
  EXPECT_THROW_MSG(t.heads.emplace<nn::ReLU>("cls"), std::invalid_argument, "'cls' is already registered");
  EXPECT_THROW_MSG(t.heads.emplace<nn::ReLU>("a.b"), std::invalid_argument, "must be non-empty and contain no '.'");
}

TEST(ModuleTypeName, DefaultsToTheClassNameWithoutNamespaces) {
  Tower t;
  EXPECT_EQ(t.type_name(), "Tower");
  EXPECT_EQ(app::Wrapped<int>().type_name(), "Wrapped<int>");
  const std::string s = t.to_string();
  EXPECT_NE(s.find("Tower(\n  (blocks): ModuleList(\n    (0): Linear(in_features=4, out_features=4, bias=True)"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("(heads): ModuleDict(\n    (cls): Linear"), std::string::npos) << s;
}

TEST(Freezing, FrozenParametersGetNoGradientAndOptimizersSkipThem) {
  for (const std::string which : {"SGD", "AdamW"}) {
    manual_seed(1);
    Tower t;
    Variable w = t.blocks.at<nn::Linear>(0).weight;
    // a stale gradient from before freezing must not move it either
    cross_entropy(t(Variable(randn({4, 4}))), from_vector<int64_t>({0, 1, 1, 0})).backward();
    ASSERT_TRUE(w.grad().defined());
    w.requires_grad_(false);
    const Tensor before = w.data().clone();
    std::unique_ptr<optim::Optimizer> opt;
    if (which == "SGD")
      opt = std::make_unique<optim::SGD>(t.parameters(), optim::SGDOptions{.lr = 0.1, .weight_decay = 0.1});
    else
      opt = std::make_unique<optim::AdamW>(t.parameters(), optim::AdamWOptions{.lr = 0.1});
    Variable x(randn({4, 4}), true);
    for (auto& [n, p] : t.named_parameters())
      if (p.requires_grad()) p.zero_grad();
    cross_entropy(t(x), from_vector<int64_t>({1, 0, 1, 0})).backward();
    const Tensor bias_before = t.blocks.at<nn::Linear>(0).bias.data().clone();
    opt->step();
    minidl::testing::expect_equal(w.data(), before, which + ": frozen weight");
    EXPECT_GT(minidl::testing::max_abs_diff(t.blocks.at<nn::Linear>(0).bias.data(), bias_before), 0) << which;
    EXPECT_TRUE(x.grad().defined()) << "gradients still flow through the frozen layer to its input";
  }
  // a fresh backward through a frozen parameter leaves its grad undefined
  Tower t;
  t.heads["cls"].named_parameters()[0].second.requires_grad_(false);
  cross_entropy(t(Variable(randn({2, 4}))), from_vector<int64_t>({0, 1})).backward();
  EXPECT_FALSE(t.heads["cls"].named_parameters()[0].second.grad().defined());
  EXPECT_TRUE(t.heads["cls"].named_parameters()[1].second.grad().defined());
}

TEST(GradientAccumulation, TwoHalfBatchBackwardsEqualOneFullBatch) {
  manual_seed(2);
  Tower a;
  manual_seed(2);
  Tower b;
  const Tensor x = randn({8, 4}, RandomKey{3, 0});
  const Tensor y = from_vector<int64_t>({0, 1, 1, 0, 1, 1, 0, 0});
  cross_entropy(a(Variable(x)), y).backward();  // one batch of 8, mean loss
  for (int64_t h = 0; h < 2; ++h) {  // two micro-batches of 4, each loss / 2, grads summed
    Variable loss = cross_entropy(b(Variable(x.narrow(0, 4 * h, 4).contiguous())), y.narrow(0, 4 * h, 4).contiguous());
    mul(loss, 0.5).backward();
  }
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  int compared = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    if (!pa[i].second.grad().defined()) continue;  // heads.reg is unused by forward
    expect_close(pb[i].second.grad(), pa[i].second.grad(), 1e-5, 1e-6, pa[i].first);
    ++compared;
  }
  EXPECT_EQ(compared, 8);
  // and the accumulated step equals the big-batch step
  optim::SGD oa(a.parameters(), {.lr = 0.5}), ob(b.parameters(), {.lr = 0.5});
  oa.step();
  ob.step();
  for (size_t i = 0; i < pa.size(); ++i)
    expect_close(pb[i].second.data(), pa[i].second.data(), 1e-5, 1e-6, pa[i].first);
}
