// tests/tensor/test_ops_loss.cpp — cross_entropy forward/backward and dropout_mask
// (tensor/ops_loss.cpp, kernels/cpu/cross_entropy.h, kernels/cpu/dropout.h): hand-computed
// losses with and without label smoothing, stability for large logits, float64 finite differences,
// the dropout rule element by element, error messages.
#include <cmath>

#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/philox.h"
#include "tests/common/testing.h"
#include "tests/tensor/finite_difference.h"

using namespace minidl;
using minidl::testing::expect_close;
using minidl::testing::expect_equal;
using minidl::testing::numeric_grad;
using minidl::testing::randn64;

// ---- cross entropy ----

TEST(CrossEntropyLoss, IsTheMeanNegativeLogSoftmaxOfTheTarget) {
  // Row 0: logits {1, 2, 3}, target 0: lse = 3 + log(1 + e^-1 + e^-2) = 3.4076059644443806, loss 2.4076...
  // Row 1: logits {0, 0, 0}, target 2: loss log 3.
  Tensor logits = from_vector<double>({1, 2, 3, 0, 0, 0}, {2, 3});
  Tensor loss = cross_entropy_forward(logits, from_vector<int64_t>({0, 2}, {2}), 0.0);
  EXPECT_EQ(loss.dim(), 0);
  EXPECT_EQ(loss.dtype(), DType::Float64);
  EXPECT_NEAR(loss.item(), (2.4076059644443806 + std::log(3.0)) / 2, 1e-15);
  EXPECT_NEAR(cross_entropy_forward(logits.to(DType::Float32), from_vector<int64_t>({0, 2}, {2}), 0.0).item(),
              (2.4076059644443806 + std::log(3.0)) / 2, 1e-6);
}

TEST(CrossEntropyLoss, LabelSmoothingMixesInTheMeanOverClasses) {
  // eps 0.1: 0.9 * nll + 0.1 * mean_c(lse - x_c) = 0.9 * 2.40760596 + 0.1 * (3.40760596 - 2) = 2.30760596
  Tensor loss = cross_entropy_forward(from_vector<double>({1, 2, 3}, {1, 3}), from_vector<int64_t>({0}, {1}), 0.1);
  EXPECT_NEAR(loss.item(), 2.3076059644443806, 1e-14);
}

TEST(CrossEntropyLoss, LargeLogitsDoNotOverflow) {
  Tensor logits = from_vector<float>({1000, 0, -1000, 1000}, {2, 2});
  EXPECT_NEAR(cross_entropy_forward(logits, from_vector<int64_t>({1, 1}, {2}), 0.0).item(), 500.0, 1e-3);
  EXPECT_NEAR(cross_entropy_forward(logits, from_vector<int64_t>({0, 1}, {2}), 0.0).item(), 0.0, 1e-6);
  Tensor d = cross_entropy_backward(logits, from_vector<int64_t>({1, 1}, {2}), 0.0, scalar_tensor(1.0));
  expect_close(d, from_vector<float>({0.5f, -0.5f, 0, 0}, {2, 2}), 0, 1e-6);
}

TEST(CrossEntropyLoss, BackwardIsSoftmaxMinusSmoothedOneHotOverN) {
  // logits {0, 0} (softmax {.5, .5}), target 1, eps 0.2 -> q = {0.1, 0.9}; grad 2, N = 1.
  Tensor d = cross_entropy_backward(from_vector<double>({0, 0}, {1, 2}), from_vector<int64_t>({1}, {1}), 0.2,
                                    scalar_tensor(2.0, DType::Float64));
  expect_close(d, from_vector<double>({0.8, -0.8}, {1, 2}), 1e-15, 1e-15);
}

TEST(CrossEntropyLoss, BackwardMatchesFiniteDifferences) {
  Tensor logits = randn64({5, 4}, 1);
  Tensor target = from_vector<int64_t>({0, 3, 1, 1, 2}, {5});
  for (double eps : {0.0, 0.25}) {
    Tensor grad = scalar_tensor(0.7, DType::Float64);
    Tensor analytic = cross_entropy_backward(logits, target, eps, grad);
    Tensor numeric = numeric_grad([&](const Tensor& v) { return cross_entropy_forward(v, target, eps); }, logits, grad);
    expect_close(analytic, numeric, 1e-6, 1e-8, "label_smoothing " + std::to_string(eps));
  }
}

TEST(CrossEntropyLoss, RejectsATargetOutOfRangeNamingItAndC) {
  Tensor logits = zeros({3, 4});
  EXPECT_THROW_MSG(cross_entropy_forward(logits, from_vector<int64_t>({0, 4, 1}, {3}), 0.0), std::invalid_argument,
                   "cross_entropy: target value 4 at index 1 is out of range for C = 4 classes");
  EXPECT_THROW_MSG(cross_entropy_backward(logits, from_vector<int64_t>({0, 1, -1}, {3}), 0.0, scalar_tensor(1.0)),
                   std::invalid_argument, "target value -1 at index 2 is out of range for C = 4");
}

TEST(CrossEntropyLoss, RejectsBadShapesAndSmoothing) {
  EXPECT_THROW_MSG(cross_entropy_forward(zeros({4}), from_vector<int64_t>({0}, {1}), 0.0), std::invalid_argument,
                   "cross_entropy: expected logits (N, C), got float32[4] on cpu");
  EXPECT_THROW_MSG(
      cross_entropy_forward(zeros({2, 3}), from_vector<int64_t>({0, 1, 2}, {3}), 0.0), std::invalid_argument,
      "cross_entropy: expected target int64[2] on cpu for logits float32[2, 3] on cpu, got int64[3] on cpu");
  EXPECT_THROW_MSG(cross_entropy_forward(zeros({2, 3}), zeros({2}), 0.0), std::invalid_argument,
                   "got float32[2] on cpu");
  EXPECT_THROW_MSG(cross_entropy_forward(zeros({2, 3}), from_vector<int64_t>({0, 1}, {2}), 1.5), std::invalid_argument,
                   "label_smoothing must be in [0, 1]");
  EXPECT_THROW_MSG(cross_entropy_backward(zeros({2, 3}), from_vector<int64_t>({0, 1}, {2}), 0.0, zeros({2})),
                   std::invalid_argument, "expected a one-element grad_loss, got float32[2] on cpu");
}

// ---- dropout mask ----

TEST(DropoutMask, KeepsElementIExactlyWhenItsUniformIsAtLeastP) {
  const RandomKey key{42, 7};
  const double p = 0.3;
  for (DType dt : {DType::Float32, DType::Float64}) {
    Tensor m = dropout_mask({5, 40}, p, key, dt);
    EXPECT_EQ(m.dtype(), dt);
    EXPECT_EQ(m.shape(), (Shape{5, 40}));
    const auto v = m.to_vector<double>();
    for (size_t i = 0; i < v.size(); ++i) {
      const double u = dt == DType::Float32 ? kernels::philox_uniform<float>(key.seed, key.stream, i)
                                            : kernels::philox_uniform<double>(key.seed, key.stream, i);
      const double keep = dt == DType::Float32 ? static_cast<double>(static_cast<float>(1 / (1 - p))) : 1 / (1 - p);
      ASSERT_EQ(v[i], u >= p ? keep : 0.0) << "element " << i;
    }
  }
}

TEST(DropoutMask, KeepsAboutOneMinusPAndScalesToMeanOne) {
  Tensor m = dropout_mask({20000}, 0.25, RandomKey{1, 2}, DType::Float64);
  const auto v = m.to_vector<double>();
  double kept = 0, sum = 0;
  for (double x : v) {
    kept += x != 0;
    sum += x;
  }
  EXPECT_NEAR(kept / v.size(), 0.75, 0.015);
  EXPECT_NEAR(sum / v.size(), 1.0, 0.02);
}

TEST(DropoutMask, PZeroKeepsEverything) {
  expect_equal(dropout_mask({3, 3}, 0.0, RandomKey{5, 5}, DType::Float32), ones({3, 3}));
}

TEST(DropoutMask, IsTheSameForAnyThreadCountAndDiffersAcrossStreams) {
  const int saved = kernels::cpu::get_num_threads();
  kernels::cpu::set_num_threads(1);
  Tensor a = dropout_mask({50000}, 0.5, RandomKey{9, 1}, DType::Float32);
  kernels::cpu::set_num_threads(4);
  Tensor b = dropout_mask({50000}, 0.5, RandomKey{9, 1}, DType::Float32);
  kernels::cpu::set_num_threads(saved);
  expect_equal(a, b);
  Tensor c = dropout_mask({50000}, 0.5, RandomKey{9, 2}, DType::Float32);
  EXPECT_GT(minidl::testing::max_abs_diff(a, c), 0.0);
}

TEST(DropoutMask, RejectsPOutsideZeroToOne) {
  EXPECT_THROW_MSG(dropout_mask({2}, 1.0, RandomKey{}, DType::Float32), std::invalid_argument,
                   "dropout_mask: p must be in [0, 1), got 1.0");
  EXPECT_THROW_MSG(dropout_mask({2}, -0.1, RandomKey{}, DType::Float32), std::invalid_argument, "p must be in [0, 1)");
  EXPECT_THROW_MSG(dropout_mask({2}, 0.5, RandomKey{}, DType::Int64), std::invalid_argument,
                   "dropout_mask: expected a floating dtype");
}
