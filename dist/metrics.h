// dist/metrics.h — metrics across ranks: reduce_dict (as in PaddleViT's utils) and exact
// weighted averages for evaluation.
//
//   auto logged = dist::reduce_dict({{"loss", loss}, {"acc", acc}}, /*average=*/true, pg);
//
//   dist::MetricSums sums;                        // evaluation over this rank's shard
//   for (auto& batch : loader) sums.add("loss", batch_loss_mean, batch.indices.size());
//   auto mean = sums.all_reduce_mean(pg);         // == the single-process mean over the dataset
//
// reduce_dict: the keys in sorted order (a std::map is), their values stacked into one float64
// tensor, one all_reduce; average divides by the world size. That average is only right when every
// rank counted the same number of samples. When counts differ (exact evaluation shards, a last
// partial batch), sum value * count and count over ranks, then divide: MetricSums does that.
// Every rank must pass the same keys (checked first with a small all_gather of (key count, key
// hash); a difference is an error naming both ranks' keys).
#pragma once
#include <map>
#include <string>

#include "minidl/dist/process_group.h"

namespace minidl::dist {

std::map<std::string, double> reduce_dict(const std::map<std::string, double>& values, bool average, ProcessGroup& pg);

// Sums of value * count and of count per metric, for exact weighted means across ranks.
struct MetricSums {
  std::map<std::string, double> weighted_sum;  // sum of value * count
  std::map<std::string, double> count;  // sum of count

  // value: the mean of the metric over `count` samples (a batch's mean loss, its accuracy).
  void add(const std::string& name, double value, double count = 1.0);
  // Registers a metric with nothing counted (a rank with an empty shard must still take part).
  void declare(const std::string& name) { add(name, 0.0, 0.0); }
  // Means on this rank only.
  std::map<std::string, double> mean() const;
  // Sums and counts of every rank (one all_reduce through reduce_dict), then sum / count per
  // metric (NaN when the global count is 0).
  std::map<std::string, double> all_reduce_mean(ProcessGroup& pg) const;
};

// The exact mean of a value that is a mean over `count` samples on each rank.
double weighted_mean(double value, double count, ProcessGroup& pg);

}  // namespace minidl::dist
