// data/dataloader.cpp — collation (memcpy per example, into pinned memory for pin_memory) and the
// DataLoader's ordered prefetching.
#include "minidl/data/dataloader.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "minidl/autograd/trace.h"
#include "minidl/kernels/cuda_api.h"
#include "minidl/tensor/pinned.h"

namespace minidl::data {
namespace {

std::shared_ptr<Sampler> default_sampler(const Dataset& dataset, const DataLoaderOptions& o,
                                         std::shared_ptr<Sampler> custom) {
  if (custom) {
    if (o.shuffle)
      throw std::invalid_argument(
          "DataLoader: shuffle = true and a custom sampler are mutually exclusive "
          "(the sampler decides the order)");
    return custom;
  }
  if (o.shuffle) return std::make_shared<RandomSampler>(dataset.size(), o.seed);
  return std::make_shared<SequentialSampler>(dataset.size());
}

// Allocates (B, ...) for `first` (page-locked for `pinned_device` when `pinned`) and copies example
// tensors into rows of it.
Tensor stack_rows(const std::vector<Example>& examples, Tensor Example::*field, const char* name, bool pinned,
                  int pinned_device) {
  const Tensor& first = examples[0].*field;
  Shape shape{static_cast<int64_t>(examples.size())};
  shape.insert(shape.end(), first.shape().begin(), first.shape().end());
  Tensor out = pinned ? empty_pinned(shape, first.dtype(), pinned_device) : Tensor(shape, first.dtype());  // (B, ...)
  const size_t row_bytes = static_cast<size_t>(first.numel()) * element_size(first.dtype());
  auto* dst = static_cast<char*>(out.raw_data());
  for (size_t j = 0; j < examples.size(); ++j) {
    const Tensor& t = examples[j].*field;
    if (!t.defined() || t.shape() != first.shape() || t.dtype() != first.dtype() || !t.device().is_cpu())
      throw std::invalid_argument(std::string("collate: example ") + std::to_string(j) + " has " + name + " " +
                                  (t.defined() ? t.desc() : std::string("undefined")) + " but example 0 has " +
                                  first.desc() + "; all " + name + "s of a batch must share shape, dtype and device");
    const Tensor c = t.contiguous();
    std::memcpy(dst + j * row_bytes, c.raw_data(), row_bytes);
  }
  return out;
}

}  // namespace

Batch collate(const std::vector<Example>& examples, bool pin_memory, int pin_memory_device) {
  if (examples.empty()) throw std::invalid_argument("collate: no examples");
  if (!examples[0].input.defined() || !examples[0].target.defined())
    throw std::invalid_argument("collate: example 0 has an undefined input or target");
  Batch b;
  b.input = stack_rows(examples, &Example::input, "input", pin_memory, pin_memory_device);
  b.target = stack_rows(examples, &Example::target, "target", pin_memory, pin_memory_device);
  return b;
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options,
                       std::shared_ptr<Sampler> sampler)
    : dataset_(dataset ? std::move(dataset) : throw std::invalid_argument("DataLoader: dataset is null")),
      options_(std::move(options)),
      batch_sampler_(default_sampler(*dataset_, options_, std::move(sampler)),
                     {.batch_size = options_.batch_size, .drop_last = options_.drop_last}) {
  if (options_.num_workers < 0)
    throw std::invalid_argument("DataLoader: num_workers must be >= 0, got " + std::to_string(options_.num_workers));
  if (options_.prefetch_factor < 1)
    throw std::invalid_argument("DataLoader: prefetch_factor must be >= 1, got " +
                                std::to_string(options_.prefetch_factor));
  if (options_.pin_memory && options_.collate_fn)
    throw std::invalid_argument(
        "DataLoader: pin_memory works with the default collate only; with a collate_fn, "
        "make page-locked tensors inside it");
  if (options_.pin_memory && kernels::cuda::device_count() == 0)
    throw std::invalid_argument(
        std::string("DataLoader: pin_memory needs a CUDA device, and ") +
        (kernels::cuda::compiled_with_cuda() ? "none is present" : "minidl was built without CUDA"));
  if (options_.pin_memory) {
    if (options_.pin_memory_device < 0) options_.pin_memory_device = kernels::cuda::current_device();
    if (options_.pin_memory_device >= kernels::cuda::device_count())
      throw std::invalid_argument("DataLoader: pin_memory_device " + std::to_string(options_.pin_memory_device) +
                                  " does not exist (" + std::to_string(kernels::cuda::device_count()) +
                                  " visible device(s))");
  }
}

DataLoader::~DataLoader() { stop_workers(); }

void DataLoader::set_epoch(int64_t epoch) {
  reset();
  batch_sampler_.set_epoch(epoch);
}

void DataLoader::reset() {
  stop_workers();
  active_ = false;
}

Batch DataLoader::load_batch(int64_t k) const {
  const std::vector<int64_t>& indices = batches_[static_cast<size_t>(k)];
  std::vector<Example> examples;
  examples.reserve(indices.size());
  for (int64_t i : indices) {
    Example ex = dataset_->get(i);
    if (options_.transform)
      ex.input =
          options_.transform->apply(ex.input, SampleKey{.seed = options_.seed, .epoch = pass_epoch_, .index = i});
    examples.push_back(std::move(ex));
  }
  // pinned: straight into page-locked memory
  Batch b = options_.collate_fn ? options_.collate_fn(examples)
                                : collate(examples, options_.pin_memory, options_.pin_memory_device);
  b.indices = indices;
  b.index = k;
  return b;
}

void DataLoader::start_pass() {
  stop_workers();
  batches_ = batch_sampler_.batches();
  pass_epoch_ = epoch();
  next_to_load_ = 0;
  next_to_yield_ = 0;
  stop_ = false;
  ready_.clear();
  active_ = true;
  const int64_t n = std::min<int64_t>(options_.num_workers, static_cast<int64_t>(batches_.size()));
  for (int64_t w = 0; w < n; ++w) workers_.emplace_back([this] { worker_loop(); });
}

void DataLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  ready_.clear();
}

void DataLoader::worker_loop() {
  // the rank's device, before any CUDA call of this thread (else the runtime would pick device 0)
  if (options_.pin_memory) kernels::cuda::set_device(options_.pin_memory_device);
  const int64_t n = static_cast<int64_t>(batches_.size());
  const int64_t window = static_cast<int64_t>(options_.num_workers) * options_.prefetch_factor;
  while (true) {
    int64_t k;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_cv_.wait(lock, [&] { return stop_ || next_to_load_ >= n || next_to_load_ < next_to_yield_ + window; });
      if (stop_ || next_to_load_ >= n) return;
      k = next_to_load_++;
    }
    if (autograd::trace::enabled()) autograd::trace::name_thread_once("data worker");
    const autograd::trace::Span load("load batch", autograd::trace::kData);
    Loaded result;
    try {
      result.batch = load_batch(k);
    } catch (...) {
      result.error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ready_.emplace(k, std::move(result));
    }
    ready_cv_.notify_one();
  }
}

std::optional<Batch> DataLoader::next() {
  const autograd::trace::Span wait("next batch", autograd::trace::kData);  // what the training loop waits
  if (!active_) start_pass();
  if (next_to_yield_ >= static_cast<int64_t>(batches_.size())) {  // pass over
    reset();
    return std::nullopt;
  }
  if (options_.num_workers == 0) {
    try {
      return load_batch(next_to_yield_++);
    } catch (...) {
      reset();
      throw;
    }
  }
  Loaded result;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_cv_.wait(lock, [&] { return ready_.count(next_to_yield_) > 0; });
    auto it = ready_.find(next_to_yield_);
    result = std::move(it->second);
    ready_.erase(it);
    ++next_to_yield_;
  }
  work_cv_.notify_all();  // the window moved: a waiting worker may claim the next batch
  if (result.error) {
    reset();
    std::rethrow_exception(result.error);
  }
  return std::move(result.batch);
}

DataLoader::Iterator DataLoader::begin() {
  reset();
  return Iterator(this, next());
}

}  // namespace minidl::data
