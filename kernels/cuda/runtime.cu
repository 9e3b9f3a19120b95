// kernels/cuda/runtime.cu — devices, streams, copies, pinned memory and the allocator glue:
// per device, one caching allocator (kernels/caching_allocator.h over cudaMalloc/cudaFree), one
// compute stream (every minidl kernel) and one communication stream (NCCL), created on first use.
// Plus axpy, the first kernel. Every call checks its status and names what failed.
// Tested by tests/kernels/test_cuda_runtime.cpp and test_cuda_allocator.cpp (skip without a device).
#include <cuda_runtime.h>

#include <array>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "kernels/caching_allocator.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda_api.h"

namespace minidl::kernels::cuda {

namespace {

constexpr int kMaxDevices = 64;

struct DeviceState {
  std::once_flag once;
  std::unique_ptr<CachingAllocator> allocator;
  cudaStream_t compute = nullptr;
  cudaStream_t comm = nullptr;
};
std::array<DeviceState, kMaxDevices>& states() {
  // never destroyed: freeing device memory during static destruction races the CUDA runtime's own teardown
  static auto* s = new std::array<DeviceState, kMaxDevices>();
  return *s;
}

DeviceState& state(int device) {
  require_device(device, "cuda");
  DeviceState& s = states()[device];
  std::call_once(s.once, [&] {
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    // compute: a blocking stream, so it is also ordered with legacy default-stream work;
    // comm: non-blocking, ordered with compute only through explicit events.
    check_cuda(cudaStreamCreateWithFlags(&s.compute, cudaStreamDefault), "cudaStreamCreate (compute)");
    check_cuda(cudaStreamCreateWithFlags(&s.comm, cudaStreamNonBlocking), "cudaStreamCreate (communication)");
    size_t free_b = 0, total_b = 0;
    check_cuda(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    SegmentSource src{
        [device](size_t n) -> void* {
          cudaSetDevice(device);
          void* p = nullptr;
          if (cudaMalloc(&p, n) != cudaSuccess) {
            cudaGetLastError();  // clear the error: the allocator frees its cache and retries
            return nullptr;
          }
          return p;
        },
        [device](void* p) {
          cudaSetDevice(device);
          cudaDeviceSynchronize();  // a cached block may still be read by queued kernels
          cudaFree(p);
        }};
    s.allocator = std::make_unique<CachingAllocator>("cuda:" + std::to_string(device), total_b, std::move(src));
    if (const char* f = std::getenv("MINIDL_CUDA_MEMORY_FRACTION")) s.allocator->set_memory_fraction(std::atof(f));
  });
  return s;
}

__global__ void axpy_kernel(float a, const float* x, float* y, long n) {
  const long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
}  // namespace

bool compiled_with_cuda() { return true; }

int device_count() {
  static const int n = [] {
    int c = 0;
    if (cudaGetDeviceCount(&c) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky "no driver" error
      return 0;
    }
    return c;
  }();
  return n;
}

void require_device(int device, const char* op) {
  const int n = device_count();
  if (n == 0)
    throw std::runtime_error(std::string(op) + ": no CUDA device present (no driver, no GPU, or CUDA_VISIBLE_DEVICES "
                                               "hides them all); cannot use cuda:" + std::to_string(device));
  if (device < 0 || device >= n || device >= kMaxDevices)
    throw std::runtime_error(std::string(op) + ": cuda:" + std::to_string(device) + " does not exist (" +
                             std::to_string(n) + " visible device(s))");
}

std::string device_name(int index) {
  require_device(index, "device_name");
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
  return prop.name;
}

void set_device(int device) {
  require_device(device, "set_device");
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
}

int current_device() {
  int d = 0;
  check_cuda(cudaGetDevice(&d), "cudaGetDevice");
  return d;
}

int select_device_from_env() {
  const int n = device_count();
  require_device(0, "select_device_from_env");
  const char* lr = std::getenv("LOCAL_RANK");
  const int local_rank = lr ? std::atoi(lr) : 0;
  const int device = local_rank % n;
  set_device(device);
  return device;
}

cudaStream_t current_compute_stream() { return state(current_device()).compute; }

void* device_malloc(size_t nbytes, int device) {
  DeviceState& s = state(device);
  return s.allocator->allocate(nbytes, s.compute);
}

void device_free(void* p, int device) {
  if (p == nullptr || device < 0 || device >= kMaxDevices) return;
  DeviceState& s = states()[device];
  if (s.allocator) s.allocator->free(p);
}

MemoryStats memory_stats(int device) {
  const CachingAllocatorStats a = state(device).allocator->stats();
  return {a.allocated, a.reserved, a.peak_allocated, a.peak_reserved, a.cap, a.segment_allocs, a.segment_frees,
          a.cache_hits};
}
void reset_peak_memory_stats(int device) { state(device).allocator->reset_peak(); }
void empty_cache(int device) {
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  state(device).allocator->empty_cache();
}
void set_memory_fraction(double fraction, int device) { state(device).allocator->set_memory_fraction(fraction); }

void memcpy(void* dst, const void* src, size_t nbytes, int kind, int device) {
  if (nbytes == 0) return;
  if (device < 0) device = current_device();
  DeviceState& s = state(device);
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  const cudaMemcpyKind k = kind == 0 ? cudaMemcpyHostToDevice
                           : kind == 1 ? cudaMemcpyDeviceToHost
                                       : cudaMemcpyDeviceToDevice;
  check_cuda(cudaMemcpyAsync(dst, src, nbytes, k, s.compute), "cudaMemcpyAsync");
  check_cuda(cudaStreamSynchronize(s.compute), "cudaMemcpy (stream synchronize; a previous kernel may have failed)");
}

void synchronize(int device) {
  DeviceState& s = state(device);
  check_cuda(cudaStreamSynchronize(s.compute), "synchronize (compute stream)");
  check_cuda(cudaStreamSynchronize(s.comm), "synchronize (communication stream)");
}

void* compute_stream(int device) { return state(device).compute; }
void* communication_stream(int device) { return state(device).comm; }

void stream_wait_stream(void* waiter, void* signaller) {
  cudaEvent_t e;
  check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  check_cuda(cudaEventRecord(e, static_cast<cudaStream_t>(signaller)), "cudaEventRecord");
  check_cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(waiter), e, 0), "cudaStreamWaitEvent");
  cudaEventDestroy(e);  // released once the wait has been satisfied
}

void* pinned_malloc(size_t nbytes) {
  require_device(0, "pinned_malloc");
  void* p = nullptr;
  if (nbytes) check_cuda(cudaMallocHost(&p, nbytes), "cudaMallocHost");
  return p;
}
void pinned_free(void* p) {
  if (p) cudaFreeHost(p);
}

void axpy(float a, const float* x, float* y, long n, int device) {
  DeviceState& s = state(device);
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  const int block = 256;
  const long grid = (n + block - 1) / block;
  if (n > 0) axpy_kernel<<<static_cast<unsigned>(grid), block, 0, s.compute>>>(a, x, y, n);
  check_cuda(cudaGetLastError(), "axpy kernel launch");
  check_cuda(cudaStreamSynchronize(s.compute), "axpy kernel");
}

}  // namespace minidl::kernels::cuda
