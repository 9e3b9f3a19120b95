// tests/nn/test_api_golden.cpp — the functional API beyond the reference models against PyTorch
// (tests/nn/api_golden.safetensors, written by tests/nn/make_api_golden.py): activations, losses
// with weights / ignore_index / reductions, attention with masks, padding and pooling modes.
// Each case: forward output and the gradients of sum(out * dy), in float32.
#include <functional>
#include <map>

#include "minidl/nn/nn_all.h"
#include "tests/common/golden.h"
#include "tests/common/testing.h"

using namespace minidl;
using V = std::vector<Variable>;

namespace {

using Runner = minidl::testing::GoldenCase;

const std::map<std::string, Runner>& runners() {
  using R = Reduction;
  static const std::map<std::string, Runner> r = {
      // activations
      {"silu", {[](const V& v) { return silu(v[0]); }}},
      {"leaky_relu", {[](const V& v) { return leaky_relu(v[0], 0.2); }}},
      {"elu", {[](const V& v) { return elu(v[0], 0.7); }}},
      {"softplus", {[](const V& v) { return softplus(v[0], 2.0, 5.0); }}},
      {"softplus_default", {[](const V& v) { return nn::Softplus()(v[0]); }}},
      {"hardswish", {[](const V& v) { return nn::Hardswish()(v[0]); }}},
      {"gelu_tanh_module", {[](const V& v) { return nn::GELU({.tanh_approximation = true})(v[0]); }}},
      // class-index losses
      {"ce_weight_ignore_mean", {[](const V& v) { return cross_entropy(v[0], v[1].data(), {.weight = v[2].data()}); }}},
      {"ce_weight_ignore_sum",
       {[](const V& v) { return cross_entropy(v[0], v[1].data(), {.weight = v[2].data(), .reduction = R::Sum}); }}},
      {"ce_ignore_none", {[](const V& v) { return cross_entropy(v[0], v[1].data(), {.reduction = R::None}); }}},
      {"ce_ignore2_mean", {[](const V& v) { return cross_entropy(v[0], v[1].data(), {.ignore_index = 2}); }}},
      {"ce_smooth_weight_ignore",
       {[](const V& v) { return cross_entropy(v[0], v[1].data(), {.weight = v[2].data(), .label_smoothing = 0.2}); }}},
      {"ce_smooth_none",
       {[](const V& v) { return cross_entropy(v[0], v[1].data(), {.reduction = R::None, .label_smoothing = 0.1}); }}},
      {"ce_3d_mean", {[](const V& v) { return cross_entropy(v[0], v[1].data(), CrossEntropyOptions{}); }}},
      {"ce_3d_none", {[](const V& v) { return cross_entropy(v[0], v[1].data(), {.reduction = R::None}); }}},
      {"nll_weight_mean", {[](const V& v) { return nll_loss(v[0], v[1].data(), {.weight = v[2].data()}); }}},
      {"nll_sum", {[](const V& v) { return nll_loss(v[0], v[1].data(), {.reduction = R::Sum}); }}},
      {"nll_none", {[](const V& v) { return nll_loss(v[0], v[1].data(), {.reduction = R::None}); }}},
      // element-wise losses
      {"bce_logits_mean", {[](const V& v) { return binary_cross_entropy_with_logits(v[0], v[1]); }}},
      {"bce_logits_weight_pos_sum", {[](const V& v) {
         return binary_cross_entropy_with_logits(
             v[0], v[1], {.weight = v[2].data(), .pos_weight = v[3].data(), .reduction = R::Sum});
       }}},
      {"bce_logits_large_none",
       {[](const V& v) { return binary_cross_entropy_with_logits(v[0], v[1], {.reduction = R::None}); }}},
      {"mse_sum", {[](const V& v) { return mse_loss(v[0], v[1], R::Sum); }}},
      {"mse_none", {[](const V& v) { return mse_loss(v[0], v[1], R::None); }}},
      {"l1_mean", {[](const V& v) { return l1_loss(v[0], v[1]); }}},
      {"smooth_l1_beta05_sum", {[](const V& v) { return smooth_l1_loss(v[0], v[1], R::Sum, 0.5); }}},
      {"smooth_l1_none", {[](const V& v) { return smooth_l1_loss(v[0], v[1], R::None); }}},
      // attention
      {"sdpa_plain", {[](const V& v) { return scaled_dot_product_attention(v[0], v[1], v[2]); }}},
      {"sdpa_causal", {[](const V& v) { return scaled_dot_product_attention(v[0], v[1], v[2], {.is_causal = true}); }}},
      {"sdpa_bool_mask_scale", {[](const V& v) {
         return scaled_dot_product_attention(v[0], v[1], v[2], {.attn_mask = v[3].data(), .scale = 0.3});
       }}},
      {"sdpa_float_mask",
       {[](const V& v) { return scaled_dot_product_attention(v[0], v[1], v[2], {.attn_mask = v[3].data()}); }}},
      // pooling ceil_mode, padding
      {"max_pool_ceil",
       {[](const V& v) { return nn::MaxPool2d({.kernel = 3, .stride = 2, .ceil_mode = true})(v[0]); }}},
      {"max_pool_ceil_pad",
       {[](const V& v) { return nn::MaxPool2d({.kernel = 3, .stride = 2, .padding = 1, .ceil_mode = true})(v[0]); }}},
      {"avg_pool_ceil",
       {[](const V& v) { return nn::AvgPool2d({.kernel = 3, .stride = 2, .ceil_mode = true})(v[0]); }}},
      {"avg_pool_ceil_pad_exclude", {[](const V& v) {
         return avg_pool2d(v[0], {.kernel_h = 3,
                                  .kernel_w = 3,
                                  .stride_h = 2,
                                  .stride_w = 2,
                                  .pad_h = 1,
                                  .pad_w = 1,
                                  .count_include_pad = false,
                                  .ceil_mode = true});
       }}},
      {"pad_constant", {[](const V& v) {
         return pad(v[0], {1, 2, 0, 3}, PadMode::Constant, 0.5);
       }}},
      {"pad_reflect", {[](const V& v) {
         return pad(v[0], {2, 1, 3, 1}, PadMode::Reflect);
       }}},
      {"pad_replicate", {[](const V& v) {
         return pad(v[0], {1, 3, 2, 0}, PadMode::Replicate);
       }}},
      {"pad_circular", {[](const V& v) {
         return pad(v[0], {2, 2, 1, 3}, PadMode::Circular);
       }}},
  };
  return r;
}

const SafetensorsFile& golden() {
  static const SafetensorsFile f = load(std::string(MINIDL_SOURCE_DIR) + "/tests/nn/api_golden.safetensors");
  return f;
}
bool has(const std::string& key) { return golden().tensors.count(key) > 0; }
const Tensor& get(const std::string& key) { return golden().tensors.at(key); }

}  // namespace

class ApiGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(ApiGolden, ForwardAndBackwardMatchPyTorch) {
  const std::string name = GetParam();
  // every functional case's output requires grad, and at least one input's gradient is recorded
  EXPECT_GT(minidl::testing::expect_golden_case(golden(), name, runners().at(name)), 0)
      << name << ": no gradient compared";
}

INSTANTIATE_TEST_SUITE_P(Functional, ApiGolden, ::testing::ValuesIn(minidl::testing::golden_case_names(runners())),
                         [](const auto& info) { return info.param; });

TEST(ApiGoldenFile, EveryRecordedFunctionalCaseHasARunner) {
  for (const auto& [key, t] : golden().tensors) {
    const std::string name = key.substr(0, key.find('/'));
    if (key != name + "/out") continue;  // one key per functional case (module cases have out0, out1, ...)
    EXPECT_TRUE(runners().count(name)) << "golden case '" << name << "' has no runner";
  }
}

namespace {

// Module case NAME: loads NAME/state, runs fn(module, inputs) -> outputs, backpropagates
// sum_j sum(out_j * dy_j) and compares outputs, input gradients and parameter gradients.
void check_module_case(const std::string& name, nn::Module& m, const std::function<V(nn::Module&, const V&)>& fn,
                       double tol = 5e-5) {
  TensorMap state;
  const std::string prefix = name + "/state/";
  for (const auto& [k, t] : golden().tensors)
    if (k.rfind(prefix, 0) == 0) state[k.substr(prefix.size())] = t;
  ASSERT_FALSE(state.empty()) << "no golden state for " << name;
  m.load_state_dict(state);
  V inputs = minidl::testing::golden_inputs(golden(), name);
  const V outs = fn(m, inputs);
  std::vector<Variable> roots;
  std::vector<Tensor> grads;
  for (size_t j = 0; j < outs.size(); ++j) {
    const std::string key = name + "/out" + std::to_string(j);
    ASSERT_TRUE(has(key)) << name << ": PyTorch recorded fewer outputs";
    minidl::testing::expect_close(outs[j].data(), get(key), tol, tol, key);
    roots.push_back(outs[j]);
    grads.push_back(get(name + "/dy" + std::to_string(j)));
  }
  EXPECT_FALSE(has(name + "/out" + std::to_string(outs.size()))) << name << ": PyTorch recorded more outputs";
  backward(roots, grads);
  for (size_t i = 0; i < inputs.size(); ++i)
    if (has(name + "/grad" + std::to_string(i)))
      minidl::testing::expect_close(inputs[i].grad(), get(name + "/grad" + std::to_string(i)), tol, tol,
                                    name + " grad of input " + std::to_string(i));
  for (const auto& [pname, p] : m.named_parameters()) {
    ASSERT_TRUE(has(name + "/pgrad/" + pname)) << name << ": PyTorch has no parameter " << pname;
    minidl::testing::expect_close(p.grad(), get(name + "/pgrad/" + pname), tol, tol, name + " grad of " + pname);
  }
}

}  // namespace

TEST(MultiheadAttentionGolden, CrossAttentionWithKeyPaddingAndBooleanMask) {
  nn::MultiheadAttention m({.embed_dim = 16, .num_heads = 4});
  check_module_case("mha_cross_masks", m, [](nn::Module& mod, const V& v) -> V {
    auto r = static_cast<nn::MultiheadAttention&>(mod).forward(
        v[0], v[1], v[2], {.key_padding_mask = v[3].data(), .attn_mask = v[4].data()});
    EXPECT_EQ(r.weights.shape(), (Shape{2, 4, 6}));
    return {r.output, r.weights};
  });
}

TEST(MultiheadAttentionGolden, SequenceFirstSelfAttentionFloatMaskPerHeadWeights) {
  nn::MultiheadAttention m({.embed_dim = 16, .num_heads = 4, .batch_first = false});
  check_module_case("mha_seq_first_float_mask", m, [](nn::Module& mod, const V& v) -> V {
    auto r = static_cast<nn::MultiheadAttention&>(mod).forward(
        v[0], v[0], v[0], {.attn_mask = v[1].data(), .average_attn_weights = false});
    EXPECT_EQ(r.weights.shape(), (Shape{2, 4, 5, 5}));
    return {r.output, r.weights};
  });
}

TEST(MultiheadAttentionGolden, IsCausalEqualsPyTorchsTriangularMask) {
  nn::MultiheadAttention m({.embed_dim = 16, .num_heads = 2});
  check_module_case("mha_causal", m, [](nn::Module& mod, const V& v) -> V {
    auto r =
        static_cast<nn::MultiheadAttention&>(mod).forward(v[0], v[0], v[0], {.need_weights = false, .is_causal = true});
    EXPECT_FALSE(r.weights.defined());
    return {r.output};
  });
}

TEST(Conv2dPaddingGolden, SameValidAndPaddingModesMatchPyTorch) {
  auto run = [](const std::string& name, const nn::Conv2dOptions& o) {
    SCOPED_TRACE(name);
    nn::Conv2d m(o);
    check_module_case(
        name, m, [](nn::Module& mod, const V& v) -> V { return {mod(v[0])}; }, 2e-5);
  };
  run("conv_same_even_kernel", {.in = 2, .out = 3, .kernel = 4, .padding = "same"});
  run("conv_same_dilated", {.in = 2, .out = 3, .kernel = 3, .padding = "same", .dilation = 2});
  run("conv_valid", {.in = 2, .out = 3, .kernel = 3, .padding = "valid"});
  run("conv_reflect", {.in = 2, .out = 3, .kernel = 3, .padding = 1, .padding_mode = "reflect"});
  run("conv_same_reflect_even",
      {.in = 2, .out = 3, .padding = "same", .kernel_h = 4, .kernel_w = 2, .padding_mode = "reflect"});
  run("conv_replicate_stride2",
      {.in = 2, .out = 3, .kernel = 3, .stride = 2, .padding = 1, .padding_mode = "replicate"});
  run("conv_circular", {.in = 2, .out = 3, .kernel = 3, .padding = 2, .bias = false, .padding_mode = "circular"});
}

TEST(Conv2dPadding, BadOptionsNameTheProblem) {
  EXPECT_THROW_MSG(nn::Conv2d({.in = 1, .out = 1, .kernel = 3, .padding = "full"}), std::invalid_argument,
                   "padding must be a number, \"same\" or \"valid\", got \"full\"");
  EXPECT_THROW_MSG(nn::Conv2d({.in = 1, .out = 1, .kernel = 3, .stride = 2, .padding = "same"}), std::invalid_argument,
                   "not supported for strided convolutions");
  EXPECT_THROW_MSG(nn::Conv2d({.in = 1, .out = 1, .kernel = 3, .padding_mode = "mirror"}), std::invalid_argument,
                   "padding_mode must be zeros, reflect, replicate or circular, got 'mirror'");
  EXPECT_THROW_MSG(pad(Variable(zeros({1, 1, 2, 2})), {2, 0}, PadMode::Reflect), std::invalid_argument,
                   "reflect padding (2, 0) of dim 3 needs a larger size than 2");
  EXPECT_EQ(nn::Conv2d({.in = 1, .out = 2, .kernel = 3, .padding = "same", .padding_mode = "reflect"}).extra_repr(),
            "1, 2, kernel_size=(3, 3), stride=(1, 1), padding=same, padding_mode=reflect");
  EXPECT_EQ(nn::MaxPool2d({.kernel = 3, .stride = 2, .ceil_mode = true}).extra_repr(),
            "kernel_size=3, stride=2, padding=0, dilation=1, ceil_mode=True");
}

TEST(MultiheadAttention, BadMasksNameTheProblem) {
  nn::MultiheadAttention m({.embed_dim = 8, .num_heads = 2});
  Variable q(randn({2, 3, 8})), kv(randn({2, 4, 8}));
  EXPECT_THROW_MSG(m.forward(q, kv, kv, {.attn_mask = zeros({3, 3}, DType::UInt8)}), std::invalid_argument,
                   "attn_mask must be (L, S) = (3, 4)");
  EXPECT_THROW_MSG(m.forward(q, kv, kv, {.key_padding_mask = zeros({2, 3}, DType::UInt8)}), std::invalid_argument,
                   "key_padding_mask must be (B, S) = (2, 4)");
  EXPECT_THROW_MSG(m.forward(q, kv, kv, {.attn_mask = zeros({3, 4}, DType::Int64)}), std::invalid_argument,
                   "a mask must be boolean (uint8) or floating");
  EXPECT_THROW_MSG(m.forward(q, kv, kv, {.attn_mask = zeros({3, 4}), .is_causal = true}), std::invalid_argument,
                   "either attn_mask or is_causal");
  EXPECT_THROW_MSG(m.forward(q, Variable(randn({2, 4, 6})), kv), std::invalid_argument,
                   "expected query, key and value (B, T, 8)");
  EXPECT_THROW_MSG(scaled_dot_product_attention(q, Variable(randn({2, 4, 5})), kv), std::invalid_argument,
                   "expected query (..., L, E)");
}

TEST(LossOptions, BadInputsNameTheProblem) {
  Variable x(randn({3, 4}), true);
  EXPECT_THROW_MSG(cross_entropy(x, from_vector(std::vector<int64_t>{0, 4, 1}, {3}), CrossEntropyOptions{}),
                   std::invalid_argument, "target 4 at position 1 is out of range for 4 classes");
  EXPECT_THROW_MSG(nll_loss(x, from_vector(std::vector<int64_t>{0, 1}, {2})), std::invalid_argument,
                   "nll_loss: expected input (N, C)");
  EXPECT_THROW_MSG(cross_entropy(x, from_vector(std::vector<int64_t>{0, 1, 1}, {3}), {.weight = ones({3})}),
                   std::invalid_argument, "weight must be a floating (C) = (4) tensor");
  EXPECT_THROW_MSG(smooth_l1_loss(x, x, Reduction::Mean, -1.0), std::invalid_argument, "beta must be >= 0");
  EXPECT_THROW_MSG(l1_loss(x, Variable(randn({4, 3}))), std::invalid_argument, "must have the same shape");
  EXPECT_THROW_MSG(binary_cross_entropy_with_logits(x, Variable(rand({3, 4})), {.pos_weight = ones({3})}),
                   std::invalid_argument, "pos_weight must be (C)");
}

TEST(LossOptions, AllIgnoredMeanIsNaNAsInPyTorch) {
  Variable x(randn({2, 3}), true);
  Variable loss = cross_entropy(x, from_vector(std::vector<int64_t>{-100, -100}, {2}), CrossEntropyOptions{});
  EXPECT_TRUE(std::isnan(loss.item()));
}
