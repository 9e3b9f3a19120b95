// tests/tensor/test_ops_softmax.cpp — softmax / log_softmax along any dim (stable for huge
// logits) and their backward helpers against the formulas and finite differences.
#include <cmath>

#include "tests/common/testing.h"

using namespace minidl;
using minidl::testing::expect_close;

namespace {
Tensor f64(std::vector<double> v, Shape s = {}) { return from_vector<double>(v, s); }
}  // namespace

TEST(Softmax, HandComputedRow) {
  const double e1 = std::exp(1.0), e2 = std::exp(2.0), z = 1 + e1 + e2;
  expect_close(softmax(f64({0, 1, 2}), 0), f64({1 / z, e1 / z, e2 / z}), 1e-15, 0);
  expect_close(log_softmax(f64({0, 1, 2}), -1), f64({-std::log(z), 1 - std::log(z), 2 - std::log(z)}), 1e-15, 1e-15);
}

TEST(Softmax, StableForHugeLogits) {
  Tensor y = softmax(from_vector<float>({1000, 1000}), 0);
  expect_close(y, from_vector<float>({0.5f, 0.5f}), 0, 1e-7);
  Tensor l = log_softmax(from_vector<float>({1000, 0}), 0);
  expect_close(l, from_vector<float>({0, -1000}), 0, 1e-4);
}

TEST(Softmax, AlongFirstDimOfMatrixAndNonContiguous) {
  Tensor x = randn({3, 4}, DType::Float64);
  Tensor a = softmax(x, 0);
  Tensor b = softmax(x.t(), 1).t();  // same math on a transposed view
  expect_close(a, b, 1e-15, 1e-15);
  expect_close(sum(a, {0}), ones({4}, DType::Float64), 1e-15, 1e-15);
}

TEST(Softmax, MiddleDimOf3d) {
  Tensor x = randn({2, 3, 4}, DType::Float64);
  Tensor y = softmax(x, 1);
  Tensor ref = exp(x - max(x, 1, true).values);
  ref = ref / sum(ref, {1}, true);
  expect_close(y, ref, 1e-14, 1e-15);
  expect_close(log_softmax(x, 1), log(ref), 1e-13, 1e-14);
}

TEST(Softmax, BackwardMatchesFormulas) {
  Tensor x = randn({2, 5}, DType::Float64), dy = randn({2, 5}, DType::Float64);
  Tensor y = softmax(x, 1);
  expect_close(softmax_backward(y, dy, 1), y * (dy - sum(dy * y, {1}, true)), 1e-14, 1e-15);
  Tensor ly = log_softmax(x, 1);
  expect_close(log_softmax_backward(ly, dy, 1), dy - exp(ly) * sum(dy, {1}, true), 1e-14, 1e-15);
}

TEST(Softmax, BackwardMatchesFiniteDifferences) {
  Tensor x = randn({4}, DType::Float64), dy = randn({4}, DType::Float64);
  const double h = 1e-6;
  auto vx = x.to_vector<double>();
  std::vector<double> num(4);
  for (int i = 0; i < 4; ++i) {
    auto xp = vx, xm = vx;
    xp[i] += h;
    xm[i] -= h;
    num[i] = (sum(log_softmax(f64(xp), 0) * dy).item() - sum(log_softmax(f64(xm), 0) * dy).item()) / (2 * h);
  }
  expect_close(log_softmax_backward(log_softmax(x, 0), dy, 0), f64(num), 1e-6, 1e-8);
}

TEST(Softmax, Errors) {
  EXPECT_THROW_MSG(softmax(arange(3), 0), std::invalid_argument, "softmax: expected a floating dtype");
  EXPECT_THROW(softmax(zeros({2}), 1), std::out_of_range);
  EXPECT_THROW_MSG(softmax_backward(zeros({2}), zeros({3}), 0), std::invalid_argument, "shapes differ");
}
