// tests/data/test_dataset.cpp — TensorDataset rows and Subset index mapping.
#include "tests/common/testing.h"
#include "minidl/data/dataset.h"

namespace minidl::data {
namespace {

TEST(TensorDataset, GetReturnsRowsOfInputsAndTargets) {
  const auto ds = std::make_shared<TensorDataset>(arange(0, 12, 1, DType::Float32).view({4, 3}),
                                                  from_vector<int64_t>({5, 6, 7, 8}));
  EXPECT_EQ(ds->size(), 4);
  const Example ex = ds->get(2);
  EXPECT_EQ(ex.input.to_vector<float>(), (std::vector<float>{6, 7, 8}));
  EXPECT_EQ(ex.target.dim(), 0);
  EXPECT_EQ(ex.target.item<int64_t>(), 7);
  EXPECT_THROW_MSG(ds->get(4), std::out_of_range, "TensorDataset::get: index 4 out of range for a dataset of 4");
}

TEST(TensorDataset, DifferentExampleCountsAreAnError) {
  EXPECT_THROW_MSG(TensorDataset(zeros({4, 3}), zeros({3})), std::invalid_argument,
                   "have different numbers of examples (4 vs 3)");
}

TEST(Subset, MapsIndicesInOrder) {
  const auto base = std::make_shared<TensorDataset>(arange(0, 5, 1, DType::Float32).view({5, 1}), arange(5));
  const Subset sub(base, {4, 1, 1});
  EXPECT_EQ(sub.size(), 3);
  EXPECT_EQ(sub.get(0).target.item<int64_t>(), 4);
  EXPECT_EQ(sub.get(2).target.item<int64_t>(), 1);
  EXPECT_THROW_MSG(Subset(base, {0, 5}), std::out_of_range, "indices[1] = 5 out of range for a dataset of 5");
}

}  // namespace
}  // namespace minidl::data
