// examples/trainer/metrics.cpp — batch accuracy counts (on the host, and as tensor ops on the
// logits' device), the all-reduce of the sums, metrics.jsonl.
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
#include "minidl/dist/socket.h"
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

minidl::Tensor BatchSums::operator()(const minidl::Tensor& logits, const minidl::Tensor& target,
                                     const minidl::Tensor& mean_loss) {
  const int64_t batch = logits.size(0), C = logits.size(1);
  const minidl::DType dt = logits.dtype();
  const minidl::Device dev = logits.device();
  if (!classes_.defined() || classes_.size(1) != C || classes_.dtype() != dt || classes_.device() != dev)
    classes_ = minidl::arange(C, dt).to(dev).reshape({1, C});
  // rank (B): how many classes come before each row's target in topk_indices's order (a larger
  // logit, or an equal one of a lower class index); a hit in the top k where rank < k
  const minidl::Tensor t = target.to(dt).reshape({-1, 1});  // (B, 1)
  const minidl::Tensor is_target = minidl::eq(classes_, t);  // (B, C)
  const minidl::Tensor xt = minidl::sum(minidl::where(is_target, logits, minidl::zeros({}, dt, dev)), {1}, true);
  const minidl::Tensor before = minidl::gt(logits, xt) + minidl::eq(logits, xt) * minidl::lt(classes_, t);  // (B, C)
  const minidl::Tensor rank = minidl::sum(before, {1});  // (B)
  const double k = static_cast<double>(std::min<int64_t>(5, C));
  const minidl::Tensor hits1 = minidl::sum(minidl::lt(rank, minidl::ones({}, dt, dev))).to(minidl::DType::Float64);
  const minidl::Tensor hits5 = minidl::sum(minidl::lt(rank, minidl::full({}, k, dt, dev))).to(minidl::DType::Float64);
  const minidl::Tensor loss_sum = minidl::mul(mean_loss.to(minidl::DType::Float64), static_cast<double>(batch));
  return minidl::stack({loss_sum.reshape({}), hits1, hits5}, 0);  // (3)
}

DeviceTotals::DeviceTotals(minidl::Device device, const Totals& start)
    : sums_(minidl::from_vector<double>({start.loss_sum, start.correct1, start.correct5}, {3}).to(device)),
      count_(start.count) {}

void DeviceTotals::add(const minidl::Tensor& logits, const minidl::Tensor& target, const minidl::Tensor& mean_loss) {
  sums_ = minidl::add(sums_, batch_sums_(logits, target, mean_loss));
  count_ += static_cast<double>(logits.size(0));
}

Totals DeviceTotals::read() const {
  const std::vector<double> v = sums_.to_vector<double>();
  return {.loss_sum = v[0], .correct1 = v[1], .correct5 = v[2], .count = count_};
}

void OrderedTotals::add(int64_t ordinal, const minidl::Tensor& logits, const minidl::Tensor& target,
                        const minidl::Tensor& mean_loss) {
  const minidl::Tensor shard = batch_sums_(logits, target, mean_loss);
  local_ = local_.defined() ? minidl::add(local_, shard) : shard;
  local_count_ += static_cast<double>(logits.size(0));
  ordinals_.push_back(ordinal);
  counts_.push_back(static_cast<double>(logits.size(0)));
  sums_.push_back(shard);
}

Totals OrderedTotals::local() const {
  if (!local_.defined()) return {};
  const std::vector<double> v = local_.to_vector<double>();
  return {.loss_sum = v[0], .correct1 = v[1], .correct5 = v[2], .count = local_count_};
}

const Totals& OrderedTotals::fold() {
  const int64_t rows = static_cast<int64_t>(ordinals_.size());
  // this rank's records: one host read of all of them
  const std::vector<double> sums = rows > 0 ? minidl::stack(sums_, 0).to_vector<double>() : std::vector<double>{};
  std::vector<double> pending;  // 5 per shard: ordinal, loss_sum, correct1, correct5, count
  for (int64_t i = 0; i < rows; ++i)
    pending.insert(pending.end(), {static_cast<double>(ordinals_[i]), sums[3 * i], sums[3 * i + 1], sums[3 * i + 2],
                                   counts_[i]});
  ordinals_.clear();
  counts_.clear();
  sums_.clear();
  const minidl::Tensor mine = minidl::from_vector<double>(pending, {rows, 5});
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
  errno = 0;
  std::ofstream out(path, std::ios::app);
  if (!out) {
    const int err = errno;
    std::string why = err != 0 ? std::strerror(err) : "open failed";
    if (minidl::dist::is_out_of_descriptors(err)) why = minidl::dist::out_of_descriptors_message(err);
    throw std::runtime_error("cannot open " + path + " to append to it: " + why);
  }
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
