// tests/tensor/test_ops_reduce.cpp — sum, mean, var, max/argmax, topk_indices: dims, keepdim,
// negative dims, non-contiguous inputs, int64, errors, float32 accuracy.
#include <cmath>

#include "tests/common/testing.h"

using namespace minidl;
using minidl::testing::expect_close;
using minidl::testing::expect_equal;

namespace {
Tensor f32(std::vector<float> v, Shape s = {}) { return from_vector<float>(v, s); }
Tensor f64(std::vector<double> v, Shape s = {}) { return from_vector<double>(v, s); }
Tensor i64(std::vector<int64_t> v, Shape s = {}) { return from_vector<int64_t>(v, s); }
// x = [[0, 1, 2], [3, 4, 5]]
Tensor x23() { return arange(0, 6, 1, DType::Float32).reshape({2, 3}); }
}  // namespace

TEST(Sum, AllDimsGivesZeroDim) {
  Tensor s = sum(x23());
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item(), 15.0);
  EXPECT_EQ(s.dtype(), DType::Float32);
}

TEST(Sum, OverEachDimAndKeepdim) {
  expect_equal(sum(x23(), {0}), f32({3, 5, 7}));
  expect_equal(sum(x23(), {1}), f32({3, 12}));
  expect_equal(sum(x23(), {-1}, true), f32({3, 12}, {2, 1}));
  expect_equal(sum(x23(), {0}, true), f32({3, 5, 7}, {1, 3}));
  expect_equal(sum(x23(), {0, 1}, true), f32({15}, {1, 1}));
}

TEST(Sum, MiddleDimOf3d) {
  Tensor x = arange(0, 24, 1, DType::Float64).reshape({2, 3, 4});
  // sum over dim 1: out[i, k] = sum_j (12 i + 4 j + k) = 36 i + 12 + 3 k
  expect_equal(sum(x, {1}), f64({12, 15, 18, 21, 48, 51, 54, 57}, {2, 4}));
  // sum over dims (0, 2): out[j] = sum_{i,k} (12 i + 4 j + k) = 48 + 32 j + 12
  expect_equal(sum(x, {0, 2}), f64({60, 92, 124}));
}

TEST(Sum, NonContiguousInput) {
  Tensor t = x23().t();  // (3, 2)
  expect_equal(sum(t, {0}), f32({3, 12}));
  expect_equal(sum(t, {1}), f32({3, 5, 7}));
  Tensor s = arange(0, 10, 1, DType::Float32).slice(0, 0, 10, 2);  // 0 2 4 6 8
  EXPECT_EQ(sum(s).item(), 20.0);
}

TEST(Sum, Int64StaysInt64) {
  Tensor x = i64({1, 2, 3, 4}, {2, 2});
  expect_equal(sum(x, {0}), i64({4, 6}));
  expect_equal(sum(x), from_vector<int64_t>({10}, {}));
}

TEST(Sum, EmptyDimGivesZeros) { expect_equal(sum(zeros({0, 3}), {0}), f32({0, 0, 0})); }

TEST(Sum, Float32AccumulatesInDouble) {
  // 1e6 copies of 0.1f: a float accumulator drifts by ~1e-2 relative; double is exact to float.
  Tensor x = full({1000000}, 0.1);
  EXPECT_EQ(sum(x).item<float>(), static_cast<float>(1000000 * double(0.1f)));
}

TEST(Sum, ColumnSumsOfLargeMatrixMatchReference) {
  Tensor x = randn({1000, 37}, DType::Float64);
  auto v = x.to_vector<double>();
  std::vector<double> ref(37, 0.0);
  for (int r = 0; r < 1000; ++r)
    for (int c = 0; c < 37; ++c) ref[c] += v[r * 37 + c];
  expect_close(sum(x, {0}), f64(ref), 1e-12, 1e-12);
}

TEST(Mean, DimsAndAll) {
  expect_equal(mean(x23(), {0}), f32({1.5f, 2.5f, 3.5f}));
  expect_equal(mean(x23(), {1}, true), f32({1, 4}, {2, 1}));
  EXPECT_EQ(mean(x23()).item(), 2.5);
  EXPECT_THROW_MSG(mean(i64({1, 2})), std::invalid_argument, "mean: expected a floating dtype");
}

TEST(Var, UnbiasedAndBiased) {
  Tensor x = f64({1, 2, 3, 4});
  EXPECT_NEAR(var(x).item(), 1.6666666666666667, 1e-15);
  EXPECT_NEAR(var(x, {}, 0).item(), 1.25, 1e-15);
  // rows [0,1,2] and [3,4,5]: unbiased variance 1 each; columns: pairs differing by 3 -> 4.5
  expect_close(var(x23(), {1}), f32({1, 1}), 1e-6, 0);
  expect_close(var(x23(), {0}), f32({4.5f, 4.5f, 4.5f}), 1e-6, 0);
  expect_close(var(x23(), {0}, 0, true), f32({2.25f, 2.25f, 2.25f}, {1, 3}), 1e-6, 0);
}

TEST(Var, TwoPassIsAccurateWithLargeOffset) {
  // values 1e8 + {0, 1, 2, 3}: a one-pass E[x^2] - E[x]^2 loses everything in double
  Tensor x = f64({1e8, 1e8 + 1, 1e8 + 2, 1e8 + 3});
  EXPECT_DOUBLE_EQ(var(x, {}, 0).item(), 1.25);
}

TEST(Var, OverBatchAndSpatialDimsLikeBatchNorm) {
  Tensor x = randn({4, 3, 5, 5}, DType::Float64);
  Tensor v = var(x, {0, 2, 3}, 0);
  Tensor m = mean(x, {0, 2, 3}, true);
  Tensor ref = mean(pow(x - m, 2.0), {0, 2, 3});
  expect_close(v, ref, 1e-12, 1e-14);
}

TEST(Max, ValuesAndFirstIndices) {
  Tensor x = f32({1, 5, 5, 7, 0, 7}, {2, 3});
  MaxResult r = max(x, 1);
  expect_equal(r.values, f32({5, 7}));
  expect_equal(r.indices, i64({1, 0}));
  MaxResult c = max(x, 0, true);
  expect_equal(c.values, f32({7, 5, 7}, {1, 3}));
  expect_equal(c.indices, i64({1, 0, 1}, {1, 3}));
  EXPECT_EQ(max(x).item(), 7.0);
  EXPECT_EQ(max(x).dim(), 0);
}

TEST(Max, NonContiguousAndInt64) {
  Tensor x = i64({3, 9, 4, 1}, {2, 2}).t();  // [[3, 4], [9, 1]]
  expect_equal(max(x, 1).values, i64({4, 9}));
  expect_equal(argmax(x, -1), i64({1, 0}));
  expect_equal(argmax(x, 0), i64({1, 0}));
}

TEST(Max, LongRowsSpanningManyChunks) {
  Tensor x = zeros({2, 10000});
  x.narrow(1, 7777, 1).fill_(3.0);
  x.narrow(1, 9000, 1).fill_(3.0);
  expect_equal(argmax(x, 1), i64({7777, 7777}));
}

TEST(Max, PropagatesNaN) {
  Tensor x = f32({1, NAN, 3});
  EXPECT_TRUE(std::isnan(max(x).item()));
  EXPECT_EQ(argmax(x, 0).item(), 1.0);
}

TEST(Max, Errors) {
  EXPECT_THROW_MSG(max(zeros({0})), std::invalid_argument, "max: cannot take the maximum of an empty tensor");
  EXPECT_THROW(max(zeros({2, 3}), 2), std::out_of_range);
}

TEST(TopK, IndicesLargestFirstTiesByLowerIndex) {
  Tensor x = f32({0.1f, 0.7f, 0.2f, 0.7f, 5, 4, 3, 2}, {2, 4});
  expect_equal(topk_indices(x, 3), i64({1, 3, 2, 0, 1, 2}, {2, 3}));
  EXPECT_THROW_MSG(topk_indices(x, 5), std::invalid_argument, "topk_indices: k = 5 out of range");
}
