// data/sampler.h — which dataset indices an epoch visits, and in what order.
// A Sampler returns the whole epoch's index list at once (indices()); set_epoch(e) changes the
// epoch for samplers whose order depends on it. SequentialSampler: 0..n-1. RandomSampler: a
// permutation keyed by (seed, epoch), so every process with the same seed sees the same order.
// BatchSampler cuts a sampler's list into batches. The DataLoader accepts any Sampler through
// std::shared_ptr<Sampler> (dist::DistributedSampler is one: each rank's share of a permutation).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "minidl/tensor/serialize.h"

namespace minidl::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // Number of indices one epoch yields.
  virtual int64_t size() const = 0;
  // The indices of the current epoch, in order. Same epoch => same list.
  virtual std::vector<int64_t> indices() const = 0;
  // Call before each epoch; samplers whose order does not depend on it just remember it.
  virtual void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

 protected:
  int64_t epoch_ = 0;
};

// 0, 1, ..., n-1 every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices() const override;

 private:
  int64_t n_;
};

// randperm(n, RandomKey{seed, epoch}): a different permutation each epoch, the same for the same
// (seed, epoch) on every machine and every run.
// Mid-epoch resume, as dist::DistributedSampler: set_start_index(s) makes the current epoch's
// indices() begin at the permutation's s-th entry (the first s were consumed before the
// checkpoint) and size() shrink by s; set_epoch resets it to 0. state_dict() holds both
// ("epoch", "start_index": 0-d int64), so a checkpoint (tensor/checkpoint.h) can restore them.
class RandomSampler : public Sampler {
 public:
  explicit RandomSampler(int64_t n, uint64_t seed = 0);
  int64_t size() const override { return n_ - start_; }
  std::vector<int64_t> indices() const override;
  void set_epoch(int64_t epoch) override;
  void set_start_index(int64_t start);  // 0 <= start <= n, else std::invalid_argument naming it
  int64_t start_index() const { return start_; }

  TensorMap state_dict() const;
  // A missing key or a value out of range is a std::invalid_argument naming it.
  void load_state_dict(const TensorMap& state);

 private:
  int64_t n_;
  uint64_t seed_;
  int64_t start_ = 0;
};

struct BatchSamplerOptions {
  int64_t batch_size = 1;
  bool drop_last = false;  // drop a last batch smaller than batch_size
};

// Groups the sampler's indices into consecutive batches of batch_size.
class BatchSampler {
 public:
  BatchSampler(std::shared_ptr<Sampler> sampler, BatchSamplerOptions options);
  // Number of batches per epoch.
  int64_t size() const;
  // The current epoch's batches.
  std::vector<std::vector<int64_t>> batches() const;
  void set_epoch(int64_t epoch) { sampler_->set_epoch(epoch); }
  const std::shared_ptr<Sampler>& sampler() const { return sampler_; }

 private:
  std::shared_ptr<Sampler> sampler_;
  BatchSamplerOptions options_;
};

}  // namespace minidl::data
