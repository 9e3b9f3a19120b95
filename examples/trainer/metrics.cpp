// examples/trainer/metrics.cpp — batch accuracy counts, the all-reduce of the sums, metrics.jsonl.
#include "examples/trainer/metrics.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "minidl/dist/distributed.h"
#include "minidl/dist/metrics.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/ops.h"

namespace trainer {

void Totals::add(const minidl::Tensor& logits, const minidl::Tensor& target, double mean_loss) {
  const int64_t batch = logits.size(0);
  const int64_t k = std::min<int64_t>(5, logits.size(1));
  // (B, k) int64, best first; computed on the logits' device, counted on the host
  const minidl::Tensor top = minidl::topk_indices(logits, k).cpu().contiguous();
  const minidl::Tensor labels = target.cpu().to(minidl::DType::Int64).contiguous();
  const int64_t* t = top.data<int64_t>();
  const int64_t* y = labels.data<int64_t>();
  for (int64_t i = 0; i < batch; ++i) {
    if (t[i * k] == y[i]) correct1 += 1;
    for (int64_t j = 0; j < k; ++j)
      if (t[i * k + j] == y[i]) correct5 += 1;
  }
  loss_sum += mean_loss * static_cast<double>(batch);
  count += static_cast<double>(batch);
}

Totals Totals::all_reduced() const {
  // One collective for all four sums, like PaddleViT's reduce_dict (keys sorted, values stacked).
  std::map<std::string, double> sums = {
      {"correct1", correct1}, {"correct5", correct5}, {"count", count}, {"loss_sum", loss_sum}};
  sums = minidl::dist::reduce_dict(sums, /*average=*/false, minidl::dist::default_group());
  return {
      .loss_sum = sums["loss_sum"], .correct1 = sums["correct1"], .correct5 = sums["correct5"], .count = sums["count"]};
}

void OrderedTotals::add(int64_t ordinal, const minidl::Tensor& logits, const minidl::Tensor& target, double mean_loss) {
  Totals shard;
  shard.add(logits, target, mean_loss);
  local.loss_sum += shard.loss_sum;
  local.correct1 += shard.correct1;
  local.correct5 += shard.correct5;
  local.count += shard.count;
  pending_.insert(pending_.end(),
                  {static_cast<double>(ordinal), shard.loss_sum, shard.correct1, shard.correct5, shard.count});
}

const Totals& OrderedTotals::fold() {
  const int64_t rows = static_cast<int64_t>(pending_.size() / 5);
  const minidl::Tensor mine = minidl::from_vector<double>(pending_, {rows, 5});
  pending_.clear();
  std::vector<std::array<double, 5>> all;
  for (const minidl::Tensor& part : minidl::dist::all_gather(mine)) {  // (rows of rank q, 5)
    const double* p = part.data<double>();
    for (int64_t i = 0; i < part.size(0); ++i)
      all.push_back({p[5 * i], p[5 * i + 1], p[5 * i + 2], p[5 * i + 3], p[5 * i + 4]});
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a[0] < b[0]; });
  for (const auto& r : all) {
    folded.loss_sum += r[1];
    folded.correct1 += r[2];
    folded.correct5 += r[3];
    folded.count += r[4];
  }
  return folded;
}

void append_metrics_line(const std::string& path, const EpochRecord& r) {
  const nlohmann::ordered_json line = {{"epoch", r.epoch},
                                       {"lr", r.lr},
                                       {"train_loss", r.train.loss()},
                                       {"train_acc1", r.train.acc1()},
                                       {"val_loss", r.val.loss()},
                                       {"val_acc1", r.val.acc1()},
                                       {"val_acc5", r.val.acc5()},
                                       {"images_per_s", r.images_per_s},
                                       {"seconds", r.seconds},
                                       {"world_size", r.world_size}};
  std::ofstream out(path, std::ios::app);
  errno = 0;
  out << line.dump() << "\n";
  out.flush();  // the write happens here: check it, not only the buffering
  if (!out)
    throw std::runtime_error("cannot append to " + path + ": " + (errno != 0 ? std::strerror(errno) : "write failed"));
}

void keep_metrics_up_to(const std::string& path, int64_t epochs) {
  std::ifstream in(path);
  if (!in) return;  // nothing written yet
  std::string kept, line;
  bool dropped = false;
  while (std::getline(in, line)) {
    int64_t epoch = -1;
    try {
      epoch = nlohmann::json::parse(line).at("epoch").get<int64_t>();
    } catch (const std::exception&) {
      epoch = -1;  // a line cut off by the crash
    }
    if (epoch >= 1 && epoch <= epochs)
      kept += line + "\n";
    else
      dropped = true;
  }
  in.close();
  if (!dropped) return;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kept;
    out.flush();
    if (!out) throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error("cannot replace " + path + ": " + std::strerror(errno));
}

}  // namespace trainer
