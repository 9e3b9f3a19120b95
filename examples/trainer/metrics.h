// examples/trainer/metrics.h — what the trainer measures: per-rank sums of loss, top-1 and top-5
// hits and sample counts, all-reduced so that every rank ends with the global figures. Sums, not
// averages, are reduced: shards of an exact (unpadded) evaluation differ in size, and an average
// of averages would weight them wrongly. While training and evaluating the sums stay where the
// logits are (DeviceTotals: on a GPU, no host read per batch) and are read at the end or when a
// figure is shown. Also the one JSON line per epoch of OUT/metrics.jsonl.
// Part of the `train` example (examples/train.cpp); not a library module.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "minidl/tensor/tensor.h"

namespace trainer {

struct Totals {
  double loss_sum = 0;  // sum over samples of the per-sample loss
  double correct1 = 0;  // samples whose target is the top prediction
  double correct5 = 0;  // samples whose target is among the top 5
  double count = 0;  // samples

  // Adds a batch: logits (B, classes), target int64 (B), the batch's mean loss. Counted on the
  // host (topk_indices): the plain reference DeviceTotals is tested against.
  void add(const minidl::Tensor& logits, const minidl::Tensor& target, double mean_loss);
  // The sums over every rank (collective: all ranks call it).
  Totals all_reduced() const;

  double loss() const { return count > 0 ? loss_sum / count : 0.0; }
  double acc1() const { return count > 0 ? 100.0 * correct1 / count : 0.0; }  // percent
  double acc5() const { return count > 0 ? 100.0 * correct5 / count : 0.0; }
};

// The sums of Totals kept on the logits' device: add() queues tensor ops only (no host read, no
// synchronisation); read() copies them to the host (one synchronisation). The same figures as
// Totals::add, to the bit: the hits are counted in topk_indices's order (the larger logit first,
// ties to the lower class; logits without NaN), the loss sum is mean x batch in double, added in
// batch order, and the count is kept on the host.
// One batch's (3) float64 sums on the logits' device: loss_sum, correct1, correct5, by tensor ops.
// Keeps the class indices there, made on first use: no host -> device copy per batch.
class BatchSums {
 public:
  minidl::Tensor operator()(const minidl::Tensor& logits, const minidl::Tensor& target, const minidl::Tensor& mean_loss);

 private:
  minidl::Tensor classes_;  // (1, C): 0 .. C-1 in the logits' dtype, on their device
};

class DeviceTotals {
 public:
  // Starting from `start` (a resumed epoch's partial sums).
  explicit DeviceTotals(minidl::Device device, const Totals& start = {});
  // logits (B, classes) float, target int64 (B) and mean_loss (0-d) on the device.
  void add(const minidl::Tensor& logits, const minidl::Tensor& target, const minidl::Tensor& mean_loss);
  Totals read() const;  // one host read

 private:
  BatchSums batch_sums_;
  minidl::Tensor sums_;  // (3) float64 on the device: loss_sum, correct1, correct5
  double count_ = 0;
};


// Deterministic mode: the same sums with the same bits on any number of processes. Each
// micro-shard's sums are recorded under its global ordinal (step x shards per step + global shard
// index); fold() gathers every rank's records and adds them to the running totals one by one in
// ordinal order — the additions a single process makes. Folding in pieces (at a mid-epoch
// checkpoint, then at the epoch end) gives the same bits as folding once, so a resumed run that
// starts from the checkpoint's folded totals ends with the uninterrupted run's.
class OrderedTotals {
 public:
  // A shard: logits (m, classes), target (m), its mean loss (0-d), on one device; kept there.
  void add(int64_t ordinal, const minidl::Tensor& logits, const minidl::Tensor& target, const minidl::Tensor& mean_loss);
  // Every rank's records so far, added in ordinal order (collective: all ranks call it; one host
  // read of this rank's records).
  const Totals& fold();
  // The totals folded so far (set it to a checkpoint's when resuming).
  Totals folded;
  // This rank's shards since construction, summed as they come (for progress display only).
  Totals local() const;

 private:
  BatchSums batch_sums_;
  std::vector<int64_t> ordinals_;  // per shard not yet folded
  std::vector<double> counts_;
  std::vector<minidl::Tensor> sums_;  // (3) float64 on the device each (batch_sums)
  double local_count_ = 0;
  minidl::Tensor local_;  // (3) float64, this rank's shards since construction
};

struct EpochRecord {
  int64_t epoch = 0;  // 1-based: the epoch just finished
  double lr = 0;  // the lr of the epoch's first step
  Totals train, val;
  double images_per_s = 0;
  double seconds = 0;
  int world_size = 1;
};

// Appends {"epoch", "lr", "train_loss", "train_acc1", "val_loss", "val_acc1", "val_acc5",
// "images_per_s", "seconds", "world_size"} as one JSON line.
// The line is flushed and checked: a failed write (a full disk) is a std::runtime_error.
void append_metrics_line(const std::string& path, const EpochRecord& record);
// Resuming into the directory of an interrupted run: drops the lines of epochs after `epochs`
// (trained again now) and any line cut off by the crash; the file is replaced atomically.
void keep_metrics_up_to(const std::string& path, int64_t epochs);

}  // namespace trainer
