// examples/trainer/metrics.cpp — batch accuracy counts, the all-reduce of the sums, metrics.jsonl.
#include "examples/trainer/metrics.h"

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
  std::map<std::string, double> sums = {{"correct1", correct1}, {"correct5", correct5}, {"count", count}, {"loss_sum", loss_sum}};
  sums = minidl::dist::reduce_dict(sums, /*average=*/false, minidl::dist::default_group());
  return {.loss_sum = sums["loss_sum"], .correct1 = sums["correct1"], .correct5 = sums["correct5"], .count = sums["count"]};
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
    if (epoch >= 1 && epoch <= epochs) kept += line + "\n";
    else dropped = true;
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
