// tests/tensor/test_ops_determinism.cpp — reductions and matmul give the same bits with 1 and 2
// threads (fixed chunking, partials combined in a fixed order).
#include "tests/common/testing.h"
#include "tests/common/threads.h"

using namespace minidl;
using minidl::testing::expect_equal;
using minidl::testing::with_1_and_2_threads;

TEST(Determinism, SumOfMillionElementsSameBitsFor1And2Threads) {
  Tensor x = randn({1000000});
  auto [a, b] = with_1_and_2_threads([&] { return sum(x); });
  expect_equal(a, b, "sum");
}

TEST(Determinism, MeanVarOverDimsSameBits) {
  Tensor x = randn({64, 300, 20});
  for (Shape dims : {Shape{0}, Shape{1}, Shape{2}, Shape{0, 2}}) {
    auto [a, b] = with_1_and_2_threads([&] { return mean(x, dims); });
    expect_equal(a, b, "mean over " + shape_str(dims));
    auto [c, d] = with_1_and_2_threads([&] { return var(x, dims); });
    expect_equal(c, d, "var over " + shape_str(dims));
  }
  Tensor g = randn({5000, 64});  // bias gradient: column sums
  auto [c, d] = with_1_and_2_threads([&] { return sum(g, {0}); });
  expect_equal(c, d, "column sums");
}

TEST(Determinism, MatmulSameBits) {
  Tensor a = randn({300, 500}), b = randn({500, 200});
  auto [c, d] = with_1_and_2_threads([&] { return matmul(a, b); });
  expect_equal(c, d, "matmul");
  auto [e, f] = with_1_and_2_threads([&] { return matmul(a.t(), randn({300, 64}, RandomKey{1, 2})); });
  expect_equal(e, f, "matmul transposed");
  Tensor q = randn({8, 64, 32});
  auto [g, h] = with_1_and_2_threads([&] { return matmul(q, q.transpose(1, 2)); });
  expect_equal(g, h, "batched matmul");
}
