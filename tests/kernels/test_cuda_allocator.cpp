// tests/kernels/test_cuda_allocator.cpp — the caching allocator on a real device: steady-state
// reuse makes no cudaMalloc, statistics, empty_cache, the memory-fraction cap's error message,
// record_stream on the communication stream, pinned host tensors per device. (Its logic is also
// tested without a GPU in test_caching_allocator.cpp.)
// Skipped, saying why, without a device.
#include "minidl/kernels/caching_allocator.h"
#include "minidl/tensor/pinned.h"
#include "minidl/tensor/tensor_all.h"
#include "tests/kernels/cuda_testing.h"

using namespace minidl;
namespace kc = minidl::kernels::cuda;

TEST(CudaAllocator, SteadyStateAllocationsAreServedFromTheCache) {
  MINIDL_SKIP_WITHOUT_GPU();
  { Tensor warm({1 << 20}, DType::Float32, Device::cuda(0)); }
  const int64_t before = kc::memory_stats(0).segment_allocs;
  for (int i = 0; i < 10; ++i) Tensor t({1 << 20}, DType::Float32, Device::cuda(0));
  EXPECT_EQ(kc::memory_stats(0).segment_allocs, before);
}

TEST(CudaAllocator, StatsCountLiveBlocksAndPeak) {
  MINIDL_SKIP_WITHOUT_GPU();
  kc::reset_peak_memory_stats(0);
  const size_t base = kc::memory_stats(0).allocated;
  {
    Tensor t({4 << 20}, DType::Float32, Device::cuda(0));  // 16 MiB
    EXPECT_EQ(kc::memory_stats(0).allocated, base + (size_t(16) << 20));
  }
  EXPECT_EQ(kc::memory_stats(0).allocated, base);
  EXPECT_GE(kc::memory_stats(0).peak_allocated, base + (size_t(16) << 20));
  // The freed 16 MiB block is its own (large) segment, cached until empty_cache gives it back.
  const kc::MemoryStats cached = kc::memory_stats(0);
  EXPECT_GE(cached.reserved, cached.allocated + (size_t(16) << 20));
  kc::empty_cache(0);
  const kc::MemoryStats emptied = kc::memory_stats(0);
  EXPECT_LE(emptied.reserved, cached.reserved - (size_t(16) << 20)) << "empty_cache kept the unused 16 MiB segment";
  EXPECT_GE(emptied.segment_frees, cached.segment_frees + 1);
  EXPECT_GE(emptied.reserved, emptied.allocated);
  EXPECT_EQ(emptied.allocated, base) << "empty_cache must not touch live blocks";
  // released, not cached: the same request needs a new segment now
  { Tensor again({4 << 20}, DType::Float32, Device::cuda(0)); }
  EXPECT_EQ(kc::memory_stats(0).segment_allocs, emptied.segment_allocs + 1);
}

TEST(CudaAllocator, CapGivesAClearOutOfMemoryError) {
  MINIDL_SKIP_WITHOUT_GPU();
  kc::empty_cache(0);
  kc::set_memory_fraction(0.01, 0);  // ~1.4 GiB on an H200
  try {
    Tensor t({int64_t(1) << 30}, DType::Float32, Device::cuda(0));  // 4 GiB
    ADD_FAILURE() << "expected an out-of-memory error";
  } catch (const kernels::OutOfMemoryError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("tried to allocate 4.00 GiB"), std::string::npos) << m;
    EXPECT_NE(m.find("allocated"), std::string::npos) << m;
    EXPECT_NE(m.find("cap"), std::string::npos) << m;
  }
  kc::set_memory_fraction(1.0, 0);
}

TEST(CudaAllocator, PinnedTensorsCopyToTheDevice) {
  MINIDL_SKIP_WITHOUT_GPU();
  const Tensor x = randn({1000}, RandomKey{1, 1});
  const Tensor p = pin_memory(x);
  EXPECT_TRUE(p.device().is_cpu());
  minidl::testing::expect_equal(p.to(Device::cuda(0)).cpu(), x, "pinned round trip");
}

TEST(CudaAllocator, DeviceSelectionFollowsLocalRank) {
  MINIDL_SKIP_WITHOUT_GPU();
  setenv("LOCAL_RANK", "0", 1);
  EXPECT_EQ(kc::select_device_from_env(), 0);
  unsetenv("LOCAL_RANK");
}

// A block recorded on the communication stream, freed while that stream is still held back behind
// a queue of matmuls, is not handed to the next tensor of its size; once the device is idle it is.
TEST(CudaAllocator, BlockRecordedOnTheCommunicationStreamIsNotReusedUntilThatStreamGetsThere) {
  MINIDL_SKIP_WITHOUT_GPU();
  const Tensor a = ones({4096, 4096}, DType::Float32, Device::cuda(0));
  kc::synchronize(0);
  kc::empty_cache(0);
  const int64_t n = (int64_t(5) << 20) / 4 + 1;  // 5 MiB + 4 bytes: its own 6 MiB segment
  void* first = nullptr;
  {
    Tensor bucket({n}, DType::Float32, Device::cuda(0));
    first = bucket.storage()->data();
    Tensor busy = a;
    for (int i = 0; i < 8; ++i) busy = matmul(busy, a);  // ~1 TFLOP queued on the compute stream
    kc::stream_wait_stream(kc::communication_stream(0), kc::compute_stream(0));
    kc::record_stream(first, 0, kc::communication_stream(0));
  }
  Tensor again({n}, DType::Float32, Device::cuda(0));
  EXPECT_NE(again.storage()->data(), first) << "reused while the communication stream may still use it";
  kc::synchronize(0);
  Tensor later({n}, DType::Float32, Device::cuda(0));
  EXPECT_EQ(later.storage()->data(), first) << "not reused once the communication stream got past the free";
}

TEST(CudaAllocator, PinnedBlocksComeFromTheirDevicesCache) {
  MINIDL_SKIP_WITHOUT_GPU();
  const int last = kc::device_count() - 1;
  const size_t before = kc::pinned_memory_stats(last).allocated;
  {
    const Tensor p = pin_memory(randn({1000}, RandomKey{1, 2}), last);
    EXPECT_EQ(kc::pinned_memory_stats(last).allocated, before + 4096) << "4000 bytes rounded to 512";
  }
  EXPECT_EQ(kc::pinned_memory_stats(last).allocated, before);
  EXPECT_THROW((void)empty_pinned({4}, DType::Float32, kc::device_count()), std::runtime_error);
}
