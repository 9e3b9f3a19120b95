// dist/distributed_sampler.h — which dataset indices each rank visits: DistributedSampler
// (PyTorch's semantics, plus an exact mode for evaluation) and DistributedBatchSampler
// (PaddlePaddle's semantics). Both are data::Samplers, so a DataLoader takes them directly.
//
// DistributedSampler (torch.utils.data.DistributedSampler), N samples, R ranks:
//   num_samples = ceil(N / R)   (drop_last and N % R != 0: ceil((N - R) / R));  total = num_samples * R
//   order       = shuffle ? randperm(N, RandomKey{seed, epoch}) : 0..N-1     (same on every rank)
//   padding     = not drop_last: append the first total - N entries of order (repeating order
//                 when that is more than N); drop_last: truncate to total
//   rank r      = order[r], order[r + R], ...     size() == num_samples on every rank
// Call set_epoch(e) before each epoch (DataLoader::set_epoch does), or every epoch repeats one
// order. Difference from PyTorch: the permutation is keyed by (seed, epoch), not seed + epoch,
// and comes from our Philox generator (bit equality with torch is not a goal).
//
//   auto sampler = std::make_shared<dist::DistributedSampler>(dataset->size(),
//       dist::DistributedSamplerOptions{.shuffle = true, .seed = 42});   // rank, R from dist::init()
//   data::DataLoader loader(dataset, {.batch_size = 64}, sampler);
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) { loader.set_epoch(epoch); for (auto& b : loader) ... }
//
// Exact mode (options.exact, for evaluation): no padding and no dropping — rank r takes
// order[r], order[r + R], ... while they exist, so shards differ by at most one sample in size and
// every sample is seen exactly once. Weight metrics by per-rank counts (dist::MetricSums) to get
// exactly the single-process numbers.
//
// Chunks (options.chunk = c, default 1): the (padded) order is dealt to the ranks in runs of c
// consecutive entries — run q of each round of R * c goes to rank q — instead of one entry at a
// time. With c = global batch / R each rank's share of every global batch is one contiguous run
// of it, which deterministic data parallelism needs (dist/deterministic.h: a rank's micro-shards
// are consecutive pieces of the global batch). The last, incomplete round is split evenly (L / R
// consecutive entries per rank; L is a multiple of R after padding); in exact mode it is dealt in
// runs of c while entries last. c = 1 is exactly the interleaving above.
//
// Mid-epoch resume: set_start_index(s) makes indices() of the current epoch begin at this rank's
// s-th index (the first s were consumed before the checkpoint); set_epoch resets it to 0.
//
// DistributedBatchSampler (paddle.io.DistributedBatchSampler), batch size B:
//   num_samples = ceil(N / R); the list 0..N-1 is padded (repeating its head) to R * num_samples
//   BEFORE shuffling; if shuffle, that padded list is permuted with randperm keyed (seed, epoch)
//   and the epoch then advances by one by itself (each call of indices() / batches() is a pass).
//   Whole batches go to the ranks in turn: batch k of each round of R * B goes to rank k; the
//   last incomplete round is split evenly (rem / R consecutive indices per rank). drop_last drops
//   the last incomplete local batch. Paddle's default is shuffle = false.
// As a data::Sampler its indices() are this rank's indices in batch order; give the DataLoader
// the same batch size so it cuts the same batches:
//
//   auto sampler = std::make_shared<dist::DistributedBatchSampler>(dataset->size(),
//       dist::DistributedBatchSamplerOptions{.batch_size = 32, .shuffle = true});
//   data::DataLoader loader(dataset, {.batch_size = sampler->batch_size()}, sampler);
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) for (auto& b : loader) ...  // epoch advances itself
//
// (Calling loader.set_epoch(e) as well is harmless: it sets the epoch of the next pass, like
// Paddle's set_epoch.) Difference from Paddle: padding longer than N repeats the list instead of
// failing (N < R).
#pragma once
#include <cstdint>
#include <vector>

#include "minidl/data/dataset.h"
#include "minidl/data/sampler.h"

namespace minidl::dist {

struct DistributedSamplerOptions {
  int num_replicas = -1;  // R; -1: dist::world_size()
  int rank = -1;  // -1: dist::rank()
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
  bool exact = false;  // evaluation: no padding, uneven shards (exclusive with drop_last)
  int64_t chunk = 1;  // entries dealt to a rank at a time (1: PyTorch's interleaving)
};

class DistributedSampler : public data::Sampler {
 public:
  explicit DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options = {});
  explicit DistributedSampler(const data::Dataset& dataset, DistributedSamplerOptions options = {})
      : DistributedSampler(dataset.size(), options) {}

  // This rank's number of indices per epoch (num_samples; in exact mode this rank's shard size).
  int64_t size() const override;
  // This rank's indices for the current epoch (from the start index on).
  std::vector<int64_t> indices() const override;
  // A new epoch starts at index 0 again.
  void set_epoch(int64_t epoch) override;
  // The current epoch's indices() skip this rank's first `start` indices (0 <= start <= the
  // epoch's full share); size() shrinks by as many.
  void set_start_index(int64_t start);
  int64_t start_index() const { return start_; }

  int64_t num_samples() const { return num_samples_; }  // ceil(N / R) (PyTorch's num_samples)
  int64_t total_size() const { return num_samples_ * options_.num_replicas; }
  int rank() const { return options_.rank; }
  int num_replicas() const { return options_.num_replicas; }
  const DistributedSamplerOptions& options() const { return options_; }

 private:
  int64_t full_size() const;  // this rank's share of the epoch, before the start index

  int64_t dataset_size_;
  DistributedSamplerOptions options_;
  int64_t num_samples_ = 0;
  int64_t start_ = 0;
};

struct DistributedBatchSamplerOptions {
  int64_t batch_size = 1;
  int num_replicas = -1;  // -1: dist::world_size()
  int rank = -1;  // -1: dist::rank()
  bool shuffle = false;  // as Paddle
  bool drop_last = false;  // drop the last incomplete local batch
  uint64_t seed = 0;  // permutation key (seed, epoch); Paddle seeds with the epoch alone
};

class DistributedBatchSampler : public data::Sampler {
 public:
  explicit DistributedBatchSampler(int64_t dataset_size, DistributedBatchSamplerOptions options = {});
  explicit DistributedBatchSampler(const data::Dataset& dataset, DistributedBatchSamplerOptions options = {})
      : DistributedBatchSampler(dataset.size(), options) {}

  // This rank's batches for the current epoch; with shuffle the epoch then advances by one.
  std::vector<std::vector<int64_t>> batches();
  // The same pass as a flat list (this rank's indices in batch order); advances the epoch too.
  std::vector<int64_t> indices() const override;
  // Indices per pass on this rank: num_samples, less the dropped last batch with drop_last.
  int64_t size() const override;
  // Batches per pass (Paddle's len()).
  int64_t num_batches() const;
  int64_t batch_size() const { return options_.batch_size; }
  int64_t num_samples() const { return num_samples_; }

  // The batches of a given epoch, without advancing anything.
  std::vector<std::vector<int64_t>> batches_for_epoch(int64_t epoch) const;

 private:
  std::vector<int64_t> local_indices(int64_t epoch) const;

  int64_t dataset_size_;
  DistributedBatchSamplerOptions options_;
  int64_t num_samples_ = 0;
};

}  // namespace minidl::dist
