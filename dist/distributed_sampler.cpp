// dist/distributed_sampler.cpp — DistributedSampler (PyTorch) and DistributedBatchSampler
// (PaddlePaddle): padding, shuffling with Philox randperm, and splitting among ranks. See
// distributed_sampler.h for the rules each follows.
#include "minidl/dist/distributed_sampler.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "minidl/dist/distributed.h"
#include "minidl/tensor/random.h"

namespace minidl::dist {

namespace {

// Fills in rank / world size from the default group when not given, and checks them.
void resolve_world(const char* who, int& num_replicas, int& rank) {
  if (num_replicas < 0 || rank < 0) {
    if (!is_initialized())
      throw std::runtime_error(std::string(who) +
                               ": num_replicas and rank not given and dist::init() has not been called");
    if (num_replicas < 0) num_replicas = world_size();
    if (rank < 0) rank = dist::rank();
  }
  if (num_replicas < 1) throw std::invalid_argument(std::string(who) + ": num_replicas must be >= 1");
  if (rank >= num_replicas)
    throw std::invalid_argument(std::string(who) + ": rank " + std::to_string(rank) + " is out of range for " +
                                std::to_string(num_replicas) + " replicas");
}

// randperm(n, key) as a vector (empty for n == 0).
std::vector<int64_t> permutation(int64_t n, uint64_t seed, int64_t epoch) {
  if (n == 0) return {};
  const Tensor perm = randperm(n, RandomKey{seed, static_cast<uint64_t>(epoch)});
  const int64_t* p = perm.data<int64_t>();
  return std::vector<int64_t>(p, p + n);
}

// Appends the head of `order` (repeating it as often as needed) until it holds `total` entries.
void pad_by_repeating(std::vector<int64_t>& order, int64_t total) {
  const size_t n = order.size();
  if (n == 0) return;
  for (size_t i = 0; static_cast<int64_t>(order.size()) < total; ++i) order.push_back(order[i % n]);
}

}  // namespace

// ---- DistributedSampler ----

DistributedSampler::DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options)
    : dataset_size_(dataset_size), options_(options) {
  if (dataset_size < 0) throw std::invalid_argument("DistributedSampler: dataset size must be >= 0");
  if (options_.exact && options_.drop_last)
    throw std::invalid_argument(
        "DistributedSampler: exact (evaluation) mode keeps every sample; drop_last contradicts it");
  if (options_.chunk < 1)
    throw std::invalid_argument("DistributedSampler: chunk must be >= 1, got " + std::to_string(options_.chunk));
  resolve_world("DistributedSampler", options_.num_replicas, options_.rank);
  const int64_t n = dataset_size_, r = options_.num_replicas;
  // ceil(N / R); drop_last with a remainder: ceil((N - R) / R), which is floor(N / R) (0 when N < R).
  num_samples_ = options_.drop_last && n % r != 0 ? n / r : (n + r - 1) / r;
}

int64_t DistributedSampler::full_size() const {
  if (!options_.exact) return num_samples_;
  // exact: whole rounds of R * c, then runs of c of the last round while entries last
  const int64_t n = dataset_size_, c = options_.chunk, round = options_.num_replicas * c;
  const int64_t tail = n % round - options_.rank * c;
  return n / round * c + std::clamp<int64_t>(tail, 0, c);
}

int64_t DistributedSampler::size() const { return full_size() - start_; }

void DistributedSampler::set_epoch(int64_t epoch) {
  Sampler::set_epoch(epoch);
  start_ = 0;
}

void DistributedSampler::set_start_index(int64_t start) {
  if (start < 0 || start > full_size())
    throw std::invalid_argument("DistributedSampler::set_start_index: " + std::to_string(start) +
                                " is outside this rank's " + std::to_string(full_size()) + " indices per epoch");
  start_ = start;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order;
  if (options_.shuffle) {
    order = permutation(dataset_size_, options_.seed, epoch_);
  } else {
    order.resize(static_cast<size_t>(dataset_size_));
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  if (!options_.exact) {
    if (options_.drop_last)
      order.resize(static_cast<size_t>(total_size()));  // truncate
    else
      pad_by_repeating(order, total_size());
  }
  // Deal runs of c: run q of each whole round of R * c goes to rank q.
  const int64_t total = static_cast<int64_t>(order.size()), R = options_.num_replicas, c = options_.chunk;
  const int64_t round = R * c, whole = total / round * round, rank = options_.rank;
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(full_size()));
  auto take = [&](int64_t from, int64_t to) { mine.insert(mine.end(), order.begin() + from, order.begin() + to); };
  for (int64_t s = rank * c; s < whole; s += round) take(s, s + c);
  if (options_.exact) {  // the last round in runs of c, while entries last
    const int64_t from = std::min(total, whole + rank * c);
    take(from, std::min(total, from + c));
  } else {  // the last round split evenly (its length is a multiple of R after padding)
    const int64_t share = (total - whole) / R;
    take(whole + rank * share, whole + (rank + 1) * share);
  }
  mine.erase(mine.begin(), mine.begin() + start_);
  return mine;
}

// ---- DistributedBatchSampler ----

DistributedBatchSampler::DistributedBatchSampler(int64_t dataset_size, DistributedBatchSamplerOptions options)
    : dataset_size_(dataset_size), options_(options) {
  if (dataset_size < 0) throw std::invalid_argument("DistributedBatchSampler: dataset size must be >= 0");
  if (options_.batch_size < 1)
    throw std::invalid_argument("DistributedBatchSampler: batch_size must be >= 1, got " +
                                std::to_string(options_.batch_size));
  resolve_world("DistributedBatchSampler", options_.num_replicas, options_.rank);
  num_samples_ = (dataset_size_ + options_.num_replicas - 1) / options_.num_replicas;
}

int64_t DistributedBatchSampler::size() const {
  const int64_t b = options_.batch_size;
  return options_.drop_last ? num_samples_ / b * b : num_samples_;
}

int64_t DistributedBatchSampler::num_batches() const {
  const int64_t b = options_.batch_size;
  return options_.drop_last ? num_samples_ / b : (num_samples_ + b - 1) / b;
}

std::vector<int64_t> DistributedBatchSampler::local_indices(int64_t epoch) const {
  const int64_t R = options_.num_replicas, B = options_.batch_size, total = num_samples_ * R;
  // 1. 0..N-1 padded to total, then (shuffle) permuted as a whole.
  std::vector<int64_t> padded(static_cast<size_t>(dataset_size_));
  std::iota(padded.begin(), padded.end(), int64_t{0});
  pad_by_repeating(padded, total);
  std::vector<int64_t> order = padded;
  if (options_.shuffle) {
    const std::vector<int64_t> perm = permutation(total, options_.seed, epoch);
    for (size_t i = 0; i < perm.size(); ++i) order[i] = padded[static_cast<size_t>(perm[i])];
  }
  // 2. Rounds of R * B: batch k of a round goes to rank k. The last, incomplete round (rem
  //    indices, a multiple of R) is split evenly: rem / R consecutive indices per rank.
  const int64_t rem = total % (B * R), rem_local = rem / R;
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (int64_t start = options_.rank * B; start < total - rem; start += B * R)
    mine.insert(mine.end(), order.begin() + start, order.begin() + start + B);
  const int64_t tail = total - rem + options_.rank * rem_local;
  mine.insert(mine.end(), order.begin() + tail, order.begin() + tail + rem_local);
  // 3. drop_last: without the last incomplete local batch.
  mine.resize(static_cast<size_t>(size()));
  return mine;
}

std::vector<std::vector<int64_t>> DistributedBatchSampler::batches_for_epoch(int64_t epoch) const {
  const std::vector<int64_t> mine = local_indices(epoch);
  const size_t b = static_cast<size_t>(options_.batch_size);
  std::vector<std::vector<int64_t>> out;
  for (size_t start = 0; start < mine.size(); start += b)
    out.emplace_back(mine.begin() + static_cast<std::ptrdiff_t>(start),
                     mine.begin() + static_cast<std::ptrdiff_t>(std::min(mine.size(), start + b)));
  return out;
}

std::vector<std::vector<int64_t>> DistributedBatchSampler::batches() {
  std::vector<std::vector<int64_t>> out = batches_for_epoch(epoch_);
  if (options_.shuffle) ++epoch_;
  return out;
}

std::vector<int64_t> DistributedBatchSampler::indices() const {
  std::vector<int64_t> out = local_indices(epoch_);
  // A pass advances the epoch (Paddle): Sampler::indices() is const, but this sampler is never a
  // const object (the DataLoader holds it through std::shared_ptr<Sampler>).
  if (options_.shuffle) ++const_cast<DistributedBatchSampler*>(this)->epoch_;
  return out;
}

}  // namespace minidl::dist
