// tests/data/test_sampler.cpp — sequential order, keyed random permutations per epoch, batching.
#include <algorithm>
#include <numeric>

#include "tests/common/testing.h"
#include "minidl/data/sampler.h"

namespace minidl::data {
namespace {

bool is_permutation_of_range(std::vector<int64_t> v, int64_t n) {
  std::sort(v.begin(), v.end());
  std::vector<int64_t> want(static_cast<size_t>(n));
  std::iota(want.begin(), want.end(), int64_t{0});
  return v == want;
}

TEST(SequentialSampler, YieldsZeroToNMinusOneEveryEpoch) {
  SequentialSampler s(5);
  EXPECT_EQ(s.size(), 5);
  EXPECT_EQ(s.indices(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  s.set_epoch(3);
  EXPECT_EQ(s.epoch(), 3);
  EXPECT_EQ(s.indices(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(RandomSampler, IsAPermutationDifferentPerEpochSameForSameSeed) {
  RandomSampler a(100, 42), b(100, 42), c(100, 43);
  const std::vector<int64_t> e0 = a.indices();
  EXPECT_TRUE(is_permutation_of_range(e0, 100));
  EXPECT_NE(e0, SequentialSampler(100).indices());
  EXPECT_EQ(e0, a.indices()) << "same epoch, same order";
  EXPECT_EQ(e0, b.indices()) << "same seed, same order";
  EXPECT_NE(e0, c.indices()) << "different seed";
  a.set_epoch(1);
  const std::vector<int64_t> e1 = a.indices();
  EXPECT_TRUE(is_permutation_of_range(e1, 100));
  EXPECT_NE(e0, e1) << "new epoch, new order";
  b.set_epoch(1);
  EXPECT_EQ(e1, b.indices());
}

TEST(RandomSampler, MatchesRandpermKeyedBySeedAndEpoch) {
  RandomSampler s(10, 7);
  s.set_epoch(4);
  EXPECT_EQ(s.indices(), randperm(10, RandomKey{7, 4}).to_vector<int64_t>());
}

TEST(RandomSampler, StartIndexSkipsTheConsumedHeadOfTheEpoch) {
  RandomSampler s(10, 7);
  s.set_epoch(2);
  const std::vector<int64_t> full = randperm(10, RandomKey{7, 2}).to_vector<int64_t>();
  s.set_start_index(4);
  EXPECT_EQ(s.start_index(), 4);
  EXPECT_EQ(s.size(), 6);
  EXPECT_EQ(s.indices(), std::vector<int64_t>(full.begin() + 4, full.end()));
  s.set_start_index(10);
  EXPECT_EQ(s.size(), 0);
  EXPECT_TRUE(s.indices().empty());
  s.set_epoch(3);  // a new epoch starts from its beginning
  EXPECT_EQ(s.start_index(), 0);
  EXPECT_EQ(s.indices(), randperm(10, RandomKey{7, 3}).to_vector<int64_t>());
  EXPECT_THROW_MSG(s.set_start_index(11), std::invalid_argument, "set_start_index: 11 is outside the 10 indices");
  EXPECT_THROW_MSG(s.set_start_index(-1), std::invalid_argument, "set_start_index: -1 is outside");
}

TEST(RandomSampler, StateDictRestoresEpochAndPosition) {
  RandomSampler a(10, 7);
  a.set_epoch(5);
  a.set_start_index(3);
  const TensorMap state = a.state_dict();
  EXPECT_EQ(state.at("epoch").to_vector<int64_t>(), std::vector<int64_t>{5});
  EXPECT_EQ(state.at("start_index").to_vector<int64_t>(), std::vector<int64_t>{3});
  RandomSampler b(10, 7);
  b.load_state_dict(state);
  EXPECT_EQ(b.epoch(), 5);
  EXPECT_EQ(b.indices(), a.indices());
  EXPECT_EQ(b.indices().size(), 7u);
  EXPECT_THROW_MSG(b.load_state_dict({{"epoch", state.at("epoch")}}), std::invalid_argument,
                   "missing key 'start_index'");
  RandomSampler small(2, 7);
  EXPECT_THROW_MSG(small.load_state_dict(state), std::invalid_argument, "0 <= 'start_index' <= 2");
  EXPECT_EQ(small.epoch(), 0);  // unchanged by the refused dict
}

TEST(BatchSampler, KeepsTheShortLastBatchUnlessDropLast) {
  auto seq = std::make_shared<SequentialSampler>(10);
  const BatchSampler keep(seq, {.batch_size = 4});
  EXPECT_EQ(keep.size(), 3);
  EXPECT_EQ(keep.batches(), (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
  const BatchSampler drop(seq, {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(drop.size(), 2);
  EXPECT_EQ(drop.batches(), (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(BatchSampler(seq, {.batch_size = 5, .drop_last = true}).size(), 2);
  EXPECT_EQ(BatchSampler(seq, {.batch_size = 11, .drop_last = true}).size(), 0);
}

TEST(BatchSampler, FollowsTheSamplersEpoch) {
  auto rnd = std::make_shared<RandomSampler>(9, 1);
  BatchSampler bs(rnd, {.batch_size = 3});
  bs.set_epoch(2);
  const auto batches = bs.batches();
  const std::vector<int64_t> perm = randperm(9, RandomKey{1, 2}).to_vector<int64_t>();
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[1], (std::vector<int64_t>{perm[3], perm[4], perm[5]}));
}

TEST(BatchSampler, BatchSizeBelowOneIsAnError) {
  EXPECT_THROW_MSG(BatchSampler(std::make_shared<SequentialSampler>(3), {.batch_size = 0}), std::invalid_argument,
                   "batch_size must be >= 1, got 0");
}

}  // namespace
}  // namespace minidl::data
