// tests/nn/test_module.cpp — Module registration, names, state_dict, strict loading errors,
// train/eval, the printed tree, and the reference models' parameter counts and output shapes.
#include "nn/nn.h"
#include "tests/common/testing.h"

using namespace minidl;

namespace {
struct Block : nn::Module {
  nn::Linear fc{{.in = 4, .out = 3}};
  nn::BatchNorm1d bn{{.num_features = 3}};
  Variable scale;
  Block() {
    scale = Variable(ones({3}), true);
    register_parameter("scale", scale);
    register_module("fc", fc);
    register_module("bn", bn);
  }
  std::string type_name() const override { return "Block"; }
  Variable forward(const Variable& x) override { return mul(bn(fc(x)), scale); }
};
}  // namespace

TEST(Module, NamedParametersAreDottedInRegistrationOrder) {
  Block b;
  std::vector<std::string> names;
  for (auto& [n, p] : b.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"scale", "fc.weight", "fc.bias", "bn.weight", "bn.bias"}));
  std::vector<std::string> bufs;
  for (auto& [n, t] : b.named_buffers()) bufs.push_back(n);
  EXPECT_EQ(bufs, (std::vector<std::string>{"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"}));
  EXPECT_EQ(b.num_parameters(), 3 + 12 + 3 + 3 + 3);
}

TEST(Module, DuplicateNameIsAnError) {
  struct Bad : nn::Module {
    Variable a{ones({1}), true}, b{ones({1}), true};
    Bad() {
      register_parameter("w", a);
      register_parameter("w", b);
    }
    std::string type_name() const override { return "Bad"; }
  };
  EXPECT_THROW_MSG(Bad(), std::invalid_argument, "'w' is already registered");
}

TEST(Module, StateDictRoundTripIntoAFreshModel) {
  manual_seed(1);
  Block a;
  manual_seed(2);
  Block b;
  EXPECT_GT(minidl::testing::max_abs_diff(a.fc.weight.data(), b.fc.weight.data()), 0);
  b.load_state_dict(a.state_dict());
  minidl::testing::expect_equal(b.fc.weight.data(), a.fc.weight.data());
  minidl::testing::expect_equal(b.bn.running_var, a.bn.running_var);
}

TEST(Module, StrictLoadNamesMissingAndUnexpectedKeys) {
  Block b;
  TensorMap s = b.state_dict();
  s.erase("fc.bias");
  s["fc.extra"] = zeros({1});
  EXPECT_THROW_MSG(b.load_state_dict(s), std::invalid_argument,
                   "Missing key(s) in state_dict: \"fc.bias\". Unexpected key(s) in state_dict: \"fc.extra\".");
  auto r = b.load_state_dict(s, /*strict=*/false);
  EXPECT_EQ(r.missing_keys, (std::vector<std::string>{"fc.bias"}));
  EXPECT_EQ(r.unexpected_keys, (std::vector<std::string>{"fc.extra"}));
}

TEST(Module, ShapeMismatchNamesTheKey) {
  Block b;
  TensorMap s = b.state_dict();
  s["fc.weight"] = zeros({2, 2});
  EXPECT_THROW_MSG(b.load_state_dict(s), std::invalid_argument,
                   "size mismatch for fc.weight: copying a param with shape [2, 2], the shape in the current model is [3, 4]");
}

TEST(Module, TrainEvalPropagatesToChildren) {
  Block b;
  b.eval();
  EXPECT_FALSE(b.bn.is_training());
  b.train();
  EXPECT_TRUE(b.fc.is_training());
}

TEST(Module, ZeroGradClearsEveryParameter) {
  Block b;
  sum(b(Variable(randn({5, 4})))).backward();
  EXPECT_TRUE(b.fc.weight.grad().defined());
  b.zero_grad();
  for (auto& p : b.parameters()) EXPECT_FALSE(p.grad().defined());
}

TEST(Module, PrintsATreeLikePyTorch) {
  Block b;
  EXPECT_EQ(b.to_string(),
            "Block(\n"
            "  (fc): Linear(in_features=4, out_features=3, bias=True)\n"
            "  (bn): BatchNorm1d(3, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)\n"
            ")\n"
            "Total parameters: 24");
}

TEST(Module, MemberChildrenCannotBeReplacedButSequentialOnesCan) {
  Block b;
  EXPECT_THROW_MSG(b.replace_module("bn", std::make_unique<nn::ReLU>()), std::logic_error, "cannot be replaced");
  nn::Sequential s;
  s.push_back<nn::Linear>(nn::LinearOptions{.in = 2, .out = 2});
  s.replace_module("0", std::make_unique<nn::ReLU>());
  EXPECT_EQ(s[0].type_name(), "ReLU");
}

TEST(ReferenceModels, ParameterCountsMatchTheSpec) {
  EXPECT_EQ(nn::MLP().num_parameters(), 235146);
  EXPECT_EQ(nn::CNN().num_parameters(), 421834);
  EXPECT_EQ(nn::ViT().num_parameters(), 205962);
  EXPECT_THROW_MSG(nn::make_model("resnet"), std::invalid_argument, "unknown model 'resnet' (choose mlp, cnn or vit)");
}

TEST(ReferenceModels, OutputShapesAreBatchBy10) {
  Variable x(rand({3, 1, 28, 28}));
  for (const char* name : {"mlp", "cnn", "vit"}) {
    auto m = nn::make_model(name);
    EXPECT_EQ(m->forward(x).shape(), (Shape{3, 10})) << name;
  }
}

TEST(Layers, BadInputsGiveClearErrors) {
  nn::Linear l({.in = 4, .out = 2});
  EXPECT_THROW_MSG(l(Variable(zeros({3, 5}))), std::invalid_argument, "linear: input float32[3, 5] on cpu does not match weight");
  nn::BatchNorm2d bn({.num_features = 3});
  EXPECT_THROW_MSG(bn(Variable(zeros({2, 3}))), std::invalid_argument, "BatchNorm2d: expected 4D input");
  EXPECT_THROW_MSG(bn(Variable(zeros({2, 4, 2, 2}))), std::invalid_argument, "expected 3 channels");
  EXPECT_THROW_MSG(nn::Conv2d({.in = 3, .out = 4, .kernel = 3, .groups = 2}), std::invalid_argument, "divisible by groups");
  EXPECT_THROW_MSG(nn::MultiheadAttention({.embed_dim = 10, .num_heads = 3}), std::invalid_argument, "divisible by num_heads");
}

TEST(Layers, DropoutIsIdentityInEvalAndScalesInTraining) {
  nn::Dropout d({.p = 0.5});
  Variable x(ones({1000}));
  d.eval();
  minidl::testing::expect_equal(d(x).data(), x.data());
  d.train();
  auto v = d(x).data().to_vector<float>();
  int kept = 0;
  for (float e : v) {
    ASSERT_TRUE(e == 0.0f || e == 2.0f);
    kept += e != 0;
  }
  EXPECT_NEAR(kept, 500, 60);
}

TEST(Init, KaimingUniformBoundAndTruncNormalRange) {
  manual_seed(3);
  Tensor w = empty({64, 32});
  nn::init::kaiming_uniform_(w, 0.0, "fan_in", "relu");
  const double bound = std::sqrt(6.0 / 32.0);
  for (float v : w.to_vector<float>()) ASSERT_LE(std::fabs(v), bound);
  Tensor t = empty({10000});
  nn::init::trunc_normal_(t, 0.0, 1.0, -1.0, 1.0);
  for (float v : t.to_vector<float>()) ASSERT_TRUE(v >= -1.0f && v <= 1.0f);
}
