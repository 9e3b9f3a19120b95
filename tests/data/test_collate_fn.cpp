// tests/data/test_collate_fn.cpp — DataLoaderOptions::collate_fn: a collate that pads
// variable-length sequences to the longest in the batch (with their lengths as the target), the
// same batches with and without worker threads, the loader's indices, and the error it raises.
#include "minidl/data/dataloader.h"
#include "tests/common/testing.h"

namespace minidl::data {
namespace {

using minidl::testing::expect_equal;

// Example i: input float32 (i % 3 + 1) holding 10 i + 1, 10 i + 2, ...; target int64 i.
class Sequences : public Dataset {
 public:
  int64_t size() const override { return 5; }
  Example get(int64_t i) const override {
    const int64_t len = i % 3 + 1;
    std::vector<float> v(static_cast<size_t>(len));
    for (int64_t k = 0; k < len; ++k) v[static_cast<size_t>(k)] = static_cast<float>(10 * i + k + 1);
    return {from_vector(v, {len}), scalar_tensor(static_cast<double>(i), DType::Int64)};
  }
};

// inputs padded with zeros to (B, longest); target: the lengths (B)
Batch pad_collate(const std::vector<Example>& examples) {
  int64_t longest = 0;
  for (const Example& e : examples) longest = std::max(longest, e.input.size(0));
  const int64_t B = static_cast<int64_t>(examples.size());
  Batch b;
  b.input = zeros({B, longest});
  b.target = Tensor({B}, DType::Int64);
  for (int64_t j = 0; j < B; ++j) {
    const Tensor& in = examples[static_cast<size_t>(j)].input;
    b.input.select(0, j).narrow(0, 0, in.size(0)).copy_(in);
    b.target.data<int64_t>()[j] = in.size(0);
  }
  return b;
}

TEST(CollateFn, PadsVariableLengthExamplesPerBatch) {
  for (int workers : {0, 2}) {
    SCOPED_TRACE("num_workers " + std::to_string(workers));
    DataLoader loader(std::make_shared<Sequences>(),
                      {.batch_size = 3, .num_workers = workers, .collate_fn = pad_collate});
    std::vector<Batch> batches;
    for (auto& b : loader) batches.push_back(b);
    ASSERT_EQ(batches.size(), 2u);
    // examples 0, 1, 2 have lengths 1, 2, 3; examples 3, 4 lengths 1, 2
    expect_equal(batches[0].input, from_vector<float>({1, 0, 0, 11, 12, 0, 21, 22, 23}, {3, 3}));
    expect_equal(batches[0].target, from_vector<int64_t>({1, 2, 3}, {3}));
    expect_equal(batches[1].input, from_vector<float>({31, 0, 41, 42}, {2, 2}));
    expect_equal(batches[1].target, from_vector<int64_t>({1, 2}, {2}));
    EXPECT_EQ(batches[1].indices, (std::vector<int64_t>{3, 4}));  // set by the loader
    EXPECT_EQ(batches[1].index, 1);
  }
}

TEST(CollateFn, DefaultStackingRefusesTheSameExamples) {
  DataLoader loader(std::make_shared<Sequences>(), {.batch_size = 3});
  EXPECT_THROW(
      {
        try {
          loader.next();
        } catch (const std::invalid_argument& e) {
          EXPECT_NE(std::string(e.what()).find("collate: example 1"), std::string::npos) << e.what();
          throw;
        }
      },
      std::invalid_argument);
}

TEST(CollateFn, PinMemoryWithACollateFnIsRefused) {
  EXPECT_THROW(
      {
        try {
          DataLoader loader(std::make_shared<Sequences>(), {.pin_memory = true, .collate_fn = pad_collate});
        } catch (const std::invalid_argument& e) {
          EXPECT_NE(std::string(e.what()).find("collate_fn"), std::string::npos) << e.what();
          throw;
        }
      },
      std::invalid_argument);
}

}  // namespace
}  // namespace minidl::data
