// tests/tensor/test_ops_index.cpp — cat, stack, index_select, index_add, gather_rows.
#include "tests/common/testing.h"

using namespace minidl;
using minidl::testing::expect_equal;

namespace {
Tensor f32(std::vector<float> v, Shape s = {}) { return from_vector<float>(v, s); }
Tensor i64(std::vector<int64_t> v, Shape s = {}) { return from_vector<int64_t>(v, s); }
}  // namespace

TEST(Cat, AlongDim0AndDim1) {
  Tensor a = f32({1, 2, 3, 4}, {2, 2}), b = f32({5, 6}, {1, 2});
  expect_equal(cat({a, b}, 0), f32({1, 2, 3, 4, 5, 6}, {3, 2}));
  Tensor c = f32({7, 8}, {2, 1});
  expect_equal(cat({a, c}, -1), f32({1, 2, 7, 3, 4, 8}, {2, 3}));
}

TEST(Cat, Int64AndNonContiguousAndEmpty) {
  Tensor a = i64({1, 2, 3, 4}, {2, 2}).t();  // [[1, 3], [2, 4]]
  Tensor e = zeros({0, 2}, DType::Int64);
  expect_equal(cat({a, e, a}, 0), i64({1, 3, 2, 4, 1, 3, 2, 4}, {4, 2}));
}

TEST(Cat, Errors) {
  EXPECT_THROW_MSG(cat({zeros({2, 2}), zeros({2, 3})}, 0), std::invalid_argument,
                   "cat: tensor 1 has shape [2, 3], expected [2, 2] except in dim 0");
  EXPECT_THROW_MSG(cat({zeros({2}), zeros({2}, DType::Int64)}, 0), std::invalid_argument, "cat: dtype mismatch");
  EXPECT_THROW_MSG(cat({}, 0), std::invalid_argument, "cat: expected a non-empty list");
}

TEST(Stack, NewDimAnywhere) {
  Tensor a = f32({1, 2}), b = f32({3, 4});
  expect_equal(stack({a, b}, 0), f32({1, 2, 3, 4}, {2, 2}));
  expect_equal(stack({a, b}, 1), f32({1, 3, 2, 4}, {2, 2}));
  expect_equal(stack({a, b}, -1), f32({1, 3, 2, 4}, {2, 2}));
  EXPECT_THROW_MSG(stack({a, zeros({3})}, 0), std::invalid_argument, "stack: tensor 1 has shape [3]");
}

TEST(IndexSelect, RowsWithRepeatsAndColumns) {
  Tensor x = arange(0, 6, 1, DType::Float32).reshape({3, 2});
  expect_equal(index_select(x, 0, i64({2, 0, 2})), f32({4, 5, 0, 1, 4, 5}, {3, 2}));
  expect_equal(index_select(x, 1, i64({1})), f32({1, 3, 5}, {3, 1}));
  expect_equal(index_select(arange(5), 0, i64({4, 1})), i64({4, 1}));
}

TEST(IndexSelect, NonContiguousInput) {
  Tensor x = arange(0, 6, 1, DType::Float32).reshape({2, 3}).t();  // [[0,3],[1,4],[2,5]]
  expect_equal(index_select(x, 0, i64({2, 1})), f32({2, 5, 1, 4}, {2, 2}));
}

TEST(IndexSelect, Errors) {
  EXPECT_THROW_MSG(index_select(zeros({3}), 0, i64({3})), std::out_of_range, "index_select: index 3 out of range");
  EXPECT_THROW_MSG(index_select(zeros({3}), 0, f32({0})), std::invalid_argument, "index must be int64");
}

TEST(IndexAdd, AccumulatesDuplicatesAndIsTheBackwardOfIndexSelect) {
  Tensor src = f32({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor out = index_add({3, 2}, 0, i64({2, 0, 2}), src);
  expect_equal(out, f32({3, 4, 0, 0, 6, 8}, {3, 2}));
  expect_equal(index_add({2, 3}, 1, i64({0, 0}), f32({1, 2, 3, 4}, {2, 2})), f32({3, 0, 0, 7, 0, 0}, {2, 3}));
  EXPECT_THROW_MSG(index_add({3, 2}, 0, i64({0}), src), std::invalid_argument, "index_add: src has shape [3, 2]");
}

TEST(GatherRows, PicksTargetColumn) {
  Tensor x = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  expect_equal(gather_rows(x, i64({2, 0})), f32({3, 4}));
  expect_equal(gather_rows(x.t().contiguous().t(), i64({1, 1})), f32({2, 5}));
  EXPECT_THROW_MSG(gather_rows(x, i64({3, 0})), std::out_of_range, "gather_rows: target 3 out of range");
  EXPECT_THROW_MSG(gather_rows(x, i64({0})), std::invalid_argument, "gather_rows: target must be int64 of shape [2]");
}
