// tests/data/test_dataloader.cpp — batching, shuffling, drop_last, custom samplers, and the
// worker threads: identical batches (bit for bit) with 0, 1, 2 or 3 workers, a bounded prefetch
// window, errors rethrown in order, clean shutdown mid-epoch.
#include <atomic>
#include <chrono>
#include <thread>

#include "tests/common/testing.h"
#include "minidl/data/dataloader.h"
#include "minidl/kernels/cuda_api.h"

namespace minidl::data {
namespace {

using minidl::testing::expect_equal;

// n examples: input (2, 3) filled with i + k / 10, target i.
std::shared_ptr<TensorDataset> make_dataset(int64_t n) {
  Tensor inputs({n, 2, 3}, DType::Float32);
  float* p = inputs.data<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < 6; ++k) p[i * 6 + k] = static_cast<float>(i) + static_cast<float>(k) / 10.0f;
  return std::make_shared<TensorDataset>(inputs, arange(n));
}

// n images (2, 4, 4) with value i * 100 + k, target i.
std::shared_ptr<TensorDataset> make_images(int64_t n) {
  Tensor inputs({n, 2, 4, 4}, DType::Float32);
  float* p = inputs.data<float>();
  for (int64_t k = 0; k < n * 32; ++k) p[k] = static_cast<float>((k / 32) * 100 + k % 32);
  return std::make_shared<TensorDataset>(inputs, arange(n));
}

// Wraps a dataset: counts get() calls, sleeps, and throws at one index.
class InstrumentedDataset : public Dataset {
 public:
  InstrumentedDataset(std::shared_ptr<const Dataset> base, int64_t throw_at = -1, int sleep_us = 0)
      : base_(std::move(base)), throw_at_(throw_at), sleep_us_(sleep_us) {}
  int64_t size() const override { return base_->size(); }
  Example get(int64_t i) const override {
    ++calls;
    if (sleep_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    if (i == throw_at_) throw std::runtime_error("cannot decode example " + std::to_string(i));
    return base_->get(i);
  }
  mutable std::atomic<int64_t> calls{0};

 private:
  std::shared_ptr<const Dataset> base_;
  int64_t throw_at_;
  int sleep_us_;
};

std::vector<Batch> all_batches(DataLoader& loader) {
  std::vector<Batch> out;
  for (auto& batch : loader) out.push_back(batch);
  return out;
}

TEST(DataLoader, SequentialBatchesStackInputsAndTargets) {
  DataLoader loader(make_dataset(10), {.batch_size = 4});
  EXPECT_EQ(loader.size(), 3);
  const std::vector<Batch> batches = all_batches(loader);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0].input.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(batches[0].target.shape(), (Shape{4}));
  EXPECT_EQ(batches[0].target.dtype(), DType::Int64);
  EXPECT_EQ(batches[1].target.to_vector<int64_t>(), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(batches[2].input.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(batches[2].indices, (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(batches[2].index, 2);
  EXPECT_FLOAT_EQ(batches[1].input.data<float>()[6 + 5], 5.5f);  // example 5, element 5
}

TEST(DataLoader, DropLastDropsTheShortBatch) {
  DataLoader loader(make_dataset(10), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(loader.size(), 2);
  const std::vector<Batch> batches = all_batches(loader);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[1].target.shape(), (Shape{4}));
}

TEST(DataLoader, ShuffleVisitsEveryExampleOnceInAnOrderThatChangesPerEpoch) {
  auto ds = make_dataset(20);
  DataLoader loader(ds, {.batch_size = 6, .shuffle = true, .seed = 11});
  auto order = [&] {
    std::vector<int64_t> seen;
    for (auto& b : loader) {
      const std::vector<int64_t> t = b.target.to_vector<int64_t>();
      EXPECT_EQ(t, b.indices) << "targets follow the sampled indices";
      seen.insert(seen.end(), t.begin(), t.end());
    }
    return seen;
  };
  const std::vector<int64_t> e0 = order();
  EXPECT_EQ(e0, randperm(20, RandomKey{11, 0}).to_vector<int64_t>());
  EXPECT_EQ(order(), e0) << "same epoch, same order";
  loader.set_epoch(1);
  const std::vector<int64_t> e1 = order();
  EXPECT_NE(e1, e0);
  EXPECT_EQ(e1, randperm(20, RandomKey{11, 1}).to_vector<int64_t>());
}

TEST(DataLoader, SameBatchesBitForBitWhateverTheNumberOfWorkers) {
  auto ds = make_images(37);
  const auto transform = std::make_shared<Compose>(std::vector<std::shared_ptr<const Transform>>{
      std::make_shared<RandomCrop>(RandomCropOptions{.size = 3, .padding = 1}),
      std::make_shared<RandomHorizontalFlip>(RandomHorizontalFlipOptions{})});
  std::vector<std::vector<Batch>> runs;
  for (int workers : {0, 1, 2, 3}) {
    DataLoader loader(ds, {.batch_size = 5,
                           .shuffle = true,
                           .num_workers = workers,
                           .seed = 3,
                           .prefetch_factor = 1,
                           .transform = transform});
    std::vector<Batch> batches;
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      loader.set_epoch(epoch);
      for (auto& b : loader) batches.push_back(b);
    }
    runs.push_back(std::move(batches));
  }
  for (size_t r = 1; r < runs.size(); ++r) {
    ASSERT_EQ(runs[r].size(), runs[0].size());
    for (size_t k = 0; k < runs[0].size(); ++k) {
      expect_equal(runs[r][k].input, runs[0][k].input, "input of batch " + std::to_string(k));
      expect_equal(runs[r][k].target, runs[0][k].target, "target of batch " + std::to_string(k));
    }
  }
  EXPECT_EQ(runs[0][0].input.shape(), (Shape{5, 2, 3, 3}));
}

TEST(DataLoader, TransformIsKeyedByDatasetIndexNotBatchPosition) {
  auto ds = make_images(8);
  const auto flip = std::make_shared<RandomHorizontalFlip>(RandomHorizontalFlipOptions{});
  DataLoader loader(ds, {.batch_size = 3, .shuffle = true, .num_workers = 2, .seed = 5, .transform = flip});
  loader.set_epoch(2);
  for (auto& b : loader)
    for (size_t j = 0; j < b.indices.size(); ++j) {
      const Tensor want = flip->apply(ds->get(b.indices[j]).input, {.seed = 5, .epoch = 2, .index = b.indices[j]});
      expect_equal(b.input[static_cast<int64_t>(j)].contiguous(), want.contiguous());
    }
}

TEST(DataLoader, EpochSetOnACustomSamplerAlsoKeysTheTransform) {
  auto ds = make_images(6);
  auto sampler = std::make_shared<RandomSampler>(6, 4);
  const auto crop = std::make_shared<RandomCrop>(RandomCropOptions{.size = 4, .padding = 2});
  DataLoader loader(ds, {.batch_size = 6, .seed = 4, .transform = crop}, sampler);
  sampler->set_epoch(3);  // as a training loop driving a DistributedSampler might
  EXPECT_EQ(loader.epoch(), 3);
  const Batch b = *loader.next();
  EXPECT_EQ(b.indices, randperm(6, RandomKey{4, 3}).to_vector<int64_t>());
  const Tensor want = crop->apply(ds->get(b.indices[0]).input, {.seed = 4, .epoch = 3, .index = b.indices[0]});
  expect_equal(b.input[0].contiguous(), want);
}

TEST(DataLoader, CustomSamplerDecidesTheOrder) {
  class Reversed : public Sampler {
   public:
    int64_t size() const override { return 5; }
    std::vector<int64_t> indices() const override { return {4, 3, 2, 1, 0}; }
  };
  DataLoader loader(make_dataset(5), {.batch_size = 2, .num_workers = 1}, std::make_shared<Reversed>());
  const std::vector<Batch> batches = all_batches(loader);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0].target.to_vector<int64_t>(), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(batches[2].target.to_vector<int64_t>(), (std::vector<int64_t>{0}));
  EXPECT_THROW_MSG(DataLoader(make_dataset(5), {.shuffle = true}, std::make_shared<Reversed>()), std::invalid_argument,
                   "mutually exclusive");
}

TEST(DataLoader, NextReturnsNulloptAtTheEndThenStartsOver) {
  DataLoader loader(make_dataset(4), {.batch_size = 2, .num_workers = 2});
  EXPECT_EQ(loader.next()->index, 0);
  EXPECT_EQ(loader.next()->index, 1);
  EXPECT_FALSE(loader.next().has_value());
  EXPECT_EQ(loader.next()->index, 0);
}

TEST(DataLoader, BreakingOutAndIteratingAgainStartsFromTheFirstBatch) {
  DataLoader loader(make_dataset(20), {.batch_size = 2, .num_workers = 2});
  for (auto& b : loader)
    if (b.index == 3) break;
  auto it = loader.begin();
  EXPECT_EQ(it->index, 0);
  EXPECT_EQ(all_batches(loader).size(), 10u);
}

TEST(DataLoader, PrefetchIsBoundedByWorkersTimesPrefetchFactor) {
  auto counting = std::make_shared<InstrumentedDataset>(make_dataset(100));
  DataLoader loader(counting, {.batch_size = 2, .num_workers = 2, .prefetch_factor = 2});
  ASSERT_TRUE(loader.next().has_value());
  // Consumed batch 0; the window of 2 * 2 batches ahead fills up (batches 1..4, 2 examples each)...
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (counting->calls.load() < 2 * 5 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(counting->calls.load(), 2 * 5);
  // ...and no further while the consumer does not take a batch.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(counting->calls.load(), 2 * 5);
  ASSERT_TRUE(loader.next().has_value());
  while (counting->calls.load() < 2 * 6 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(counting->calls.load(), 2 * 6);
}

TEST(DataLoader, DestroyingMidEpochJoinsWorkersWithoutDeadlock) {
  auto slow = std::make_shared<InstrumentedDataset>(make_dataset(400), -1, /*sleep_us=*/200);
  const auto start = std::chrono::steady_clock::now();
  for (int workers : {1, 2, 4}) {
    DataLoader loader(slow, {.batch_size = 4, .num_workers = workers});
    ASSERT_TRUE(loader.next().has_value());
    ASSERT_TRUE(loader.next().has_value());
  }  // destroyed with most of the epoch unread
  { DataLoader never_started(slow, {.batch_size = 4, .num_workers = 2}); }
  {
    DataLoader loader(slow, {.batch_size = 4, .num_workers = 2});
    loader.next();
    loader.set_epoch(1);  // abandons the pass
    EXPECT_EQ(loader.next()->index, 0);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  // Far fewer than the 400 examples per loader were loaded.
  EXPECT_LT(slow->calls.load(), 200);
}

TEST(DataLoader, WorkerExceptionIsRethrownAtItsBatchAfterTheEarlierOnes) {
  for (int workers : {0, 1, 2}) {
    auto bad = std::make_shared<InstrumentedDataset>(make_dataset(20), /*throw_at=*/9);
    DataLoader loader(bad, {.batch_size = 4, .num_workers = workers});
    EXPECT_EQ(loader.next()->index, 0) << workers << " workers";
    EXPECT_EQ(loader.next()->index, 1) << workers << " workers";
    EXPECT_THROW_MSG(loader.next(), std::runtime_error, "cannot decode example 9");
    // The failed pass is over; the next call starts a fresh one.
    EXPECT_EQ(loader.next()->index, 0) << workers << " workers";
  }
}

TEST(DataLoader, MismatchedExampleShapesNameTheExample) {
  std::vector<Example> examples{{zeros({2}), scalar_tensor(0, DType::Int64)},
                                {zeros({3}), scalar_tensor(1, DType::Int64)}};
  EXPECT_THROW_MSG(collate(examples), std::invalid_argument,
                   "collate: example 1 has input float32[3] on cpu but example 0 has float32[2] on cpu");
}

TEST(DataLoader, BadOptionsAreErrors) {
  EXPECT_THROW_MSG(DataLoader(make_dataset(3), {.batch_size = 0}), std::invalid_argument, "batch_size must be >= 1");
  EXPECT_THROW_MSG(DataLoader(make_dataset(3), {.num_workers = -1}), std::invalid_argument, "num_workers must be >= 0");
  EXPECT_THROW_MSG(DataLoader(nullptr, {}), std::invalid_argument, "dataset is null");
}

}  // namespace
}  // namespace minidl::data

using namespace minidl;

TEST(DataLoaderPinMemory, WithoutACudaDeviceIsAClearError) {
  if (minidl::kernels::cuda::device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  auto ds = std::make_shared<data::TensorDataset>(zeros({4, 2}), zeros({4}, DType::Int64));
  EXPECT_THROW_MSG(data::DataLoader(ds, {.batch_size = 2, .pin_memory = true}), std::invalid_argument,
                   "DataLoader: pin_memory needs a CUDA device");
}

TEST(DataLoaderPinMemory, BatchesAreIdenticalToUnpinnedOnes) {
  if (minidl::kernels::cuda::device_count() == 0) GTEST_SKIP() << "pin_memory needs a CUDA device; none is present";
  auto ds = std::make_shared<data::TensorDataset>(randn({6, 3}, RandomKey{1, 0}), arange(6));
  data::DataLoader plain(ds, {.batch_size = 4}), pinned(ds, {.batch_size = 4, .pin_memory = true});
  auto a = plain.next(), b = pinned.next();
  minidl::testing::expect_equal(b->input, a->input);
  minidl::testing::expect_equal(b->target, a->target);
}

TEST(DataLoaderPinMemory, BatchesAreCollatedIntoReusedPinnedBuffers) {
  if (minidl::kernels::cuda::device_count() == 0) GTEST_SKIP() << "pin_memory needs a CUDA device; none is present";
  // Eight batches of 16 images per epoch, two workers: after the first epoch the pinned cache
  // holds every buffer the window needs, so the second epoch makes no cudaMallocHost; and each
  // batch is written once, into pinned memory (2 buffers a batch, not 4: no pinned copy of a
  // pageable batch).
  auto ds = data::make_images(128);
  data::DataLoader loader(ds, {.batch_size = 16, .num_workers = 2, .pin_memory = true});
  for (auto& batch : loader) (void)batch;  // epoch 0 fills the cache
  const auto warm = minidl::kernels::cuda::pinned_memory_stats();
  int64_t batches = 0;
  for (auto& batch : loader) {
    ++batches;
    EXPECT_EQ(batch.input.data<float>()[0], static_cast<float>(batch.indices[0] * 100));
  }
  const auto after = minidl::kernels::cuda::pinned_memory_stats();
  EXPECT_EQ(batches, 8);
  EXPECT_EQ(after.segment_allocs, warm.segment_allocs) << "a pinned segment allocated in the second epoch";
  EXPECT_EQ(after.cache_hits - warm.cache_hits, 2 * batches) << "one pinned input and one pinned target per batch";
}

namespace {
// Rows of zeros whose first element is the CUDA device current on the thread that loaded them.
class DeviceRecordingDataset : public data::Dataset {
 public:
  int64_t size() const override { return 8; }
  data::Example get(int64_t) const override {
    Tensor in = zeros({2});
    in.data<float>()[0] = static_cast<float>(minidl::kernels::cuda::current_device());
    return {in, zeros({1}, DType::Int64)};
  }
};
}  // namespace

// Each worker makes the loader's pin_memory_device current before loading, and the batches come
// from that device's pinned cache (the last device: with several GPUs not the runtime's default 0).
TEST(DataLoaderPinMemory, WorkersUseThePinMemoryDevice) {
  if (minidl::kernels::cuda::device_count() == 0) GTEST_SKIP() << "pin_memory needs a CUDA device; none is present";
  const int last = minidl::kernels::cuda::device_count() - 1;
  data::DataLoader loader(std::make_shared<DeviceRecordingDataset>(),
                          {.batch_size = 2, .num_workers = 2, .pin_memory = true, .pin_memory_device = last});
  const size_t before = minidl::kernels::cuda::pinned_memory_stats(last).allocated;
  int64_t batches = 0;
  for (auto& batch : loader) {
    ++batches;
    EXPECT_EQ(batch.input.data<float>()[0], static_cast<float>(last));
    EXPECT_GT(minidl::kernels::cuda::pinned_memory_stats(last).allocated, before);
  }
  EXPECT_EQ(batches, 4);
}

TEST(DataLoaderPinMemory, DeviceDefaultsToTheCurrentOneAndMustExist) {
  if (minidl::kernels::cuda::device_count() == 0) GTEST_SKIP() << "pin_memory needs a CUDA device; none is present";
  auto ds = std::make_shared<data::TensorDataset>(zeros({4, 2}), zeros({4}, DType::Int64));
  data::DataLoader loader(ds, {.batch_size = 2, .pin_memory = true});
  EXPECT_EQ(loader.options().pin_memory_device, minidl::kernels::cuda::current_device());
  EXPECT_THROW_MSG(
      data::DataLoader(
          ds, {.batch_size = 2, .pin_memory = true, .pin_memory_device = minidl::kernels::cuda::device_count()}),
      std::invalid_argument, "does not exist");
}
