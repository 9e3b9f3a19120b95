// tests/tensor/test_tensor_core.cpp — Tensor metadata, views without copies, printing, errors.
#include "tests/common/testing.h"

using namespace minidl;
using minidl::testing::expect_equal;

TEST(TensorCore, ContiguousStridesAreRowMajor) {
  Tensor t = zeros({2, 3, 4});
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(t.numel(), 24);
  EXPECT_TRUE(t.is_contiguous());
  // an empty tensor is contiguous whatever its strides, as in PyTorch: the strides a new (40, 0)
  // tensor gets, and a (300, 0) slice of a wider matrix
  EXPECT_TRUE(zeros({40, 0}).is_contiguous());
  EXPECT_TRUE(zeros({300, 24}).narrow(1, 0, 0).is_contiguous());
}

TEST(TensorCore, TransposeIsAViewSharingStorage) {
  Tensor a = arange(6).reshape({2, 3});
  Tensor b = a.transpose(0, 1);
  EXPECT_EQ(b.shape(), (Shape{3, 2}));
  EXPECT_EQ(b.strides(), (Shape{1, 3}));
  EXPECT_EQ(b.storage(), a.storage());
  EXPECT_FALSE(b.is_contiguous());
  EXPECT_EQ(b.to_vector<int64_t>(), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
}

TEST(TensorCore, ReshapeCopiesOnlyWhenStridesForbidAView) {
  Tensor a = arange(12).reshape({3, 4});
  EXPECT_EQ(a.reshape({2, 6}).storage(), a.storage());
  Tensor t = a.t();
  Tensor r = t.reshape({12});
  EXPECT_NE(r.storage(), a.storage());
  EXPECT_EQ(r.to_vector<int64_t>(), (std::vector<int64_t>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  EXPECT_THROW_MSG(t.view({12}), std::invalid_argument, "use reshape()");
}

TEST(TensorCore, ViewInfersMinusOne) {
  Tensor a = arange(24).view({2, -1, 4});
  EXPECT_EQ(a.shape(), (Shape{2, 3, 4}));
  EXPECT_THROW_MSG(a.view({5, -1}), std::invalid_argument, "[5, -1] is invalid for input of shape [2, 3, 4]");
}

TEST(TensorCore, ZeroDimTensorsReshapeToOneElement) {
  Tensor s = scalar_tensor(3.0);
  EXPECT_EQ(s.view({1}).shape(), (Shape{1}));
  EXPECT_EQ(s.reshape({1, 1}).storage(), s.storage());
  EXPECT_EQ(full({1}, 2.0).view({}).dim(), 0);
}

TEST(TensorCore, NarrowSliceSelectOffsets) {
  Tensor a = arange(20).reshape({4, 5});
  EXPECT_EQ(a.narrow(1, 1, 2).to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 6, 7, 11, 12, 16, 17}));
  EXPECT_EQ(a.slice(0, 0, 4, 2).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4, 10, 11, 12, 13, 14}));
  EXPECT_EQ(a.select(1, -1).to_vector<int64_t>(), (std::vector<int64_t>{4, 9, 14, 19}));
  EXPECT_EQ(a[2].to_vector<int64_t>(), (std::vector<int64_t>{10, 11, 12, 13, 14}));
}

TEST(TensorCore, ExpandUsesZeroStrides) {
  Tensor a = arange(3).reshape({3, 1});
  Tensor e = a.expand({2, 3, 4});
  EXPECT_EQ(e.strides(), (Shape{0, 1, 0}));
  EXPECT_EQ(e.contiguous().to_vector<int64_t>()[5], 1);
  EXPECT_THROW_MSG(a.expand({3, 2, 2}), std::invalid_argument, "cannot expand");
}

TEST(TensorCore, SqueezeUnsqueeze) {
  Tensor a = zeros({2, 1, 3});
  EXPECT_EQ(a.squeeze().shape(), (Shape{2, 3}));
  EXPECT_EQ(a.squeeze(1).shape(), (Shape{2, 3}));
  EXPECT_EQ(a.squeeze(0).shape(), (Shape{2, 1, 3}));
  EXPECT_EQ(a.unsqueeze(-1).shape(), (Shape{2, 1, 3, 1}));
  EXPECT_EQ(a.unsqueeze(0).shape(), (Shape{1, 2, 1, 3}));
}

TEST(TensorCore, PermuteRejectsRepeatedDims) {
  Tensor a = zeros({2, 3, 4});
  EXPECT_EQ(a.permute({2, 0, 1}).shape(), (Shape{4, 2, 3}));
  EXPECT_THROW_MSG(a.permute({0, 0, 1}), std::invalid_argument, "repeated dim");
  EXPECT_THROW_MSG(a.permute({0, 1}), std::invalid_argument, "permute: got 2 dims");
}

TEST(TensorCore, BadDimNamesOpAndRange) {
  Tensor a = zeros({2, 3});
  EXPECT_THROW_MSG(a.transpose(0, 2), std::out_of_range, "transpose: dimension 2 out of range for a 2-d tensor");
  EXPECT_THROW_MSG(a.select(0, 2), std::out_of_range, "select: index 2 out of range for dim 0 of size 2");
  EXPECT_THROW_MSG(a.narrow(1, 2, 2), std::out_of_range, "narrow: start 2 + length 2 exceeds size 3");
}

TEST(TensorCore, DtypeMismatchInDataAccessor) {
  Tensor a = zeros({2});
  EXPECT_THROW_MSG(a.data<double>(), std::invalid_argument, "tensor is float32, requested float64");
}

TEST(TensorCore, ItemOnlyForOneElement) {
  EXPECT_DOUBLE_EQ(full({1, 1}, 2.5).item(), 2.5);
  EXPECT_THROW_MSG(zeros({2}).item(), std::invalid_argument, "only one-element tensors");
}

TEST(TensorCore, CopyConvertsDtypeAndBroadcasts) {
  Tensor d = zeros({2, 3}, DType::Float64);
  d.copy_(from_vector<int64_t>({1, 2, 3}));
  EXPECT_EQ(d.to_vector<double>(), (std::vector<double>{1, 2, 3, 1, 2, 3}));
  expect_equal(arange(4).to(DType::Float32), from_vector<float>({0, 1, 2, 3}));
}

TEST(TensorCore, PrintsLikePyTorch) {
  EXPECT_EQ(from_vector<float>({1, -2.5f, 3, 4}, {2, 2}).to_string(),
            "tensor([[ 1.0000, -2.5000],\n        [ 3.0000,  4.0000]])");
  EXPECT_EQ(arange(3).to_string(), "tensor([0, 1, 2])");
  EXPECT_EQ(scalar_tensor(0.5, DType::Float64).to_string(), "tensor(0.5000, dtype=float64)");
}

TEST(TensorCore, ArangeAndFull) {
  EXPECT_EQ(arange(0.0, 1.0, 0.25, DType::Float32).to_vector<float>(), (std::vector<float>{0, 0.25f, 0.5f, 0.75f}));
  EXPECT_EQ(full({2}, 7, DType::UInt8).to_vector<int>(), (std::vector<int>{7, 7}));
  EXPECT_THROW_MSG(from_vector<float>({1, 2, 3}, {2, 2}), std::invalid_argument, "3 values do not fill shape [2, 2]");
}
