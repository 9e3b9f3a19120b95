// examples/trainer/test_metrics.cpp — unit tests of the trainer's metrics (trainer/metrics.h):
// top-1 / top-5 hits on hand-made logits, the sums all-reduced over ranks with uneven shards (the
// global accuracy is hits / samples over every rank, not a mean of the ranks' accuracies), the
// device-side sums (DeviceTotals, OrderedTotals) against the host counts of Totals::add, and the
// metrics.jsonl line (and its error when the file cannot be opened). Built as
// `test_trainer_metrics`, run by ctest.
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "minidl/dist/distributed.h"
#include "minidl/dist/spawn.h"
#include "examples/trainer/metrics.h"
#include "minidl/tensor/tensor_all.h"

using minidl::Tensor;

namespace {

// logits (B, 7): row i ranks class order[i][0] first, order[i][1] second, ...
Tensor ranked_logits(const std::vector<std::vector<int64_t>>& order) {
  const int64_t B = static_cast<int64_t>(order.size()), C = 7;
  std::vector<float> v(static_cast<size_t>(B * C), -10.0f);
  for (int64_t i = 0; i < B; ++i)
    for (size_t j = 0; j < order[static_cast<size_t>(i)].size(); ++j)
      v[static_cast<size_t>(i * C + order[static_cast<size_t>(i)][j])] = 5.0f - static_cast<float>(j);
  return minidl::from_vector<float>(v, {B, C});
}

Tensor labels(const std::vector<int64_t>& y) {
  return minidl::from_vector<int64_t>(y, {static_cast<int64_t>(y.size())});
}

}  // namespace

TEST(TrainerMetrics, CountsTop1AndTop5HitsAndWeightsTheLossBySamples) {
  // best-first class orders; the target sits at rank 1, 2, 5, 6 (missed by top-5) and 1
  const Tensor logits = ranked_logits({{3, 0, 1, 2, 4, 5, 6},
                                       {0, 6, 1, 2, 3, 4, 5},
                                       {1, 2, 3, 4, 5, 6, 0},
                                       {1, 2, 3, 4, 5, 6, 0},
                                       {2, 0, 1, 3, 4, 5, 6}});
  trainer::Totals t;
  t.add(logits, labels({3, 6, 5, 6, 2}), /*mean_loss=*/0.8);
  EXPECT_EQ(t.correct1, 2);  // rows 0 and 4
  EXPECT_EQ(t.correct5, 4);  // all but row 3, whose target is 6th
  EXPECT_EQ(t.count, 5);
  EXPECT_DOUBLE_EQ(t.loss_sum, 4.0);
  // a second batch of 2, mean loss 2.0: one top-1 hit, both in the top 5
  t.add(ranked_logits({{4, 3, 2, 1, 0, 5, 6}, {0, 1, 2, 3, 4, 5, 6}}), labels({4, 2}), 2.0);
  EXPECT_EQ(t.correct1, 3);
  EXPECT_EQ(t.correct5, 6);
  EXPECT_DOUBLE_EQ(t.loss(), (0.8 * 5 + 2.0 * 2) / 7);  // per sample, not per batch
  EXPECT_DOUBLE_EQ(t.acc1(), 100.0 * 3 / 7);
  EXPECT_DOUBLE_EQ(t.acc5(), 100.0 * 6 / 7);
  EXPECT_EQ(trainer::Totals{}.acc1(), 0.0);  // nothing counted: 0, not NaN
}

TEST(TrainerMetrics, FewerThanFiveClassesMakeTop5AlwaysHit) {
  trainer::Totals t;
  t.add(minidl::from_vector<float>({0.1f, 0.9f, 0.5f, 0.2f, 0.3f, 0.1f}, {2, 3}), labels({0, 2}),
        1.0);  // top-1: classes 1 and 1
  EXPECT_EQ(t.correct1, 0);
  EXPECT_EQ(t.correct5, 2);
}

TEST(TrainerMetrics, AllReducedSumsGiveTheAccuracyOfAllSamplesAcrossUnevenRanks) {
  // rank 0: 1 sample, a hit, loss 3; rank 1: 3 samples, no hit, loss 1 each; rank 2: 4 samples,
  // 2 hits, loss 0.5. Global: 3 hits of 8 (37.5%, where the mean of the ranks' accuracies is
  // (100 + 0 + 50) / 3 = 50%), loss (3 + 3 + 2) / 8 = 1.
  const auto results = minidl::dist::spawn_with_results(3, [](int rank) {
    minidl::dist::init({.backend = "gloo", .timeout = std::chrono::seconds(30)});
    trainer::Totals t;
    const auto miss = std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6};  // class 0 first
    if (rank == 0) t.add(ranked_logits({miss}), labels({0}), 3.0);
    if (rank == 1) t.add(ranked_logits({miss, miss, miss}), labels({1, 1, 6}), 1.0);
    if (rank == 2) t.add(ranked_logits({miss, miss, miss, miss}), labels({0, 0, 2, 5}), 0.5);
    const trainer::Totals g = t.all_reduced();
    char buf[128];
    std::snprintf(buf, sizeof buf, "%g %g %g %g | %.4f %.4f %.4f", g.count, g.correct1, g.correct5, g.loss_sum,
                  g.acc1(), g.acc5(), g.loss());
    minidl::dist::barrier();
    minidl::dist::shutdown();
    return std::string(buf);
  });
  // top-5 hits: rank 0 1, rank 1 2 (class 6 is 7th), rank 2 3 (class 5 is 6th): 6 of 8
  for (const auto& r : results) EXPECT_EQ(r, "8 3 6 8 | 37.5000 75.0000 1.0000");
}

// Batch i of a stream with many ties: logits are small integers (B, C), so equal logits compete
// for the top places and topk_indices' tie rule (the lower class first) decides hits.
struct TiedBatch {
  Tensor logits, target;
  double mean_loss;
};
TiedBatch tied_batch(int64_t i, int64_t B, int64_t C) {
  const minidl::RandomKey key{77, static_cast<uint64_t>(i)};
  return {minidl::randint(0, 4, {B, C}, key).to(minidl::DType::Float32),
          minidl::randint(0, C, {B}, minidl::RandomKey{78, static_cast<uint64_t>(i)}),
          0.1 + 0.37 * static_cast<double>(i)};
}

TEST(TrainerMetrics, DeviceTotalsEqualTheHostCountsToTheBitWithoutReadingPerBatch) {
  for (const int64_t C : {10, 3}) {  // 3: fewer classes than 5, every target in the "top 5"
    trainer::Totals host{.loss_sum = 1.25, .correct1 = 2, .correct5 = 3, .count = 4};  // a resumed start
    trainer::DeviceTotals device(minidl::Device::cpu(), host);
    const uint64_t before = minidl::host_read_count();
    for (int64_t i = 0; i < 6; ++i) {
      const TiedBatch b = tied_batch(i, 7 + i, C);
      host.add(b.logits, b.target, static_cast<double>(static_cast<float>(b.mean_loss)));
      device.add(b.logits, b.target, minidl::scalar_tensor(b.mean_loss));  // float32, as a loss is
    }
    EXPECT_EQ(minidl::host_read_count(), before) << "DeviceTotals::add reads nothing back";
    const uint64_t mark = minidl::host_read_count();
    const trainer::Totals got = device.read();
    EXPECT_EQ(minidl::host_read_count() - mark, 1u) << "read() is one host read";
    EXPECT_EQ(got.correct1, host.correct1) << C;
    EXPECT_EQ(got.correct5, host.correct5) << C;
    EXPECT_EQ(got.count, host.count) << C;
    EXPECT_EQ(got.loss_sum, host.loss_sum) << C;  // the same double arithmetic, bit for bit
    EXPECT_GT(host.correct1, 2);
    if (C == 3) {
      EXPECT_EQ(got.correct5 - 3, got.count - 4);  // every new sample a top-5 hit
    } else {
      EXPECT_LT(host.correct5, host.count);
    }
  }
}

TEST(TrainerMetrics, OrderedTotalsFromTheDeviceFoldToTheHostSumsInOrdinalOrder) {
  const auto results = minidl::dist::spawn_with_results(1, [](int) {
    minidl::dist::init({.backend = "gloo", .timeout = std::chrono::seconds(30)});
    trainer::OrderedTotals ordered;
    trainer::Totals expected;  // the shards added on the host in ordinal order
    const std::vector<int64_t> ordinals = {3, 0, 2, 1};
    std::vector<trainer::Totals> per(4);
    for (const int64_t o : ordinals) {
      const TiedBatch b = tied_batch(o, 5, 10);
      per[static_cast<size_t>(o)].add(b.logits, b.target, static_cast<double>(static_cast<float>(b.mean_loss)));
      ordered.add(o, b.logits, b.target, minidl::scalar_tensor(b.mean_loss));
    }
    for (const auto& t : per) {
      expected.loss_sum += t.loss_sum;
      expected.correct1 += t.correct1;
      expected.correct5 += t.correct5;
      expected.count += t.count;
    }
    const trainer::Totals local = ordered.local();
    const trainer::Totals got = ordered.fold();
    minidl::dist::shutdown();
    const bool same = got.loss_sum == expected.loss_sum && got.correct1 == expected.correct1 &&
                      got.correct5 == expected.correct5 && got.count == expected.count;
    char buf[128];
    std::snprintf(buf, sizeof buf, "%s count %g local count %g", same ? "equal" : "DIFFERENT", got.count, local.count);
    return std::string(buf);
  });
  EXPECT_EQ(results[0], "equal count 20 local count 20");
}

TEST(TrainerMetrics, AppendsOneJsonLinePerEpoch) {
  const std::string path = ::testing::TempDir() + "trainer_metrics_test.jsonl";
  std::filesystem::remove(path);
  trainer::EpochRecord r{.epoch = 3,
                         .lr = 0.05,
                         .train = {.loss_sum = 12.0, .correct1 = 6, .correct5 = 8, .count = 8},
                         .val = {.loss_sum = 2.0, .correct1 = 3, .correct5 = 4, .count = 4},
                         .images_per_s = 1234.5,
                         .seconds = 10.0,
                         .world_size = 2};
  trainer::append_metrics_line(path, r);
  r.epoch = 4;
  trainer::append_metrics_line(path, r);
  std::ifstream in(path);
  std::string first, second, extra;
  ASSERT_TRUE(std::getline(in, first) && std::getline(in, second));
  EXPECT_FALSE(std::getline(in, extra)) << "one line per call";
  const auto j = nlohmann::json::parse(first);
  EXPECT_EQ(j.at("epoch"), 3);
  EXPECT_DOUBLE_EQ(j.at("lr").get<double>(), 0.05);
  EXPECT_DOUBLE_EQ(j.at("train_loss").get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(j.at("train_acc1").get<double>(), 75.0);
  EXPECT_DOUBLE_EQ(j.at("val_loss").get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j.at("val_acc1").get<double>(), 75.0);
  EXPECT_DOUBLE_EQ(j.at("val_acc5").get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(j.at("images_per_s").get<double>(), 1234.5);
  EXPECT_EQ(j.at("world_size"), 2);
  EXPECT_EQ(nlohmann::json::parse(second).at("epoch"), 4);
  std::filesystem::remove(path);
}

TEST(TrainerMetrics, AFileThatCannotBeOpenedSaysWhyAndAProcessOutOfDescriptorsSaysSo) {
  const std::string path = ::testing::TempDir() + "trainer_metrics_no_fd.jsonl";
  try {
    // In a child (spawn) whose descriptor limit is the lowest free descriptor: no file opens.
    minidl::dist::spawn(1, [&](int) {
      const int lowest_free = ::dup(0);
      ::close(lowest_free);
      rlimit limit{};
      ::getrlimit(RLIMIT_NOFILE, &limit);
      limit.rlim_cur = static_cast<rlim_t>(lowest_free);
      ::setrlimit(RLIMIT_NOFILE, &limit);
      trainer::append_metrics_line(path, trainer::EpochRecord{});
    });
    FAIL() << "expected the append to fail";
  } catch (const minidl::dist::SpawnError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("cannot open " + path +
                           " to append to it: this process is out of file descriptors (Too many open files; its "
                           "limit is "),
              std::string::npos)
        << message;
  }
}
