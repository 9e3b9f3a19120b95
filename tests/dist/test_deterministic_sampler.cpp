// tests/dist/test_deterministic_sampler.cpp — the DistributedSampler features deterministic data
// parallelism and mid-epoch resume rely on: dealing the order in chunks (each rank's share of a
// global batch is one contiguous run of it, whatever the number of ranks) and starting an epoch
// at a given index. Known lists for small cases, then properties against a plain reference.
#include <numeric>

#include "minidl/dist/distributed_sampler.h"
#include "minidl/tensor/random.h"
#include "tests/common/testing.h"

using minidl::dist::DistributedSampler;
using minidl::dist::DistributedSamplerOptions;
using Indices = std::vector<int64_t>;

namespace {

Indices rank_indices(int64_t n, int world, int rank, DistributedSamplerOptions o, int64_t epoch = 0) {
  o.num_replicas = world;
  o.rank = rank;
  DistributedSampler s(n, o);
  s.set_epoch(epoch);
  Indices out = s.indices();
  EXPECT_EQ(static_cast<int64_t>(out.size()), s.size());
  return out;
}

// PyTorch's rule, written out: pad (or truncate) the order to ceil(N / R) * R, rank r takes r, r + R, ...
Indices torch_reference(const Indices& order, int world, int rank, bool drop_last) {
  const int64_t n = static_cast<int64_t>(order.size());
  const int64_t per = drop_last && n % world ? n / world : (n + world - 1) / world;
  Indices padded = order;
  for (size_t i = 0; static_cast<int64_t>(padded.size()) < per * world && n > 0; ++i)
    padded.push_back(order[i % order.size()]);
  padded.resize(static_cast<size_t>(per * world));
  Indices out;
  for (int64_t i = rank; i < per * world; i += world) out.push_back(padded[static_cast<size_t>(i)]);
  return out;
}

}  // namespace

TEST(DistributedSamplerChunks, ChunkOneIsPyTorchsInterleaving) {
  for (int64_t n : {0, 1, 5, 10, 17, 100})
    for (int world : {1, 2, 3, 4})
      for (bool drop_last : {false, true})
        for (int r = 0; r < world; ++r) {
          Indices order(static_cast<size_t>(n));
          std::iota(order.begin(), order.end(), int64_t{0});
          EXPECT_EQ(rank_indices(n, world, r, {.shuffle = false, .drop_last = drop_last}),
                    torch_reference(order, world, r, drop_last))
              << "n " << n << " world " << world << " rank " << r;
        }
  // shuffled: the permutation is randperm(N, {seed, epoch})
  const minidl::Tensor perm = minidl::randperm(17, minidl::RandomKey{5, 3});
  const Indices order(perm.data<int64_t>(), perm.data<int64_t>() + 17);
  EXPECT_EQ(rank_indices(17, 2, 1, {.shuffle = true, .seed = 5}, 3), torch_reference(order, 2, 1, false));
}

TEST(DistributedSamplerChunks, TenSamplesTwoRanksChunksOfThree) {
  // one whole round (0..5), then the last 4 split evenly: 2 consecutive per rank
  EXPECT_EQ(rank_indices(10, 2, 0, {.shuffle = false, .chunk = 3}), (Indices{0, 1, 2, 6, 7}));
  EXPECT_EQ(rank_indices(10, 2, 1, {.shuffle = false, .chunk = 3}), (Indices{3, 4, 5, 8, 9}));
}

TEST(DistributedSamplerChunks, ExactModeDealsTheLastRoundInChunksWhileEntriesLast) {
  const DistributedSamplerOptions o{.shuffle = false, .exact = true, .chunk = 2};
  EXPECT_EQ(rank_indices(10, 3, 0, o), (Indices{0, 1, 6, 7}));
  EXPECT_EQ(rank_indices(10, 3, 1, o), (Indices{2, 3, 8, 9}));
  EXPECT_EQ(rank_indices(10, 3, 2, o), (Indices{4, 5}));
  // every sample exactly once, for many sizes
  for (int64_t n : {0, 1, 7, 16, 33})
    for (int world : {1, 2, 4})
      for (int64_t c : {1, 3, 16}) {
        std::vector<int> seen(static_cast<size_t>(n), 0);
        for (int r = 0; r < world; ++r)
          for (int64_t i : rank_indices(n, world, r, {.shuffle = true, .seed = 1, .exact = true, .chunk = c}))
            ++seen[static_cast<size_t>(i)];
        for (int64_t i = 0; i < n; ++i)
          EXPECT_EQ(seen[static_cast<size_t>(i)], 1) << "n " << n << " world " << world << " c " << c;
      }
}

// The property deterministic mode needs: with chunk = B / R, rank r's t-th local batch is the
// r-th run of B / R entries of global batch t, so the global batches are the same runs of the
// epoch's order for every R.
TEST(DistributedSamplerChunks, GlobalBatchesAreTheSameRunsOfTheOrderForOneTwoAndFourRanks) {
  const int64_t n = 1000, B = 64;
  const Indices one = rank_indices(n, 1, 0, {.shuffle = true, .seed = 9}, 2);
  for (int world : {2, 4}) {
    const int64_t b = B / world;
    std::vector<Indices> mine;
    for (int r = 0; r < world; ++r)
      mine.push_back(rank_indices(n, world, r, {.shuffle = true, .seed = 9, .chunk = b}, 2));
    for (int64_t t = 0; t < n / B; ++t)
      for (int r = 0; r < world; ++r)
        for (int64_t j = 0; j < b; ++j)
          ASSERT_EQ(mine[static_cast<size_t>(r)][static_cast<size_t>(t * b + j)],
                    one[static_cast<size_t>(t * B + r * b + j)])
              << "world " << world << " step " << t << " rank " << r;
  }
}

TEST(DistributedSamplerStart, SkipsTheFirstIndicesUntilTheNextEpoch) {
  DistributedSampler s(100, {.num_replicas = 2, .rank = 1, .shuffle = true, .seed = 4, .chunk = 8});
  s.set_epoch(3);
  const Indices full = s.indices();
  s.set_start_index(24);
  EXPECT_EQ(s.size(), 26);
  EXPECT_EQ(s.indices(), Indices(full.begin() + 24, full.end()));
  s.set_start_index(50);
  EXPECT_TRUE(s.indices().empty());
  s.set_epoch(3);  // a new epoch (even the same one) starts at 0
  EXPECT_EQ(s.start_index(), 0);
  EXPECT_EQ(s.indices(), full);
  EXPECT_THROW_MSG(s.set_start_index(51), std::invalid_argument, "51 is outside this rank's 50 indices");
  EXPECT_THROW_MSG(DistributedSampler(10, {.num_replicas = 1, .rank = 0, .chunk = 0}), std::invalid_argument,
                   "chunk must be >= 1");
}
