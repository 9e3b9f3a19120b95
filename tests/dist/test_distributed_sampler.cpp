// tests/dist/test_distributed_sampler.cpp — DistributedSampler (PyTorch semantics, exact mode)
// and DistributedBatchSampler (PaddlePaddle semantics): known lists for small cases, then
// properties over many (N, R, drop_last, shuffle, epoch) — sizes, coverage, disjointness up to
// padding, determinism, a new order each epoch. No processes needed: every rank is a sampler.
#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "minidl/data/dataloader.h"
#include "minidl/dist/distributed_sampler.h"
#include "tests/common/testing.h"

using minidl::dist::DistributedBatchSampler;
using minidl::dist::DistributedBatchSamplerOptions;
using minidl::dist::DistributedSampler;
using minidl::dist::DistributedSamplerOptions;
using Batches = std::vector<std::vector<int64_t>>;
using Indices = std::vector<int64_t>;

namespace {

std::vector<Indices> shards(int64_t n, int world, DistributedSamplerOptions options, int64_t epoch) {
  std::vector<Indices> out;
  for (int r = 0; r < world; ++r) {
    options.num_replicas = world;
    options.rank = r;
    DistributedSampler s(n, options);
    s.set_epoch(epoch);
    out.push_back(s.indices());
    EXPECT_EQ(static_cast<int64_t>(out.back().size()), s.size());
  }
  return out;
}

// Rank-interleaved concatenation: shard[0][0], shard[1][0], ..., shard[0][1], ... (the global order).
Indices interleave(const std::vector<Indices>& s) {
  Indices out;
  size_t longest = 0;
  for (const auto& x : s) longest = std::max(longest, x.size());
  for (size_t i = 0; i < longest; ++i)
    for (const auto& x : s)
      if (i < x.size()) out.push_back(x[i]);
  return out;
}

std::map<int64_t, int> multiplicity(const Indices& all) {
  std::map<int64_t, int> m;
  for (int64_t i : all) ++m[i];
  return m;
}

const std::vector<int64_t> kNs{0, 1, 2, 3, 5, 7, 10, 16, 17, 100, 101};
const std::vector<int> kWorlds{1, 2, 3, 4, 7, 8};

}  // namespace

TEST(DistributedSampler, TenSamplesOverThreeRanksPadWithTheHeadOfTheOrder) {
  auto s = shards(10, 3, {.shuffle = false}, 0);
  EXPECT_EQ(s[0], (Indices{0, 3, 6, 9}));
  EXPECT_EQ(s[1], (Indices{1, 4, 7, 0}));
  EXPECT_EQ(s[2], (Indices{2, 5, 8, 1}));
}

TEST(DistributedSampler, DropLastTruncatesToAMultipleOfTheWorld) {
  auto s = shards(10, 3, {.shuffle = false, .drop_last = true}, 0);
  EXPECT_EQ(s[0], (Indices{0, 3, 6}));
  EXPECT_EQ(s[1], (Indices{1, 4, 7}));
  EXPECT_EQ(s[2], (Indices{2, 5, 8}));
}

TEST(DistributedSampler, PaddingLongerThanTheDatasetRepeatsIt) {
  auto s = shards(2, 7, {.shuffle = false}, 0);  // total 7: 0 1 0 1 0 1 0
  EXPECT_EQ(interleave(s), (Indices{0, 1, 0, 1, 0, 1, 0}));
}

TEST(DistributedSampler, NumSamplesFollowsPyTorch) {
  for (int64_t n : kNs)
    for (int w : kWorlds) {
      DistributedSampler keep(n, {.num_replicas = w, .rank = 0});
      DistributedSampler drop(n, {.num_replicas = w, .rank = 0, .drop_last = true});
      EXPECT_EQ(keep.num_samples(), (n + w - 1) / w) << n << " " << w;
      // ceil((N - R) / R) as Python computes it (math.ceil of a float), when N % R != 0.
      int64_t expected = n % w != 0 ? static_cast<int64_t>(std::ceil(static_cast<double>(n - w) / w)) : n / w;
      EXPECT_EQ(drop.num_samples(), expected) << n << " " << w;
    }
}

TEST(DistributedSampler, PropertiesHoldForManyConfigurations) {
  for (int64_t n : kNs)
    for (int w : kWorlds)
      for (bool drop_last : {false, true})
        for (bool shuffle : {false, true})
          for (int64_t epoch : {0, 1, 5}) {
            SCOPED_TRACE("N=" + std::to_string(n) + " R=" + std::to_string(w) +
                         " drop_last=" + std::to_string(drop_last) + " shuffle=" + std::to_string(shuffle) +
                         " epoch=" + std::to_string(epoch));
            DistributedSamplerOptions o{.shuffle = shuffle, .seed = 7, .drop_last = drop_last};
            auto s = shards(n, w, o, epoch);
            const int64_t num_samples =
                DistributedSampler(n, {.num_replicas = w, .rank = 0, .drop_last = drop_last}).num_samples();
            for (const auto& x : s) ASSERT_EQ(static_cast<int64_t>(x.size()), num_samples) << "equal sizes";
            Indices all = interleave(s);
            auto m = multiplicity(all);
            for (auto [i, count] : m) ASSERT_TRUE(i >= 0 && i < n) << i;
            if (drop_last) {
              for (auto [i, count] : m) ASSERT_EQ(count, 1) << "drop_last: index " << i << " repeated";
              ASSERT_EQ(static_cast<int64_t>(all.size()), num_samples * w);
            } else {
              ASSERT_EQ(static_cast<int64_t>(m.size()), n) << "the union covers the dataset";
              // Duplicates only from padding: the first total - N entries of the order repeat.
              const int64_t pad = num_samples * w - n;
              ASSERT_EQ(static_cast<int64_t>(all.size()) - n, pad);
              Indices head(all.begin(), all.begin() + std::min<int64_t>(n, static_cast<int64_t>(all.size())));
              ASSERT_EQ(multiplicity(head).size(), head.size()) << "no duplicate before the padding";
              for (int64_t k = 0; k < pad; ++k)
                ASSERT_EQ(all[static_cast<size_t>(n + k)], all[static_cast<size_t>(k % n)]);
            }
            // Same (seed, epoch) -> same lists (what every rank computes independently).
            ASSERT_EQ(shards(n, w, o, epoch), s);
            if (!shuffle) {
              for (int64_t k = 0; k < std::min<int64_t>(n, static_cast<int64_t>(all.size())); ++k)
                ASSERT_EQ(all[static_cast<size_t>(k)], k);
            }
          }
}

TEST(DistributedSampler, ShufflingGivesANewOrderEachEpochAndPerSeed) {
  for (int64_t n : {10, 17, 100})
    for (int w : {1, 2, 3}) {
      auto e0 = interleave(shards(n, w, {.seed = 1}, 0));
      auto e1 = interleave(shards(n, w, {.seed = 1}, 1));
      auto other_seed = interleave(shards(n, w, {.seed = 2}, 0));
      EXPECT_NE(e0, e1) << n << " " << w;
      EXPECT_NE(e0, other_seed) << n << " " << w;
    }
  DistributedSampler s(100, {.num_replicas = 2, .rank = 1, .seed = 3});
  Indices first = s.indices();
  EXPECT_EQ(s.indices(), first) << "without set_epoch every epoch repeats one order";
  s.set_epoch(1);
  EXPECT_NE(s.indices(), first);
}

TEST(DistributedSampler, ExactModeSeesEverySampleExactlyOnce) {
  for (int64_t n : kNs)
    for (int w : kWorlds)
      for (bool shuffle : {false, true}) {
        auto s = shards(n, w, {.shuffle = shuffle, .exact = true}, 2);
        Indices all;
        int64_t smallest = n, largest = 0;
        for (const auto& x : s) {
          all.insert(all.end(), x.begin(), x.end());
          smallest = std::min<int64_t>(smallest, static_cast<int64_t>(x.size()));
          largest = std::max<int64_t>(largest, static_cast<int64_t>(x.size()));
        }
        std::sort(all.begin(), all.end());
        Indices expected(static_cast<size_t>(n));
        std::iota(expected.begin(), expected.end(), int64_t{0});
        EXPECT_EQ(all, expected) << n << " " << w;
        EXPECT_LE(largest - smallest, 1) << "shards differ by at most one sample";
      }
  // Uneven shards, rank r takes r, r + R, ...: 10 over 4 ranks -> 3, 3, 2, 2.
  auto s = shards(10, 4, {.shuffle = false, .exact = true}, 0);
  EXPECT_EQ(s[0], (Indices{0, 4, 8}));
  EXPECT_EQ(s[3], (Indices{3, 7}));
}

TEST(DistributedSampler, BadOptionsAreErrors) {
  EXPECT_THROW_MSG(DistributedSampler(10, {.num_replicas = 2, .rank = 2}), std::invalid_argument,
                   "rank 2 is out of range");
  EXPECT_THROW_MSG(DistributedSampler(10, {.num_replicas = 2, .rank = 0, .drop_last = true, .exact = true}),
                   std::invalid_argument, "drop_last");
  EXPECT_THROW_MSG(DistributedSampler(10, {}), std::runtime_error, "dist::init() has not been called");
}

// ---- DistributedBatchSampler ----

namespace {

std::vector<Batches> batch_shards(int64_t n, int world, DistributedBatchSamplerOptions o, int64_t epoch) {
  std::vector<Batches> out;
  for (int r = 0; r < world; ++r) {
    o.num_replicas = world;
    o.rank = r;
    out.push_back(DistributedBatchSampler(n, o).batches_for_epoch(epoch));
  }
  return out;
}

}  // namespace

TEST(DistributedBatchSampler, HandsOutWholeBatchesInTurnAndSplitsTheLastRoundEvenly) {
  // N = 10, R = 2, B = 2 (Paddle): rounds of 4, then 2 left: one each.
  auto s = batch_shards(10, 2, {.batch_size = 2}, 0);
  EXPECT_EQ(s[0], (Batches{{0, 1}, {4, 5}, {8}}));
  EXPECT_EQ(s[1], (Batches{{2, 3}, {6, 7}, {9}}));
  // N = 11, R = 3, B = 2: padded to 12 with index 0 before splitting.
  s = batch_shards(11, 3, {.batch_size = 2}, 0);
  EXPECT_EQ(s[0], (Batches{{0, 1}, {6, 7}}));
  EXPECT_EQ(s[1], (Batches{{2, 3}, {8, 9}}));
  EXPECT_EQ(s[2], (Batches{{4, 5}, {10, 0}}));
  // drop_last drops the last incomplete local batch.
  s = batch_shards(10, 2, {.batch_size = 2, .drop_last = true}, 0);
  EXPECT_EQ(s[0], (Batches{{0, 1}, {4, 5}}));
  EXPECT_EQ(s[1], (Batches{{2, 3}, {6, 7}}));
}

TEST(DistributedBatchSampler, PropertiesHoldForManyConfigurations) {
  for (int64_t n : kNs)
    for (int w : kWorlds)
      for (int64_t b : {1, 2, 3, 8})
        for (bool drop_last : {false, true})
          for (bool shuffle : {false, true}) {
            SCOPED_TRACE("N=" + std::to_string(n) + " R=" + std::to_string(w) + " B=" + std::to_string(b) +
                         " drop_last=" + std::to_string(drop_last) + " shuffle=" + std::to_string(shuffle));
            DistributedBatchSamplerOptions o{.batch_size = b, .shuffle = shuffle, .drop_last = drop_last, .seed = 5};
            auto s = batch_shards(n, w, o, 3);
            const int64_t num_samples = (n + w - 1) / w;
            Indices all;
            for (const auto& rank_batches : s) {
              int64_t count = 0;
              for (size_t k = 0; k < rank_batches.size(); ++k) {
                const auto& batch = rank_batches[k];
                ASSERT_FALSE(batch.empty());
                ASSERT_LE(static_cast<int64_t>(batch.size()), b);
                if (drop_last || k + 1 < rank_batches.size()) {
                  ASSERT_EQ(static_cast<int64_t>(batch.size()), b);
                }
                count += static_cast<int64_t>(batch.size());
                all.insert(all.end(), batch.begin(), batch.end());
              }
              ASSERT_EQ(count, drop_last ? num_samples / b * b : num_samples) << "equal sizes";
            }
            for (int64_t i : all) ASSERT_TRUE(i >= 0 && i < n);
            if (!drop_last) {
              // Together: the padded list 0..N-1 + head, as a multiset.
              Indices padded(static_cast<size_t>(n));
              std::iota(padded.begin(), padded.end(), int64_t{0});
              for (int64_t k = 0; static_cast<int64_t>(padded.size()) < num_samples * w; ++k) padded.push_back(k % n);
              std::sort(all.begin(), all.end());
              std::sort(padded.begin(), padded.end());
              ASSERT_EQ(all, padded);
            }
            ASSERT_EQ(batch_shards(n, w, o, 3), s) << "deterministic";
          }
}

TEST(DistributedBatchSampler, AdvancesItsEpochAfterEachShuffledPass) {
  DistributedBatchSampler s(50, {.batch_size = 4, .num_replicas = 2, .rank = 1, .shuffle = true});
  EXPECT_EQ(s.batches(), s.batches_for_epoch(0));
  EXPECT_EQ(s.epoch(), 1);
  Indices flat;
  for (const auto& b : s.batches_for_epoch(1)) flat.insert(flat.end(), b.begin(), b.end());
  EXPECT_EQ(s.indices(), flat) << "indices() is the next pass, flattened";
  EXPECT_EQ(s.epoch(), 2);
  EXPECT_NE(s.batches_for_epoch(0), s.batches_for_epoch(1));
  s.set_epoch(0);
  EXPECT_EQ(s.batches(), s.batches_for_epoch(0));
  DistributedBatchSampler fixed(50, {.batch_size = 4, .num_replicas = 2, .rank = 1});
  EXPECT_EQ(fixed.batches(), fixed.batches());
  EXPECT_EQ(fixed.epoch(), 0) << "without shuffle the epoch stays";
  EXPECT_EQ(fixed.num_batches(), 7);  // ceil(25 / 4)
}

TEST(DistributedBatchSampler, DrivesADataLoaderWithTheSameBatches) {
  using namespace minidl;
  auto dataset = std::make_shared<data::TensorDataset>(arange(23, DType::Float32), arange(23, DType::Int64));
  auto sampler = std::make_shared<dist::DistributedBatchSampler>(
      *dataset, dist::DistributedBatchSamplerOptions{.batch_size = 3, .num_replicas = 2, .rank = 1, .shuffle = true});
  const Batches epoch0 = sampler->batches_for_epoch(0), epoch1 = sampler->batches_for_epoch(1);
  data::DataLoader loader(dataset, {.batch_size = sampler->batch_size()}, sampler);
  EXPECT_EQ(loader.size(), sampler->num_batches());
  for (const Batches& expected : {epoch0, epoch1}) {  // the second pass reshuffles by itself
    Batches got;
    for (auto& batch : loader) got.push_back(batch.indices);
    EXPECT_EQ(got, expected);
  }
}
