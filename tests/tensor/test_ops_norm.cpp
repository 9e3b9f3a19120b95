// tests/tensor/test_ops_norm.cpp — batch norm pieces and layer norm (tensor/ops_norm.cpp,
// kernels/cpu/norm.h): hand-computed statistics, a full batch-norm backward assembled from
// backward_reduce + backward_elemt and checked by float64 finite differences, layer norm
// gradients, reproducibility across thread counts, error messages.
#include <cmath>

#include "minidl/kernels/cpu/parallel.h"
#include "tests/common/testing.h"
#include "tests/tensor/finite_difference.h"

using namespace minidl;
using minidl::testing::expect_close;
using minidl::testing::expect_equal;
using minidl::testing::numeric_grad;
using minidl::testing::randn64;

namespace {

// Training-mode batch norm forward built from the pieces, as nn::BatchNorm does.
Tensor batch_norm_train(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  BatchNormStats s = batch_norm_stats(x, eps);
  return batch_norm_elemt(x, s.mean, s.invstd, weight, bias);
}

struct BatchNormGrads {
  Tensor dx, dweight, dbias;
};

// Training-mode batch norm backward built from the pieces, as (Sync)BatchNorm does.
BatchNormGrads batch_norm_train_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, double eps) {
  BatchNormStats s = batch_norm_stats(x, eps);
  BatchNormReduce r = batch_norm_backward_reduce(dy, x, s.mean, s.invstd, weight);
  const int64_t count = x.numel() / x.size(1);
  Tensor dx = batch_norm_backward_elemt(dy, x, s.mean, s.invstd, weight, r.sum_dy, r.sum_dy_xmu, count);
  return {dx, r.grad_weight, r.grad_bias};
}

}  // namespace

TEST(BatchNorm, StatsAreThePerChannelMeanAndBiasedInvstd) {
  // (N, C) = (2, 2): channel 0 {1, 3} -> mean 2, var 1; channel 1 {10, 30} -> mean 20, var 100.
  BatchNormStats s = batch_norm_stats(from_vector<float>({1, 10, 3, 30}, {2, 2}), 0.0);
  expect_equal(s.mean, from_vector<float>({2, 20}, {2}));
  expect_close(s.invstd, from_vector<float>({1.0f, 0.1f}, {2}), 1e-7, 0);
  // (N, C, L) = (2, 1, 2): {1, 2, 3, 4} -> mean 2.5, biased var 1.25, eps 0.75 -> invstd 1/sqrt(2).
  BatchNormStats t = batch_norm_stats(from_vector<double>({1, 2, 3, 4}, {2, 1, 2}), 0.75);
  expect_equal(t.mean, from_vector<double>({2.5}, {1}));
  expect_close(t.invstd, from_vector<double>({1 / std::sqrt(2.0)}, {1}), 1e-15, 0);
}

TEST(BatchNorm, Float32StatsAccumulateInDouble) {
  // 10000 + small offsets: a float32 running sum would lose the offsets entirely.
  std::vector<float> v(8192);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 10000.0f + static_cast<float>(i % 8) * 0.125f;  // mean 10000.4375
  BatchNormStats s = batch_norm_stats(from_vector(v, {8192, 1}), 0.0);
  EXPECT_FLOAT_EQ(s.mean.item<float>(), 10000.4375f);
  // var of {0, .125, ..., .875} = 0.125^2 * 5.25 = 0.08203125
  EXPECT_NEAR(s.invstd.item<double>(), 1 / std::sqrt(0.08203125), 1e-3);
}

TEST(BatchNorm, ElemtNormalisesThenAppliesTheAffine) {
  Tensor x = from_vector<double>({1, 10, 3, 30}, {2, 2});
  Tensor y = batch_norm_elemt(x, from_vector<double>({2, 20}, {2}), from_vector<double>({1, 0.1}, {2}),
                              from_vector<double>({2, 3}, {2}), from_vector<double>({0.5, -1}, {2}));
  expect_close(y, from_vector<double>({-1.5, -4, 2.5, 2}, {2, 2}), 1e-15, 1e-15);
  Tensor plain =
      batch_norm_elemt(x, from_vector<double>({2, 20}, {2}), from_vector<double>({1, 0.1}, {2}), Tensor(), Tensor());
  expect_close(plain, from_vector<double>({-1, -1, 1, 1}, {2, 2}), 1e-15, 1e-15);
}

TEST(BatchNorm, BackwardReduceSumsPerChannel) {
  Tensor x = from_vector<double>({1, 10, 3, 30}, {2, 2}), dy = from_vector<double>({1, 2, 3, 4}, {2, 2});
  BatchNormReduce r = batch_norm_backward_reduce(dy, x, from_vector<double>({2, 20}, {2}),
                                                 from_vector<double>({1, 0.1}, {2}), from_vector<double>({1, 1}, {2}));
  expect_equal(r.sum_dy, from_vector<double>({4, 6}, {2}));
  expect_equal(r.sum_dy_xmu, from_vector<double>({1 * -1 + 3 * 1, 2 * -10 + 4 * 10}, {2}));  // {2, 20}
  expect_close(r.grad_weight, from_vector<double>({2, 2}, {2}), 1e-15, 0);
  expect_equal(r.grad_bias, r.sum_dy);
  BatchNormReduce no_affine = batch_norm_backward_reduce(dy, x, from_vector<double>({2, 20}, {2}),
                                                         from_vector<double>({1, 0.1}, {2}), Tensor());
  EXPECT_FALSE(no_affine.grad_weight.defined());
  EXPECT_FALSE(no_affine.grad_bias.defined());
  expect_equal(no_affine.sum_dy, r.sum_dy);
}

TEST(BatchNorm, AssembledBackwardMatchesFiniteDifferences) {
  const double eps = 1e-5;
  for (const Shape& shape : {Shape{6, 3}, Shape{3, 4, 2, 3}, Shape{2, 2, 5}}) {
    const int64_t C = shape[1];
    Tensor x = randn64(shape, 1), w = randn64({C}, 2), b = randn64({C}, 3), dy = randn64(shape, 4);
    BatchNormGrads g = batch_norm_train_backward(dy, x, w, eps);
    const std::string what = shape_str(shape);
    expect_close(g.dx, numeric_grad([&](const Tensor& v) { return batch_norm_train(v, w, b, eps); }, x, dy), 1e-6, 1e-7,
                 what + " dx");
    expect_close(g.dweight, numeric_grad([&](const Tensor& v) { return batch_norm_train(x, v, b, eps); }, w, dy), 1e-6,
                 1e-7, what + " dweight");
    expect_close(g.dbias, numeric_grad([&](const Tensor& v) { return batch_norm_train(x, w, v, eps); }, b, dy), 1e-6,
                 1e-7, what + " dbias");
  }
}

TEST(BatchNorm, AssembledBackwardWithoutAffineMatchesFiniteDifferences) {
  Tensor x = randn64({4, 3, 2}, 5), dy = randn64({4, 3, 2}, 6);
  BatchNormGrads g = batch_norm_train_backward(dy, x, Tensor(), 1e-5);
  EXPECT_FALSE(g.dweight.defined());
  expect_close(g.dx,
               numeric_grad([&](const Tensor& v) { return batch_norm_train(v, Tensor(), Tensor(), 1e-5); }, x, dy),
               1e-6, 1e-7);
}

TEST(BatchNorm, EvalBackwardIsDyTimesWeightTimesInvstd) {
  // With fixed statistics, sum_dy = sum_dy_xmu = 0 turns backward_elemt into the eval-mode gradient.
  Tensor x = randn64({3, 2, 2}, 7), dy = randn64({3, 2, 2}, 8);
  Tensor mean = from_vector<double>({0.5, -1}, {2}), invstd = from_vector<double>({2, 0.25}, {2});
  Tensor w = from_vector<double>({3, -4}, {2});
  Tensor dx =
      batch_norm_backward_elemt(dy, x, mean, invstd, w, zeros({2}, DType::Float64), zeros({2}, DType::Float64), 12);
  expect_close(dx, numeric_grad([&](const Tensor& v) { return batch_norm_elemt(v, mean, invstd, w, Tensor()); }, x, dy),
               1e-6, 1e-7);
}

TEST(BatchNorm, PiecesGiveTheSameBitsForAnyThreadCount) {
  // 64 * 300 values per channel: large enough that the channels are split across threads.
  Tensor x = randn64({64, 5, 300}, 9).to(DType::Float32), dy = randn64({64, 5, 300}, 10).to(DType::Float32);
  Tensor w = ones({5});
  const int saved = kernels::cpu::get_num_threads();
  kernels::cpu::set_num_threads(1);
  BatchNormStats s1 = batch_norm_stats(x, 1e-5);
  BatchNormReduce r1 = batch_norm_backward_reduce(dy, x, s1.mean, s1.invstd, w);
  kernels::cpu::set_num_threads(3);
  BatchNormStats s3 = batch_norm_stats(x, 1e-5);
  BatchNormReduce r3 = batch_norm_backward_reduce(dy, x, s3.mean, s3.invstd, w);
  kernels::cpu::set_num_threads(saved);
  expect_equal(s1.mean, s3.mean);
  expect_equal(s1.invstd, s3.invstd);
  expect_equal(r1.sum_dy, r3.sum_dy);
  expect_equal(r1.sum_dy_xmu, r3.sum_dy_xmu);
}

TEST(BatchNorm, RejectsBadShapes) {
  EXPECT_THROW_MSG(batch_norm_stats(zeros({4}), 1e-5), std::invalid_argument,
                   "batch_norm_stats: expected input (N, C) or (N, C, *), got float32[4] on cpu");
  EXPECT_THROW_MSG(batch_norm_stats(zeros({0, 3}), 1e-5), std::invalid_argument, "at least one value per channel");
  EXPECT_THROW_MSG(batch_norm_elemt(zeros({2, 3}), zeros({4}), ones({3}), Tensor(), Tensor()), std::invalid_argument,
                   "batch_norm_elemt: expected mean of shape [3], got float32[4] on cpu");
  EXPECT_THROW_MSG(batch_norm_backward_reduce(zeros({2, 4}), zeros({2, 3}), zeros({3}), ones({3}), Tensor()),
                   std::invalid_argument, "expected grad_output shaped and typed like input float32[2, 3] on cpu");
  EXPECT_THROW_MSG(batch_norm_backward_elemt(zeros({2, 3}), zeros({2, 3}), zeros({3}), ones({3}), Tensor(), zeros({3}),
                                             zeros({3}), 0),
                   std::invalid_argument, "count must be positive, got 0");
  // the fused ReLU's bias, which the backward pieces rebuild the forward's output with
  EXPECT_THROW_MSG(
      batch_norm_backward_reduce(zeros({2, 3}), zeros({2, 3}), zeros({3}), ones({3}), Tensor(), zeros({2}), true),
      std::invalid_argument, "batch_norm_backward_reduce: expected bias of shape [3], got float32[2] on cpu");
  EXPECT_THROW_MSG(batch_norm_backward_elemt(zeros({2, 3}), zeros({2, 3}), zeros({3}), ones({3}), Tensor(), zeros({3}),
                                             zeros({3}), 2, zeros({3, 1}), true),
                   std::invalid_argument, "batch_norm_backward_elemt: expected bias of shape [3], got float32[3, 1]");
}

TEST(BatchNorm, ReluMaxPoolRejectsBadShapes) {
  EXPECT_THROW_MSG(
      batch_norm_relu_max_pool2d_forward(zeros({2, 3, 4}), zeros({3}), ones({3}), Tensor(), Tensor()),
      std::invalid_argument,
      "batch_norm_relu_max_pool2d_forward: expected input (N, C, H, W) with H, W >= 2, got float32[2, 3, 4]");
  EXPECT_THROW_MSG(batch_norm_relu_max_pool2d_forward(zeros({2, 3, 1, 4}), zeros({3}), ones({3}), Tensor(), Tensor()),
                   std::invalid_argument, "with H, W >= 2, got float32[2, 3, 1, 4]");
  EXPECT_THROW_MSG(batch_norm_relu_max_pool2d_forward(zeros({2, 3, 4, 4}), zeros({3}), ones({3}), ones({2}), Tensor()),
                   std::invalid_argument, "expected weight of shape [3], got float32[2]");
  const BatchNormReluPoolResult r =
      batch_norm_relu_max_pool2d_forward(zeros({2, 3, 4, 5}), zeros({3}), ones({3}), Tensor(), Tensor());
  EXPECT_EQ(r.out.shape(), (Shape{2, 3, 2, 2}));
  EXPECT_THROW_MSG(batch_norm_relu_max_pool2d_backward(zeros({2, 3, 4, 4}), zeros({2, 3, 4, 5}), r.saved, zeros({3}),
                                                       ones({3}), Tensor()),
                   std::invalid_argument, "expected grad_output shaped and typed like input float32[2, 3, 2, 2]");
  EXPECT_THROW_MSG(batch_norm_relu_max_pool2d_backward(zeros({2, 3, 2, 2}), zeros({2, 3, 6, 6}), r.saved, zeros({3}),
                                                       ones({3}), Tensor()),
                   std::invalid_argument, "the saved forward results do not belong to input float32[2, 3, 6, 6]");
}

// ---- layer norm ----

TEST(LayerNorm, NormalisesEachRowWithBiasedVariance) {
  // Row {1, 2, 3, 4}: mean 2.5, var 1.25; eps 0.75 -> invstd 1/sqrt(2).
  LayerNormResult r =
      layer_norm_forward(from_vector<double>({1, 2, 3, 4, 5, 5, 5, 5}, {2, 4}), {4}, Tensor(), Tensor(), 0.75);
  const double k = 1 / std::sqrt(2.0);
  expect_close(r.out, from_vector<double>({-1.5 * k, -0.5 * k, 0.5 * k, 1.5 * k, 0, 0, 0, 0}, {2, 4}), 1e-15, 1e-15);
  expect_equal(r.mean, from_vector<double>({2.5, 5}, {2}));
  expect_close(r.invstd, from_vector<double>({k, 1 / std::sqrt(0.75)}, {2}), 1e-15, 0);
}

TEST(LayerNorm, AppliesWeightAndBiasPerElement) {
  LayerNormResult r = layer_norm_forward(from_vector<float>({1, 3}, {1, 2}), {2}, from_vector<float>({2, 3}, {2}),
                                         from_vector<float>({10, 20}, {2}), 0.0);
  expect_close(r.out, from_vector<float>({8, 23}, {1, 2}), 1e-6, 0);  // xhat = {-1, 1}
}

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  const double eps = 1e-5;
  for (const Shape& norm : {Shape{4}, Shape{3, 4}}) {
    Tensor x = randn64({2, 3, 4}, 11), w = randn64(norm, 12), b = randn64(norm, 13), dy = randn64({2, 3, 4}, 14);
    LayerNormResult r = layer_norm_forward(x, norm, w, b, eps);
    LayerNormGrads g = layer_norm_backward(dy, x, r.mean, r.invstd, norm, w);
    auto f = [&](const Tensor& xv, const Tensor& wv, const Tensor& bv) {
      return layer_norm_forward(xv, norm, wv, bv, eps).out;
    };
    const std::string what = "normalized " + shape_str(norm);
    expect_close(g.dx, numeric_grad([&](const Tensor& v) { return f(v, w, b); }, x, dy), 1e-6, 1e-7, what + " dx");
    expect_close(g.dweight, numeric_grad([&](const Tensor& v) { return f(x, v, b); }, w, dy), 1e-6, 1e-7,
                 what + " dweight");
    expect_close(g.dbias, numeric_grad([&](const Tensor& v) { return f(x, w, v); }, b, dy), 1e-6, 1e-7,
                 what + " dbias");
  }
}

TEST(LayerNorm, BackwardWithoutWeightMatchesFiniteDifferences) {
  Tensor x = randn64({5, 6}, 15), dy = randn64({5, 6}, 16);
  LayerNormResult r = layer_norm_forward(x, {6}, Tensor(), Tensor(), 1e-5);
  LayerNormGrads g = layer_norm_backward(dy, x, r.mean, r.invstd, {6}, Tensor());
  EXPECT_FALSE(g.dweight.defined());
  EXPECT_FALSE(g.dbias.defined());
  expect_close(
      g.dx,
      numeric_grad([&](const Tensor& v) { return layer_norm_forward(v, {6}, Tensor(), Tensor(), 1e-5).out; }, x, dy),
      1e-6, 1e-7);
}

TEST(LayerNorm, WeightGradientIsTheSameForAnyThreadCount) {
  // 100 rows of 600: four fixed 32-row chunks, large enough to be split across threads.
  Tensor x = randn64({100, 600}, 17).to(DType::Float32), dy = randn64({100, 600}, 18).to(DType::Float32);
  Tensor w = ones({600});
  LayerNormResult r = layer_norm_forward(x, {600}, w, Tensor(), 1e-5);
  const int saved = kernels::cpu::get_num_threads();
  kernels::cpu::set_num_threads(1);
  LayerNormGrads a = layer_norm_backward(dy, x, r.mean, r.invstd, {600}, w);
  kernels::cpu::set_num_threads(4);
  LayerNormGrads b = layer_norm_backward(dy, x, r.mean, r.invstd, {600}, w);
  kernels::cpu::set_num_threads(saved);
  expect_equal(a.dweight, b.dweight);
  expect_equal(a.dbias, b.dbias);
  expect_equal(a.dx, b.dx);
}

TEST(LayerNorm, RejectsMismatchedShapes) {
  EXPECT_THROW_MSG(layer_norm_forward(zeros({2, 3}), {4}, Tensor(), Tensor(), 1e-5), std::invalid_argument,
                   "layer_norm: expected input whose trailing dims are normalized_shape [4], got float32[2, 3] on cpu");
  EXPECT_THROW_MSG(layer_norm_forward(zeros({2, 3}), {3}, zeros({4}), Tensor(), 1e-5), std::invalid_argument,
                   "layer_norm: expected weight float32[3] to match input float32[2, 3] on cpu, got float32[4] on cpu");
  EXPECT_THROW_MSG(layer_norm_backward(zeros({2, 3}), zeros({2, 3}), zeros({3}), zeros({2}), {3}, Tensor()),
                   std::invalid_argument, "layer_norm_backward: expected mean with 2 float32 values");
}
