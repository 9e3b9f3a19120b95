// data/dataloader.h — DataLoader: turns a Dataset and a Sampler into batches of tensors.
//
//   data::DataLoader loader(dataset, {.batch_size = 128, .shuffle = true, .num_workers = 2, .seed = 0});
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     loader.set_epoch(epoch);                       // new shuffle, new augmentation
//     for (auto& batch : loader) { ... batch.input (B, ...), batch.target (B) ... }
//   }
//
// Batches are collated by stacking: inputs (B, ...) and targets (B) (or (B, ...)), or by the
// options' collate_fn. With num_workers > 0, background threads load batches ahead of the
// consumer: each worker claims the next unclaimed batch index, loads and collates it, and
// stores it under that index; the consumer takes batch 0, 1, 2, ... in order. At most
// num_workers * prefetch_factor batches are claimed but not yet consumed. The order — and every
// bit of every batch — is therefore the same whatever num_workers is (0 loads in the calling
// thread). An exception thrown while loading a batch is rethrown to the consumer when it reaches
// that batch. Destroying the loader (or set_epoch, or begin()) mid-epoch stops and joins the
// workers.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "minidl/data/dataset.h"
#include "minidl/data/sampler.h"
#include "minidl/data/transforms.h"

namespace minidl::data {

struct Batch {
  Tensor input;  // (B, ...) stacked example inputs
  Tensor target;  // (B) or (B, ...) stacked example targets
  std::vector<int64_t> indices;  // the B dataset indices, in batch order
  int64_t index = 0;  // position of this batch in the epoch
};

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;  // RandomSampler(seed), reshuffled by set_epoch; exclusive with a custom sampler
  bool drop_last = false;  // drop a last batch smaller than batch_size
  int num_workers = 0;  // background loading threads; 0 = load in the calling thread
  uint64_t seed = 0;  // for shuffling and for the transform's SampleKey
  int prefetch_factor = 2;  // batches in flight per worker
  // Applied to each example's input on the worker, keyed by (seed, epoch, dataset index).
  std::shared_ptr<const Transform> transform = nullptr;
  // Collate into page-locked host memory, so copies to a GPU run at full speed (needs a CUDA
  // device: without one the constructor throws saying so). The examples are copied straight into
  // it (no pageable batch first); the memory comes from the pinned caching allocator
  // (kernels/cuda_api.h), so once the first batches are freed their buffers are reused and no
  // cudaMallocHost happens per batch.
  bool pin_memory = false;
  // The GPU the pinned batches are for (PyTorch's pin_memory_device): its context allocates them,
  // and every worker thread makes it current before loading, so a rank never opens a context on
  // another rank's GPU. -1: the constructing thread's current device (options() then holds it).
  int pin_memory_device = -1;
  // Makes one Batch from the examples of a batch (in sampler order), on the worker thread, as
  // PyTorch's collate_fn: e.g. padding variable-length inputs. Empty: collate (stacking). The
  // loader then sets the Batch's indices and index. Not with pin_memory (pin inside the function).
  std::function<Batch(const std::vector<Example>&)> collate_fn = nullptr;
};

// Stacks examples whose inputs (and targets) share one shape and dtype, into page-locked memory
// when pin_memory (tensor/pinned.h: needs a CUDA device; pinned for pin_memory_device, -1: the
// current one). Throws naming the first example that differs.
Batch collate(const std::vector<Example>& examples, bool pin_memory = false, int pin_memory_device = -1);

class DataLoader {
 public:
  // sampler: which indices in which order (e.g. dist::DistributedSampler); by default a
  // SequentialSampler, or a RandomSampler(seed) when options.shuffle.
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {},
             std::shared_ptr<Sampler> sampler = nullptr);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Batches per epoch.
  int64_t size() const { return batch_sampler_.size(); }
  // Sets the sampler's epoch, which also keys the transforms; stops a pass in progress.
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return batch_sampler_.sampler()->epoch(); }
  const DataLoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }

  // The next batch of the current pass (starting a pass if none is in progress), or nullopt
  // when the pass is over; the call after that starts the next pass.
  std::optional<Batch> next();
  // Abandons the pass in progress (joins the workers); the next next() starts from batch 0.
  void reset();

  class Iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    Iterator() = default;
    Batch& operator*() const { return *current_; }
    Batch* operator->() const { return &*current_; }
    Iterator& operator++() {
      current_ = loader_->next();
      return *this;
    }
    void operator++(int) { ++*this; }
    bool operator==(std::default_sentinel_t) const { return !current_.has_value(); }

   private:
    friend class DataLoader;
    Iterator(DataLoader* loader, std::optional<Batch> first) : loader_(loader), current_(std::move(first)) {}
    DataLoader* loader_ = nullptr;
    mutable std::optional<Batch> current_;
  };
  // Starts a new pass over the current epoch (abandoning one in progress).
  Iterator begin();
  std::default_sentinel_t end() const { return {}; }

 private:
  struct Loaded {
    std::optional<Batch> batch;
    std::exception_ptr error;
  };
  Batch load_batch(int64_t k) const;  // batch k of the pass, loaded and collated
  void start_pass();
  void stop_workers();
  void worker_loop();

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  BatchSampler batch_sampler_;

  // The pass in progress. batches_ and pass_epoch_ are fixed while workers run.
  bool active_ = false;
  std::vector<std::vector<int64_t>> batches_;
  int64_t pass_epoch_ = 0;
  std::vector<std::thread> workers_;

  // Shared with the workers, guarded by mutex_.
  std::mutex mutex_;
  std::condition_variable work_cv_;  // workers wait here for room in the window or stop_
  std::condition_variable ready_cv_;  // the consumer waits here for ready_[next_to_yield_]
  int64_t next_to_load_ = 0;  // first batch index no worker has claimed
  int64_t next_to_yield_ = 0;  // the batch the consumer takes next
  bool stop_ = false;
  std::map<int64_t, Loaded> ready_;  // loaded batches (or their errors) not yet consumed
};

}  // namespace minidl::data
