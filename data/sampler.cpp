// data/sampler.cpp — SequentialSampler, RandomSampler (Philox randperm), BatchSampler.
#include "minidl/data/sampler.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "minidl/tensor/random.h"

namespace minidl::data {

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  if (n < 0) throw std::invalid_argument("SequentialSampler: n must be >= 0, got " + std::to_string(n));
}

std::vector<int64_t> SequentialSampler::indices() const {
  std::vector<int64_t> out(static_cast<size_t>(n_));
  std::iota(out.begin(), out.end(), int64_t{0});
  return out;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  if (n < 0) throw std::invalid_argument("RandomSampler: n must be >= 0, got " + std::to_string(n));
}

std::vector<int64_t> RandomSampler::indices() const {
  const Tensor perm = randperm(n_, RandomKey{seed_, static_cast<uint64_t>(epoch_)});
  const int64_t* p = perm.data<int64_t>();
  return std::vector<int64_t>(p, p + n_);
}

BatchSampler::BatchSampler(std::shared_ptr<Sampler> sampler, BatchSamplerOptions options)
    : sampler_(std::move(sampler)), options_(options) {
  if (!sampler_) throw std::invalid_argument("BatchSampler: sampler is null");
  if (options_.batch_size < 1)
    throw std::invalid_argument("BatchSampler: batch_size must be >= 1, got " + std::to_string(options_.batch_size));
}

int64_t BatchSampler::size() const {
  const int64_t n = sampler_->size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

std::vector<std::vector<int64_t>> BatchSampler::batches() const {
  const std::vector<int64_t> all = sampler_->indices();
  const int64_t n = static_cast<int64_t>(all.size()), b = options_.batch_size;
  const int64_t count = options_.drop_last ? n / b : (n + b - 1) / b;
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k)
    out[static_cast<size_t>(k)].assign(all.begin() + k * b, all.begin() + std::min(n, (k + 1) * b));
  return out;
}

}  // namespace minidl::data
