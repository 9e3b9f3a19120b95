// tests/nn/test_nn_golden.cpp — layers and reference models against PyTorch: the PyTorch
// module's state_dict is loaded by name into the minidl module (so names must match), then
// forward output, input gradient, parameter gradients and updated buffers are compared.
#include <map>

#include "nn/nn.h"
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

// Loads NAME/state, runs forward/backward, compares everything recorded for NAME.
void check_case(const std::string& name, nn::Module& m, bool train, double tol) {
  const TensorMap state = with_prefix(name + "/state/");
  ASSERT_EQ(state.empty(), m.state_dict().empty()) << "golden state for " << name << " does not fit the module";
  m.load_state_dict(state, /*strict=*/true);
  m.train(train);
  const auto& T = golden().tensors;
  Variable x(T.at(name + "/x").clone(), true);
  Variable out = m(x);
  expect_close(out.data(), T.at(name + "/out"), tol, tol, name + " forward");
  out.backward(T.at(name + "/dy"));
  expect_close(x.grad(), T.at(name + "/dx"), tol, tol, name + " input gradient");
  int compared = 0;
  for (const auto& [pname, p] : m.named_parameters()) {
    auto it = T.find(name + "/grad/" + pname);
    if (it == T.end()) continue;
    ASSERT_TRUE(p.grad().defined()) << name << ": no gradient for " << pname;
    expect_close(p.grad(), it->second, tol, tol, name + " grad of " + pname);
    ++compared;
  }
  for (const auto& [bname, b] : m.named_buffers()) {
    auto it = T.find(name + "/after/" + bname);
    ASSERT_NE(it, T.end()) << name << ": PyTorch has no buffer " << bname;
    expect_close(b->to(it->second.dtype()), it->second, tol, tol, name + " buffer " + bname);
  }
  EXPECT_GT(compared + static_cast<int>(m.named_parameters().empty()), 0) << name << ": no parameter gradient compared";
}

}  // namespace

TEST(NnGolden, Linear) {
  nn::Linear m({.in = 5, .out = 3});
  check_case("linear", m, true, 1e-5);
}

TEST(NnGolden, LinearOn3dInput) {
  nn::Linear m({.in = 5, .out = 3});
  check_case("linear_3d", m, true, 1e-5);
}

TEST(NnGolden, Conv2dStride2Padding1) {
  nn::Conv2d m({.in = 3, .out = 4, .kernel = 3, .stride = 2, .padding = 1});
  check_case("conv2d", m, true, 2e-5);
}

TEST(NnGolden, BatchNorm2dTrainingUpdatesRunningStats) {
  nn::BatchNorm2d m({.num_features = 3});
  check_case("batchnorm2d_train", m, true, 5e-5);
}

TEST(NnGolden, BatchNorm2dEvalUsesRunningStats) {
  nn::BatchNorm2d m({.num_features = 3});
  check_case("batchnorm2d_eval", m, false, 2e-5);
}

TEST(NnGolden, BatchNorm1d) {
  nn::BatchNorm1d m({.num_features = 6});
  check_case("batchnorm1d_train", m, true, 5e-5);
}

TEST(NnGolden, BatchNorm1dCumulativeMomentum) {
  nn::BatchNorm1d m({.num_features = 6, .momentum = std::nullopt});
  check_case("batchnorm1d_cumulative", m, true, 5e-5);
}

TEST(NnGolden, LayerNorm) {
  nn::LayerNorm m({.normalized_shape = {6}});
  check_case("layernorm", m, true, 5e-5);
}

TEST(NnGolden, MultiheadSelfAttention) {
  SelfAttention m;
  check_case("self_attention", m, true, 5e-5);
}

TEST(NnGolden, PreNormTransformerEncoderLayer) {
  nn::TransformerEncoderLayer m({.d_model = 16, .nhead = 4, .dim_feedforward = 32});
  check_case("encoder_layer", m, true, 5e-5);
}

TEST(NnGolden, MaxThenAvgPool) {
  Pools m;
  check_case("maxpool_avgpool", m, true, 1e-5);
}

TEST(NnGolden, ReferenceMlp) {
  nn::MLP m;
  check_case("mlp", m, true, 5e-5);
}

TEST(NnGolden, ReferenceCnn) {
  nn::CNN m;
  check_case("cnn", m, true, 2e-4);
}

TEST(NnGolden, ReferenceVit) {
  nn::ViT m;
  check_case("vit", m, true, 2e-4);
}

TEST(NnGolden, Embedding) {
  nn::Embedding m({.num_embeddings = 10, .embedding_dim = 4});
  m.load_state_dict(with_prefix("embedding/state/"));
  const auto& T = golden().tensors;
  expect_close(m.forward(T.at("embedding/x")).data(), T.at("embedding/out"), 0, 0, "embedding");
}
