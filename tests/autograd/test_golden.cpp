// tests/autograd/test_golden.cpp — every op against PyTorch's values (tests/golden/ops.safetensors,
// written by tests/golden/make_golden.py): forward output and the gradients of sum(out * dy),
// in float32, with a tolerance per op.
#include <map>

#include "minidl/autograd/autograd_all.h"
#include "minidl/tensor/serialize.h"
#include "tests/common/golden.h"
#include "tests/common/testing.h"

using namespace minidl;
using V = std::vector<Variable>;

namespace {

using Runner = minidl::testing::GoldenCase;

Pool2dParams pool(int64_t k, int64_t s, int64_t p) {
  return {.kernel_h = k, .kernel_w = k, .stride_h = s, .stride_w = s, .pad_h = p, .pad_w = p};
}

const std::map<std::string, Runner>& runners() {
  static const std::map<std::string, Runner> r = {
      {"add", {[](const V& v) { return add(v[0], v[1]); }}},
      {"sub", {[](const V& v) { return sub(v[0], v[1]); }}},
      {"mul", {[](const V& v) { return mul(v[0], v[1]); }}},
      {"div", {[](const V& v) { return div(v[0], v[1]); }}},
      {"neg", {[](const V& v) { return neg(v[0]); }}},
      {"exp", {[](const V& v) { return exp(v[0]); }}},
      {"log", {[](const V& v) { return log(v[0]); }}},
      {"sqrt", {[](const V& v) { return sqrt(v[0]); }}},
      {"pow", {[](const V& v) { return pow(v[0], 3.0); }}},
      {"tanh", {[](const V& v) { return tanh(v[0]); }}},
      {"sigmoid", {[](const V& v) { return sigmoid(v[0]); }}},
      {"relu", {[](const V& v) { return relu(v[0]); }}},
      {"gelu_erf", {[](const V& v) { return gelu(v[0]); }}},
      {"gelu_tanh", {[](const V& v) { return gelu(v[0], true); }}},
      {"sum_dims", {[](const V& v) {
         return sum(v[0], {0, 2}, true);
       }}},
      {"mean_dim", {[](const V& v) { return mean(v[0], {1}); }}},
      {"var_dim", {[](const V& v) { return var(v[0], {1}); }}},
      {"max_dim", {[](const V& v) { return max(v[0], 1); }}},
      {"matmul_2d", {[](const V& v) { return matmul(v[0], v[1]); }}},
      {"matmul_batched_broadcast", {[](const V& v) { return matmul(v[0], v[1]); }}},
      {"matmul_3d_2d", {[](const V& v) { return matmul(v[0], v[1]); }}},
      {"transpose_mul", {[](const V& v) { return mul(transpose(v[0], 0, 1), v[1]); }}},
      {"slice", {[](const V& v) { return slice(v[0], 1, 1, 4, 2); }}},
      {"cat", {[](const V& v) {
         return cat({v[0], v[1]}, 1);
       }}},
      {"stack", {[](const V& v) {
         return stack({v[0], v[1]}, 1);
       }}},
      {"index_select", {[](const V& v) { return index_select(v[0], 0, v[1].data()); }}},
      {"softmax", {[](const V& v) { return softmax(v[0], -1); }}},
      {"log_softmax", {[](const V& v) { return log_softmax(v[0], 1); }}},
      {"cross_entropy", {[](const V& v) { return cross_entropy(v[0], v[1].data()); }}},
      {"cross_entropy_ls", {[](const V& v) { return cross_entropy(v[0], v[1].data(), 0.1); }}},
      {"mse_loss", {[](const V& v) { return mse_loss(v[0], v[1]); }}},
      {"conv2d", {[](const V& v) { return conv2d(v[0], v[1], v[2]); }, 2e-5}},
      {"conv2d_s2p1",
       {[](const V& v) { return conv2d(v[0], v[1], v[2], {.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1}); },
        2e-5}},
      {"conv2d_d2g2",
       {[](const V& v) {
          return conv2d(v[0], v[1], Variable(),
                        {.pad_h = 2, .pad_w = 2, .dilation_h = 2, .dilation_w = 2, .groups = 2});
        },
        2e-5}},
      {"max_pool2d", {[](const V& v) { return max_pool2d(v[0], pool(2, 2, 0)); }}},
      {"max_pool2d_k3s2p1", {[](const V& v) { return max_pool2d(v[0], pool(3, 2, 1)); }}},
      {"avg_pool2d_k3s2p1", {[](const V& v) { return avg_pool2d(v[0], pool(3, 2, 1)); }}},
      {"adaptive_avg_pool2d", {[](const V& v) { return adaptive_avg_pool2d(v[0], 2, 3); }}},
      {"batch_norm_train",
       {[](const V& v) { return batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], true, 0.1, 1e-5); }, 5e-5}},
      {"batch_norm_eval",
       {[](const V& v) { return batch_norm(v[0], v[3].data(), v[4].data(), v[1], v[2], false, 0.1, 1e-5); }, 2e-5}},
      {"layer_norm", {[](const V& v) { return layer_norm(v[0], {4}, v[1], v[2], 1e-5); }, 5e-5}},
      {"embedding", {[](const V& v) { return embedding(v[0].data(), v[1]); }}},
      {"interpolate_nearest_size", {[](const V& v) {
         return interpolate(v[0], {.size = {5, 7}});
       }}},
      {"interpolate_nearest_scale", {[](const V& v) {
         return interpolate(v[0], {.scale_factor = {1.7, 0.75}});
       }}},
      {"interpolate_nearest_x2", {[](const V& v) { return interpolate(v[0], {.scale_factor = {2.0}}); }}},
      {"interpolate_nearest_down", {[](const V& v) {
         return interpolate(v[0], {.size = {2, 3}});
       }}},
      {"interpolate_bilinear_size", {[](const V& v) {
         return interpolate(v[0], {.size = {5, 7}, .mode = InterpolateMode::Bilinear, .align_corners = false});
       }}},
      {"interpolate_bilinear_ac", {[](const V& v) {
         return interpolate(v[0], {.size = {5, 7}, .mode = InterpolateMode::Bilinear, .align_corners = true});
       }}},
      {"interpolate_bilinear_scale", {[](const V& v) {
         return interpolate(v[0], {.scale_factor = {1.7, 0.6}, .mode = InterpolateMode::Bilinear});
       }}},
      {"interpolate_bilinear_recompute", {[](const V& v) {
         return interpolate(
             v[0], {.scale_factor = {1.7, 0.6}, .mode = InterpolateMode::Bilinear, .recompute_scale_factor = true});
       }}},
      {"interpolate_bilinear_ac_scale", {[](const V& v) {
         return interpolate(v[0], {.scale_factor = {2.0}, .mode = InterpolateMode::Bilinear, .align_corners = true});
       }}},
      {"interpolate_bilinear_down", {[](const V& v) {
         return interpolate(v[0], {.size = {2, 3}, .mode = InterpolateMode::Bilinear});
       }}},
      {"group_norm", {[](const V& v) { return group_norm(v[0], 2, v[1], v[2], 1e-5); }, 5e-5}},
      {"group_norm_3d_eps", {[](const V& v) { return group_norm(v[0], 4, v[1], v[2], 1e-3); }, 5e-5}},
      {"group_norm_no_affine", {[](const V& v) { return group_norm(v[0], 3, {}, {}, 1e-5); }, 5e-5}},
      {"conv_transpose2d", {[](const V& v) { return conv_transpose2d(v[0], v[1], v[2]); }}},
      {"conv_transpose2d_s2p1op1", {[](const V& v) {
         return conv_transpose2d(
             v[0], v[1], v[2],
             {.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1, .output_padding_h = 1, .output_padding_w = 1});
       }}},
      {"conv_transpose2d_d2g2", {[](const V& v) {
         return conv_transpose2d(v[0], v[1], {},
                                 {.stride_h = 2, .stride_w = 2, .dilation_h = 2, .dilation_w = 2, .groups = 2});
       }}},
  };
  return r;
}

const SafetensorsFile& golden() {
  static const SafetensorsFile f = load(std::string(MINIDL_GOLDEN_DIR) + "/ops.safetensors");
  return f;
}

const Tensor& get(const std::string& key) { return golden().tensors.at(key); }

}  // namespace

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, ForwardAndBackwardMatchPyTorch) {
  const std::string name = GetParam();
  minidl::testing::expect_golden_case(golden(), name, runners().at(name));
}

INSTANTIATE_TEST_SUITE_P(AllOps, Golden, ::testing::ValuesIn(minidl::testing::golden_case_names(runners())),
                         [](const auto& info) { return info.param; });

TEST(GoldenFile, EveryRecordedCaseHasARunner) {
  for (const auto& [key, meta] : golden().metadata) {
    if (key == "generator" || key == "batch_norm_running") continue;
    EXPECT_TRUE(runners().count(key)) << "golden case '" << key << "' has no runner in test_golden.cpp";
  }
}

TEST(GoldenFile, BatchNormRunningStatsMatchPyTorch) {
  // the training-mode call of batch_norm_train updated PyTorch's running stats; replay it here
  Tensor rm = get("batch_norm_running/in0").clone(), rv = get("batch_norm_running/in1").clone();
  batch_norm(Variable(get("batch_norm_train/in0")), rm, rv, Variable(get("batch_norm_train/in1")),
             Variable(get("batch_norm_train/in2")), true, 0.1, 1e-5);
  minidl::testing::expect_close(cat({rm, rv}, 0), get("batch_norm_running/out"), 1e-5, 1e-5, "running stats");
}
