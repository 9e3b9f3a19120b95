// tests/kernels/test_cuda_runtime.cpp — the first CUDA kernel (axpy) against its CPU loop, the
// MINIDL_CUDA_SYNC debug mode, the pinned-memory cache, and (with two devices) that runtime calls
// restore the current device and that cross-device copies wait for the source device's work.
// Skips, saying why, when minidl was built without CUDA or no device is present.
#include "minidl/kernels/cuda_api.h"
#include "minidl/tensor/pinned.h"
#include "minidl/tensor/tensor_all.h"
#include "tests/common/testing.h"

using namespace minidl;

namespace {
bool skip_without_gpu() {
  if (!kernels::cuda::compiled_with_cuda()) {
    std::cout << "[  SKIPPED ] built without CUDA (nvcc was not found at configure time)\n";
    return true;
  }
  if (kernels::cuda::device_count() == 0) {
    std::cout << "[  SKIPPED ] no CUDA device present on this machine\n";
    return true;
  }
  return false;
}
}  // namespace

TEST(CudaRuntime, AxpyMatchesCpuLoop) {
  if (skip_without_gpu()) GTEST_SKIP() << "no CUDA device";
  const int64_t n = 1000;
  Tensor x = randn({n}, RandomKey{1, 0});
  Tensor y = randn({n}, RandomKey{1, 1});
  Tensor expected = y.clone();
  float* e = expected.data<float>();
  const float* xp = x.data<float>();
  for (int64_t i = 0; i < n; ++i) e[i] = 2.5f * xp[i] + e[i];
  Tensor xd = x.to(Device::cuda(0)), yd = y.to(Device::cuda(0));
  kernels::cuda::axpy(2.5f, static_cast<const float*>(xd.raw_data()), static_cast<float*>(yd.raw_data()), n, 0);
  minidl::testing::expect_close(yd.cpu(), expected, 1e-6, 1e-6, "axpy");
}

TEST(CudaRuntime, DeviceCountIsZeroOrMoreWithoutThrowing) { EXPECT_GE(kernels::cuda::device_count(), 0); }

// MINIDL_CUDA_SYNC=1 (here switched on in-process): every launch is followed by a synchronisation
// that would name the op of a faulting kernel; results are unchanged.
TEST(CudaRuntime, SyncAfterKernelsModeGivesTheSameResults) {
  if (skip_without_gpu()) GTEST_SKIP() << "no CUDA device";
  const bool before = kernels::cuda::sync_after_kernels();
  kernels::cuda::set_sync_after_kernels(true);
  const Tensor a = randn({33, 17}, RandomKey{2, 0}), b = randn({17, 9}, RandomKey{2, 1});
  const Tensor ga = a.to(Device::cuda(0)), gb = b.to(Device::cuda(0));
  minidl::testing::expect_close(matmul(ga, gb).cpu(), matmul(a, b), 1e-5, 1e-5, "matmul, synchronised");
  minidl::testing::expect_close((ga * 2.0 + 1.0).cpu(), a * 2.0 + 1.0, 0, 0, "element-wise, synchronised");
  minidl::testing::expect_close(sum(ga).cpu(), sum(a), 1e-5, 1e-5, "sum, synchronised");
  kernels::cuda::set_sync_after_kernels(before);
}

// Runtime calls that switch devices internally (stream set-up, the allocator's segments, copies,
// empty_cache) restore the caller's current device. Needs two devices to observe a switch.
TEST(CudaMultiGpu, RuntimeCallsRestoreTheCurrentDevice) {
  if (skip_without_gpu()) GTEST_SKIP() << "no CUDA device";
  if (kernels::cuda::device_count() < 2) GTEST_SKIP() << "needs two CUDA devices to observe a device switch";
  kernels::cuda::set_device(1);
  const Tensor x = randn({1000}, RandomKey{3, 0});
  const Tensor g = x.to(Device::cuda(0));  // allocates (a segment) and copies on cuda:0
  EXPECT_EQ(kernels::cuda::current_device(), 1) << "after an allocation and a copy on cuda:0";
  minidl::testing::expect_close(g.cpu(), x, 0, 0, "round trip through cuda:0");
  kernels::cuda::empty_cache(0);
  EXPECT_EQ(kernels::cuda::current_device(), 1) << "after empty_cache(0)";
  kernels::cuda::set_device(0);
}

// A copy from cuda:0 to cuda:1 is ordered after cuda:0's queued work: a chain of kernels still
// running on cuda:0 writes the source, the copies are issued at once (Tensor::to and copy_), and
// both see the chain's final value.
TEST(CudaMultiGpu, CrossDeviceCopiesWaitForTheSourceDevicesWork) {
  if (skip_without_gpu()) GTEST_SKIP() << "no CUDA device";
  if (kernels::cuda::device_count() < 2) GTEST_SKIP() << "needs two CUDA devices for a cross-device copy";
  const int64_t n = int64_t(1) << 24;
  Tensor a = zeros({n}).to(Device::cuda(0));
  for (int i = 0; i < 50; ++i) a = a + 1.0;  // queued on cuda:0's compute stream
  const Tensor b = a.to(Device::cuda(1));
  Tensor c = zeros({n}).to(Device::cuda(1));
  c.copy_(a * 2.0);
  EXPECT_EQ(b.device(), Device::cuda(1));
  minidl::testing::expect_close(b.cpu(), zeros({n}) + 50.0, 0, 0, "to(cuda:1) after 50 adds on cuda:0");
  minidl::testing::expect_close(c.cpu(), zeros({n}) + 100.0, 0, 0, "copy_ into cuda:1 after the adds on cuda:0");
}

// Pinned batches (DataLoader pin_memory) come from a cache: the same size again is no new
// cudaMallocHost, and the memory works for copies both ways.
TEST(CudaRuntime, PinnedMemoryIsCachedAndReused) {
  if (skip_without_gpu()) GTEST_SKIP() << "no CUDA device";
  const Tensor x = randn({256, 784}, RandomKey{4, 0});
  (void)pin_memory(x);  // warm: at most one segment for this size
  const auto before = kernels::cuda::pinned_memory_stats();
  for (int i = 0; i < 10; ++i) {
    const Tensor p = pin_memory(x);
    minidl::testing::expect_close(p.to(Device::cuda(0)).cpu(), x, 0, 0, "pinned round trip");
  }
  const auto after = kernels::cuda::pinned_memory_stats();
  EXPECT_EQ(after.segment_allocs, before.segment_allocs) << "a pinned batch of the same size allocated anew";
  EXPECT_GE(after.cache_hits - before.cache_hits, 10);
}
