// tests/nn/test_module.cpp — Module registration, names, state_dict, strict loading errors,
// train/eval, the printed tree, the reference models' parameter counts and output shapes, and the
// initialisers against PyTorch's formulas (bounds, fans, the statistics of the draws).
#include "minidl/nn/nn_all.h"
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
  EXPECT_THROW_MSG(
      b.load_state_dict(s), std::invalid_argument,
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
  EXPECT_THROW_MSG(l(Variable(zeros({3, 5}))), std::invalid_argument,
                   "linear: input float32[3, 5] on cpu does not match weight");
  nn::BatchNorm2d bn({.num_features = 3});
  EXPECT_THROW_MSG(bn(Variable(zeros({2, 3}))), std::invalid_argument, "BatchNorm2d: expected 4D input");
  EXPECT_THROW_MSG(bn(Variable(zeros({2, 4, 2, 2}))), std::invalid_argument, "expected 3 channels");
  EXPECT_THROW_MSG(nn::Conv2d({.in = 3, .out = 4, .kernel = 3, .groups = 2}), std::invalid_argument,
                   "divisible by groups");
  EXPECT_THROW_MSG(nn::MultiheadAttention({.embed_dim = 10, .num_heads = 3}), std::invalid_argument,
                   "divisible by num_heads");
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

// ---- initialisers against torch.nn.init's formulas ----
// The default generator is replayed: manual_seed(s) then rand/randn of the same shapes in the same
// order gives the draws an initialiser consumed, so the expected values follow from PyTorch's
// formulas alone: U(-bound, bound) is -bound + 2 bound u with
//   kaiming_uniform_(a)  bound = sqrt(3) * sqrt(2 / (1 + a^2)) / sqrt(fan)  (a = sqrt(5): 1/sqrt(fan_in))
//   xavier_uniform_      bound = gain * sqrt(6 / (fan_in + fan_out))
//   Linear / Conv bias   bound = 1 / sqrt(fan_in)
// and normal_(mean, std) is mean + std z. fan_in = in * kh * kw, fan_out = out * kh * kw.
// Compared to 3e-7 relative (float32 rounding of the same double value); a wrong bound is far off.
namespace {

// -bound + 2 bound u for the next rand(shape) of the default generator, as float32
Tensor replay_uniform(const Shape& shape, double bound) {
  Tensor u = rand(shape);
  std::vector<float> v;
  for (float x : u.to_vector<float>()) v.push_back(static_cast<float>(-bound + 2.0 * bound * static_cast<double>(x)));
  return from_vector<float>(v, shape);
}
Tensor replay_normal(const Shape& shape, double mean, double std) {
  Tensor z = randn(shape);
  std::vector<float> v;
  for (float x : z.to_vector<float>()) v.push_back(static_cast<float>(mean + std * static_cast<double>(x)));
  return from_vector<float>(v, shape);
}

// (mean, standard deviation, excess kurtosis) of a tensor's values, in double
struct Moments {
  double mean, std, excess_kurtosis, max_abs;
};
Moments moments(const Tensor& t) {
  const auto v = t.to_vector<double>();
  const double n = static_cast<double>(v.size());
  double mean = 0, m2 = 0, m4 = 0, max_abs = 0;
  for (double x : v) mean += x / n;
  for (double x : v) {
    m2 += (x - mean) * (x - mean) / n;
    m4 += std::pow(x - mean, 4) / n;
    max_abs = std::max(max_abs, std::fabs(x));
  }
  return {mean, std::sqrt(m2), m4 / (m2 * m2) - 3.0, max_abs};
}

}  // namespace

TEST(Init, FanInAndFanOutAsPyTorch) {
  using nn::init::calculate_fan_in_and_fan_out;
  EXPECT_EQ(calculate_fan_in_and_fan_out(empty({256, 784})), std::make_pair(int64_t(784), int64_t(256)));  // Linear
  EXPECT_EQ(calculate_fan_in_and_fan_out(empty({64, 32, 3, 3})), std::make_pair(int64_t(288), int64_t(576)));  // Conv2d
  EXPECT_EQ(calculate_fan_in_and_fan_out(empty({8, 2, 3, 5})), std::make_pair(int64_t(30), int64_t(120)));  // groups
  EXPECT_EQ(calculate_fan_in_and_fan_out(empty({192, 64})), std::make_pair(int64_t(64), int64_t(192)));  // in_proj
  EXPECT_THROW_MSG(calculate_fan_in_and_fan_out(empty({5})), std::invalid_argument, "at least 2 dims");
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("leaky_relu", std::sqrt(5.0)), std::sqrt(1.0 / 3.0));
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("relu"), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("tanh"), 5.0 / 3.0);
}

TEST(Init, KaimingUniformXavierUniformAndNormalFollowPyTorchsFormulas) {
  manual_seed(3);
  Tensor k = empty({64, 32, 3, 3});
  nn::init::kaiming_uniform_(k, std::sqrt(5.0));
  Tensor kr = empty({64, 32});
  nn::init::kaiming_uniform_(kr, 0.0, "fan_out", "relu");
  Tensor x = empty({192, 64});
  nn::init::xavier_uniform_(x, 2.0);
  Tensor n = empty({50, 64});
  nn::init::normal_(n, 0.5, 0.02);
  manual_seed(3);
  minidl::testing::expect_close(k, replay_uniform({64, 32, 3, 3}, 1.0 / std::sqrt(288.0)), 3e-7, 0,
                                "kaiming a=sqrt(5)");
  minidl::testing::expect_close(kr, replay_uniform({64, 32}, std::sqrt(3.0) * std::sqrt(2.0) / std::sqrt(64.0)), 3e-7,
                                0, "kaiming fan_out relu");
  minidl::testing::expect_close(x, replay_uniform({192, 64}, 2.0 * std::sqrt(6.0 / 256.0)), 3e-7, 0, "xavier gain 2");
  minidl::testing::expect_close(n, replay_normal({50, 64}, 0.5, 0.02), 3e-7, 0, "normal(0.5, 0.02)");
}

TEST(Init, DrawsHaveTheStatisticsOfTheirDistributions) {
  // 200,704 draws: standard errors are ~0.2% of the scale; the bounds below allow 5 of them.
  manual_seed(11);
  Tensor w = empty({256, 784});
  nn::init::kaiming_uniform_(w, std::sqrt(5.0));  // U(-1/28, 1/28): std bound / sqrt(3), excess kurtosis -1.2
  const double bound = 1.0 / 28.0;
  const Moments u = moments(w);
  EXPECT_LE(u.max_abs, bound);
  EXPECT_GE(u.max_abs, bound * (1 - 1e-4)) << "the draws reach the bound";
  EXPECT_NEAR(u.mean, 0.0, 5 * bound / std::sqrt(3.0 * 200704));
  EXPECT_NEAR(u.std, bound / std::sqrt(3.0), 0.005 * bound / std::sqrt(3.0));
  EXPECT_NEAR(u.excess_kurtosis, -1.2, 0.02);
  Tensor z = empty({256, 784});
  nn::init::normal_(z, -1.0, 0.02);  // excess kurtosis 0
  const Moments g = moments(z);
  EXPECT_NEAR(g.mean, -1.0, 5 * 0.02 / std::sqrt(200704.0));
  EXPECT_NEAR(g.std, 0.02, 5 * 0.02 / std::sqrt(2 * 200704.0));
  EXPECT_NEAR(g.excess_kurtosis, 0.0, 0.06);
}

TEST(Init, LayersAndModelsInitialiseAsPyTorch) {
  // Linear and Conv2d: weight kaiming_uniform_(a=sqrt(5)), bias U(+-1/sqrt(fan_in)), drawn in that order
  manual_seed(5);
  nn::Linear lin({.in = 784, .out = 256});
  nn::Conv2d conv({.in = 32, .out = 64, .kernel = 3, .padding = 1});
  nn::MultiheadAttention mha({.embed_dim = 64, .num_heads = 4});
  nn::Embedding emb({.num_embeddings = 10, .embedding_dim = 4});
  manual_seed(5);
  using minidl::testing::expect_close;
  expect_close(lin.weight.data(), replay_uniform({256, 784}, 1.0 / 28.0), 3e-7, 0, "Linear weight");
  expect_close(lin.bias.data(), replay_uniform({256}, 1.0 / 28.0), 3e-7, 0, "Linear bias");
  expect_close(conv.weight.data(), replay_uniform({64, 32, 3, 3}, 1.0 / std::sqrt(288.0)), 3e-7, 0, "Conv2d weight");
  expect_close(conv.bias.data(), replay_uniform({64}, 1.0 / std::sqrt(288.0)), 3e-7, 0, "Conv2d bias");
  // MultiheadAttention: out_proj is a Linear (its bias then zeroed), in_proj_weight xavier_uniform_
  expect_close(mha.out_proj.weight.data(), replay_uniform({64, 64}, 1.0 / 8.0), 3e-7, 0, "out_proj weight");
  replay_uniform({64}, 1.0 / 8.0);
  expect_close(mha.in_proj_weight.data(), replay_uniform({192, 64}, std::sqrt(6.0 / 256.0)), 3e-7, 0, "in_proj_weight");
  expect_close(mha.in_proj_bias.data(), zeros({192}), 0, 0, "in_proj_bias");
  expect_close(mha.out_proj.bias.data(), zeros({64}), 0, 0, "out_proj bias");
  expect_close(emb.weight.data(), replay_normal({10, 4}, 0.0, 1.0), 3e-7, 0, "Embedding N(0, 1)");
  // ViT: patch_embed Conv2d(1, 64, 4) (fan_in 16), head Linear(64, 10), then pos_embed N(0, 0.02)
  manual_seed(6);
  nn::ViT vit;
  manual_seed(6);
  expect_close(vit.patch_embed.weight.data(), replay_uniform({64, 1, 4, 4}, 0.25), 3e-7, 0, "ViT patch_embed weight");
  expect_close(vit.patch_embed.bias.data(), replay_uniform({64}, 0.25), 3e-7, 0, "ViT patch_embed bias");
  expect_close(vit.head.weight.data(), replay_uniform({10, 64}, 0.125), 3e-7, 0, "ViT head weight");
  expect_close(vit.head.bias.data(), replay_uniform({10}, 0.125), 3e-7, 0, "ViT head bias");
  expect_close(vit.pos_embed.data(), replay_normal({1, 50, 64}, 0.0, 0.02), 3e-7, 0, "ViT pos_embed");
  expect_close(vit.cls_token.data(), zeros({1, 1, 64}), 0, 0, "ViT cls_token");
}

TEST(Init, TruncNormalStaysInRange) {
  manual_seed(3);
  Tensor t = empty({10000});
  nn::init::trunc_normal_(t, 0.0, 1.0, -1.0, 1.0);
  for (float v : t.to_vector<float>()) ASSERT_TRUE(v >= -1.0f && v <= 1.0f);
}
