// data/sampler.cpp — SequentialSampler, RandomSampler (Philox randperm), BatchSampler.
#include "minidl/data/sampler.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "minidl/tensor/creation.h"
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
  return std::vector<int64_t>(p + start_, p + n_);
}

void RandomSampler::set_epoch(int64_t epoch) {
  Sampler::set_epoch(epoch);
  start_ = 0;
}

void RandomSampler::set_start_index(int64_t start) {
  if (start < 0 || start > n_)
    throw std::invalid_argument("RandomSampler::set_start_index: " + std::to_string(start) + " is outside the " +
                                std::to_string(n_) + " indices per epoch");
  start_ = start;
}

TensorMap RandomSampler::state_dict() const {
  return {{"epoch", from_vector<int64_t>({epoch_}, {})}, {"start_index", from_vector<int64_t>({start_}, {})}};
}

void RandomSampler::load_state_dict(const TensorMap& state) {
  const auto count = [&](const char* key) {
    const auto it = state.find(key);
    if (it == state.end())
      throw std::invalid_argument(std::string("RandomSampler::load_state_dict: missing key '") + key + "'");
    if (it->second.dtype() != DType::Int64 || it->second.numel() != 1)
      throw std::invalid_argument(std::string("RandomSampler::load_state_dict: '") + key +
                                  "' must be one int64 value, got " + it->second.desc());
    return it->second.cpu().to_vector<int64_t>()[0];
  };
  const int64_t epoch = count("epoch"), start = count("start_index");
  if (epoch < 0 || start < 0 || start > n_)
    throw std::invalid_argument(
        "RandomSampler::load_state_dict: expected 'epoch' >= 0 and 0 <= 'start_index' <= " + std::to_string(n_) +
        ", got epoch " + std::to_string(epoch) + ", start_index " + std::to_string(start));
  set_epoch(epoch);
  start_ = start;
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
