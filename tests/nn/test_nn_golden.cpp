// tests/nn/test_nn_golden.cpp — layers and reference models against PyTorch: the PyTorch
// module's state_dict is loaded by name into the minidl module (so names must match), then
// forward output, input gradient, every parameter gradient and the updated buffers are compared,
// each with a tolerance relative to that tensor's scale (its largest golden magnitude). The
// reference models' states come from formula_state (the same formula as make_nn_golden.py).
#include <cmath>
#include <map>

#include "minidl/nn/nn_all.h"
#include "tests/common/testing.h"

using namespace minidl;
using minidl::testing::expect_close;

namespace {

const SafetensorsFile& golden() {
  static const SafetensorsFile f = load(std::string(MINIDL_SOURCE_DIR) + "/tests/nn/nn_golden.safetensors");
  return f;
}

TensorMap with_prefix(const std::string& prefix) {
  TensorMap out;
  for (const auto& [k, v] : golden().tensors)
    if (k.rfind(prefix, 0) == 0) out[k.substr(prefix.size())] = v;
  return out;
}

struct SelfAttention : nn::Module {
  nn::MultiheadAttention attn{{.embed_dim = 16, .num_heads = 4}};
  SelfAttention() { register_module("attn", attn); }
  std::string type_name() const override { return "SelfAttention"; }
  Variable forward(const Variable& x) override { return attn(x); }
};

struct Pools : nn::Sequential {
  Pools() {
    push_back<nn::MaxPool2d>(nn::Pool2dOptions{.kernel = 2});
    push_back<nn::AvgPool2d>(nn::Pool2dOptions{.kernel = 3, .stride = 1, .padding = 1});
  }
};

// make_nn_golden.py's formula_value: t in [-1, 1) from a hash of (key, index), then a
// power-of-two scale so that every float64 operation below is exact (bit-identical to numpy's).
uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}
Tensor formula_value(const std::string& key, const Shape& shape) {
  int64_t n = 1, fan = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    n *= shape[d];
    if (d >= 1) fan *= shape[d];
  }
  const bool near_one = key.ends_with("running_var") || (shape.size() == 1 && key.ends_with("weight"));
  int e = 0;
  while (shape.size() >= 2 && (int64_t(1) << (2 * e)) < fan) ++e;  // 4^e >= fan_in
  const uint64_t salt = fnv1a64(key);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    uint64_t x = static_cast<uint64_t>(i) + salt;
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    const double t = static_cast<double>(x >> 40) / 8388608.0 - 1.0;
    const double value = near_one ? 1.0 + 0.25 * t : shape.size() >= 2 ? std::ldexp(t, -e) : 0.25 * t;
    v[static_cast<size_t>(i)] = static_cast<float>(value);
  }
  return from_vector<float>(v, shape);
}
TensorMap formula_state(const std::string& name, const nn::Module& m) {
  TensorMap out = m.state_dict();
  for (auto& [key, t] : out)
    if (t.dtype() == DType::Float32) t = formula_value(name + "/" + key, t.shape());
  return out;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector<double>()) m = std::max(m, std::fabs(v));
  return m;
}
// |got - want| <= tol (|want| + scale), scale = the largest |want| (or `scale` when given)
void expect_close_scaled(const Tensor& got, const Tensor& want, double tol, const std::string& what,
                         double scale = -1) {
  if (scale < 0) scale = max_abs(want);
  expect_close(got, want, tol, tol * scale, what + " (scale " + std::to_string(scale) + ")");
}

struct CaseOptions {
  bool train = true;
  double tol = 1e-5;
  bool formula = false;  // a reference model: state from formula_state, not the fixture
  // gradients that are zero up to rounding (a conv bias in front of training-mode BatchNorm):
  // parameter -> the parameter whose gradient scale bounds it
  std::map<std::string, std::string> zero_grads_bounded_by = {};
};

// Loads NAME's state, runs forward/backward, compares everything recorded for NAME.
void check_case(const std::string& name, nn::Module& m, const CaseOptions& o) {
  const TensorMap state = o.formula ? formula_state(name, m) : with_prefix(name + "/state/");
  ASSERT_EQ(state.empty(), m.state_dict().empty()) << "golden state for " << name << " does not fit the module";
  m.load_state_dict(state, /*strict=*/true);
  m.train(o.train);
  const auto& T = golden().tensors;
  Variable x(T.at(name + "/x").clone(), true);
  Variable out = m(x);
  expect_close_scaled(out.data(), T.at(name + "/out"), o.tol, name + " forward");
  out.backward(T.at(name + "/dy"));
  expect_close_scaled(x.grad(), T.at(name + "/dx"), o.tol, name + " input gradient");
  size_t compared = 0, recorded = 0;
  for (const auto& [key, t] : T) recorded += key.rfind(name + "/grad/", 0) == 0;
  for (const auto& [pname, p] : m.named_parameters()) {
    auto it = T.find(name + "/grad/" + pname);
    if (it == T.end()) continue;
    ASSERT_TRUE(p.grad().defined()) << name << ": no gradient for " << pname;
    auto zero = o.zero_grads_bounded_by.find(pname);
    if (zero != o.zero_grads_bounded_by.end()) {
      // PyTorch's value is rounding noise: both must be tiny next to the bounding gradient
      const double bound = 1e-4 * max_abs(T.at(name + "/grad/" + zero->second));
      EXPECT_LE(max_abs(p.grad()), bound) << name << ": " << pname << " must get no gradient through BatchNorm";
      EXPECT_LE(max_abs(it->second), bound) << name << ": PyTorch's " << pname;
    } else {
      expect_close_scaled(p.grad(), it->second, o.tol, name + " grad of " + pname);
    }
    ++compared;
  }
  EXPECT_EQ(compared, recorded) << name << ": recorded gradients whose parameter the module lacks";
  for (const auto& [bname, b] : m.named_buffers()) {
    auto it = T.find(name + "/after/" + bname);
    ASSERT_NE(it, T.end()) << name << ": PyTorch has no buffer " << bname;
    expect_close_scaled(b->to(it->second.dtype()), it->second, o.tol, name + " buffer " + bname);
  }
  EXPECT_GT(compared + static_cast<size_t>(m.named_parameters().empty()), 0u)
      << name << ": no parameter gradient compared";
}

}  // namespace

TEST(NnGolden, Linear) {
  nn::Linear m({.in = 5, .out = 3});
  check_case("linear", m, {.tol = 1e-5});
}

TEST(NnGolden, LinearOn3dInput) {
  nn::Linear m({.in = 5, .out = 3});
  check_case("linear_3d", m, {.tol = 1e-5});
}

TEST(NnGolden, Conv2dStride2Padding1) {
  nn::Conv2d m({.in = 3, .out = 4, .kernel = 3, .stride = 2, .padding = 1});
  check_case("conv2d", m, {.tol = 2e-5});
}

TEST(NnGolden, BatchNorm2dTrainingUpdatesRunningStats) {
  nn::BatchNorm2d m({.num_features = 3});
  check_case("batchnorm2d_train", m, {.tol = 5e-5});
}

TEST(NnGolden, BatchNorm2dEvalUsesRunningStats) {
  nn::BatchNorm2d m({.num_features = 3});
  check_case("batchnorm2d_eval", m, {.train = false, .tol = 2e-5});
}

TEST(NnGolden, BatchNorm1d) {
  nn::BatchNorm1d m({.num_features = 6});
  check_case("batchnorm1d_train", m, {.tol = 5e-5});
}

TEST(NnGolden, BatchNorm1dCumulativeMomentum) {
  nn::BatchNorm1d m({.num_features = 6, .momentum = std::nullopt});
  check_case("batchnorm1d_cumulative", m, {.tol = 5e-5});
}

TEST(NnGolden, LayerNorm) {
  nn::LayerNorm m({.normalized_shape = {6}});
  check_case("layernorm", m, {.tol = 5e-5});
}

TEST(NnGolden, MultiheadSelfAttention) {
  SelfAttention m;
  check_case("self_attention", m, {.tol = 5e-5});
}

TEST(NnGolden, PreNormTransformerEncoderLayer) {
  nn::TransformerEncoderLayer m({.d_model = 16, .nhead = 4, .dim_feedforward = 32});
  check_case("encoder_layer", m, {.tol = 5e-5});
}

TEST(NnGolden, MaxThenAvgPool) {
  Pools m;
  check_case("maxpool_avgpool", m, {.tol = 1e-5});
}

// Every parameter gradient of the reference models is recorded, the 400k-element
// classifier.1.weight included.
TEST(NnGolden, ReferenceMlp) {
  nn::MLP m;
  check_case("mlp", m, {.tol = 5e-5, .formula = true});
}

TEST(NnGolden, ReferenceCnn) {
  nn::CNN m;
  check_case(
      "cnn", m,
      {.tol = 2e-4,
       .formula = true,
       .zero_grads_bounded_by = {{"features.0.bias", "features.0.weight"}, {"features.4.bias", "features.4.weight"}}});
}

TEST(NnGolden, ReferenceCnnInEvalModeGivesTheConvBiasesTheirGradient) {
  nn::CNN m;
  check_case("cnn_eval", m, {.train = false, .tol = 2e-4, .formula = true});
}

TEST(NnGolden, ReferenceVit) {
  nn::ViT m;
  check_case("vit", m, {.tol = 2e-4, .formula = true});
}

TEST(NnGolden, FormulaStateIsBitIdenticalToTheGenerators) {
  const auto& T = golden().tensors;
  for (const auto& [key, shape] : std::map<std::string, Shape>{{"formula/conv.weight", {5, 3, 3, 3}},
                                                               {"formula/bn.weight", {6}},
                                                               {"formula/bn.running_var", {6}},
                                                               {"formula/fc.bias", {9}}})
    minidl::testing::expect_equal(formula_value(key, shape), T.at(key), key);
}

TEST(NnGolden, Embedding) {
  nn::Embedding m({.num_embeddings = 10, .embedding_dim = 4});
  m.load_state_dict(with_prefix("embedding/state/"));
  const auto& T = golden().tensors;
  expect_close(m.forward(T.at("embedding/x")).data(), T.at("embedding/out"), 0, 0, "embedding");
}
