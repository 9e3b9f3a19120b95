// kernels/cuda/runtime.cu — devices, streams, copies, pinned memory and the allocator glue:
// per device, one caching allocator (kernels/caching_allocator.h over cudaMalloc/cudaFree), one
// compute stream (every minidl kernel) and one communication stream (NCCL), created on first use.
// Plus axpy, the first kernel. Every call checks its status and names what failed.
// Tested by tests/kernels/test_cuda_runtime.cpp and test_cuda_allocator.cpp (skip without a device).
#include <cuda_runtime.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "minidl/kernels/caching_allocator.h"
#include "minidl/kernels/cuda/common.cuh"
#include "minidl/kernels/cuda_api.h"

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
    DeviceGuard guard(device);
    // compute: a blocking stream, so it is also ordered with legacy default-stream work;
    // comm: non-blocking, ordered with compute only through explicit events.
    check_cuda(cudaStreamCreateWithFlags(&s.compute, cudaStreamDefault), "cudaStreamCreate (compute)");
    check_cuda(cudaStreamCreateWithFlags(&s.comm, cudaStreamNonBlocking), "cudaStreamCreate (communication)");
    size_t free_b = 0, total_b = 0;
    check_cuda(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    SegmentSource src{
        [device](size_t n) -> void* {
          DeviceGuard guard(device);
          void* p = nullptr;
          const cudaError_t e = cudaMalloc(&p, n);
          if (e == cudaErrorMemoryAllocation) {
            cudaGetLastError();  // clear the error: the allocator frees its cache and retries
            return nullptr;
          }
          check_cuda(e, ("cudaMalloc of " + std::to_string(n) + " bytes on cuda:" + std::to_string(device)).c_str());
          return p;
        },
        [device](void* p) {
          DeviceGuard guard(device);
          // a cached block may still be read by queued kernels
          check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (before returning a segment)");
          check_cuda(cudaFree(p), "cudaFree");
        }};
    // record_stream's events: recorded on the stream that still uses a freed block, queried (never
    // waited for) by the allocator before it hands the block out again
    EventSource events{
        [device](void* stream) -> void* {
          DeviceGuard guard(device);
          cudaEvent_t e;
          check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate (record_stream)");
          check_cuda(cudaEventRecord(e, static_cast<cudaStream_t>(stream)), "cudaEventRecord (record_stream)");
          return e;
        },
        [](void* e) {
          const cudaError_t q = cudaEventQuery(static_cast<cudaEvent_t>(e));
          if (q == cudaErrorNotReady) return false;
          check_cuda(q, "cudaEventQuery (record_stream)");
          return true;
        },
        [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); }};
    s.allocator = std::make_unique<CachingAllocator>("cuda:" + std::to_string(device), total_b, std::move(src),
                                                     std::move(events));
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

namespace {
std::atomic<DeviceError*> g_error_host{nullptr};  // the record's host address, once created
std::once_flag g_error_once;
DeviceError* g_error_device = nullptr;

// After a synchronisation: a bad value recorded by a kernel becomes an exception (and is cleared).
void raise_device_error() {
  DeviceError* e = g_error_host.load();
  if (e == nullptr || reinterpret_cast<volatile DeviceError*>(e)->flag == 0) return;
  const DeviceError got = *e;
  e->flag = 0;
  const char* op =
      got.op == static_cast<int>(DeviceErrorOp::CrossEntropyBackward) ? "cross_entropy_backward" : "cross_entropy";
  throw std::invalid_argument(std::string(op) + ": target value " + std::to_string(got.value) + " at index " +
                              std::to_string(got.index) + " is out of range for C = " + std::to_string(got.limit) +
                              " classes (checked on the device; reported at the next synchronisation)");
}
}  // namespace

DeviceError* device_error_record() {
  std::call_once(g_error_once, [] {
    void* h = nullptr;
    check_cuda(cudaHostAlloc(&h, sizeof(DeviceError), cudaHostAllocMapped | cudaHostAllocPortable),
               "cudaHostAlloc (device error record)");
    std::memset(h, 0, sizeof(DeviceError));
    void* d = nullptr;
    check_cuda(cudaHostGetDevicePointer(&d, h, 0), "cudaHostGetDevicePointer (device error record)");
    g_error_device = static_cast<DeviceError*>(d);
    g_error_host = static_cast<DeviceError*>(h);
  });
  return g_error_device;
}

namespace {
std::atomic<bool>& sync_flag() {
  static std::atomic<bool> flag{parse_cuda_sync(std::getenv("MINIDL_CUDA_SYNC"))};
  return flag;
}
}  // namespace
bool sync_after_kernels() { return sync_flag().load(std::memory_order_relaxed); }
void set_sync_after_kernels(bool on) { sync_flag() = on; }

namespace {
std::atomic<pid_t> g_started_in{0};  // the process that started CUDA (asked for the devices)
}  // namespace

int device_count() {
  static const int n = [] {
    g_started_in = ::getpid();
    int c = 0;
    if (cudaGetDeviceCount(&c) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky "no driver" error
      return 0;
    }
    return c;
  }();
  return n;
}

bool initialized_before_fork() {
  const pid_t started = g_started_in;
  return started != 0 && started != ::getpid();
}

void require_device(int device, const char* op) {
  const int n = device_count();
  if (n == 0)
    throw std::runtime_error(std::string(op) +
                             ": no CUDA device present (no driver, no GPU, or CUDA_VISIBLE_DEVICES "
                             "hides them all); cannot use cuda:" +
                             std::to_string(device));
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

void record_stream(void* p, int device, void* stream) {
  if (p == nullptr) return;
  state(device).allocator->record_stream(p, stream);
}

MemoryStats memory_stats(int device) {
  const CachingAllocatorStats a = state(device).allocator->stats();
  return {a.allocated, a.reserved,       a.peak_allocated, a.peak_reserved,
          a.cap,       a.segment_allocs, a.segment_frees,  a.cache_hits};
}
void reset_peak_memory_stats(int device) { state(device).allocator->reset_peak(); }
void empty_cache(int device) {
  DeviceState& s = state(device);
  DeviceGuard guard(device);
  s.allocator->empty_cache();
}
void set_memory_fraction(double fraction, int device) { state(device).allocator->set_memory_fraction(fraction); }

void memcpy(void* dst, const void* src, size_t nbytes, int kind, int device) {
  if (nbytes == 0) return;
  if (device < 0) device = current_device();
  DeviceState& s = state(device);
  DeviceGuard guard(device);
  const cudaMemcpyKind k = kind == 0   ? cudaMemcpyHostToDevice
                           : kind == 1 ? cudaMemcpyDeviceToHost
                                       : cudaMemcpyDeviceToDevice;
  check_cuda(cudaMemcpyAsync(dst, src, nbytes, k, s.compute), "cudaMemcpyAsync");
  check_cuda(cudaStreamSynchronize(s.compute),
             "cudaMemcpy (stream synchronize; a previous kernel may have failed: MINIDL_CUDA_SYNC=1 names it)");
  raise_device_error();
}

// The copy runs on the destination's compute stream (ordered after its earlier users of dst),
// which first waits for an event recorded on the source's compute stream (its producers of src);
// cudaMemcpyPeerAsync works with or without peer access enabled.
void memcpy_between_devices(void* dst, int dst_device, const void* src, int src_device, size_t nbytes) {
  if (nbytes == 0) return;
  DeviceState& from = state(src_device);
  DeviceState& to = state(dst_device);
  cudaEvent_t produced;
  {
    DeviceGuard guard(src_device);
    check_cuda(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming), "cross-device copy: cudaEventCreate");
    check_cuda(cudaEventRecord(produced, from.compute), "cross-device copy: cudaEventRecord on the source stream");
  }
  DeviceGuard guard(dst_device);
  const cudaError_t waited = cudaStreamWaitEvent(to.compute, produced, 0);
  cudaEventDestroy(produced);  // released once the wait is satisfied
  check_cuda(waited, "cross-device copy: cudaStreamWaitEvent");
  check_cuda(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, nbytes, to.compute), "cudaMemcpyPeerAsync");
  check_cuda(cudaStreamSynchronize(to.compute),
             "cross-device copy (stream synchronize; a previous kernel may have failed: MINIDL_CUDA_SYNC=1 names it)");
  raise_device_error();
}

void synchronize(int device) {
  DeviceState& s = state(device);
  check_cuda(cudaStreamSynchronize(s.compute), "synchronize (compute stream)");
  check_cuda(cudaStreamSynchronize(s.comm), "synchronize (communication stream)");
  raise_device_error();
}

void* compute_stream(int device) { return state(device).compute; }
void* communication_stream(int device) { return state(device).comm; }

void stream_wait_stream(void* waiter, void* signaller) {
  cudaEvent_t e;
  check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  check_cuda(cudaEventRecord(e, static_cast<cudaStream_t>(signaller)), "cudaEventRecord");
  check_cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(waiter), e, 0), "cudaStreamWaitEvent");
  check_cuda(cudaEventDestroy(e), "cudaEventDestroy");  // released once the wait has been satisfied
}

// Pinned host memory is cached like device memory (the same CachingAllocator, one pool per
// device): the DataLoader pins every batch, and cudaMallocHost per batch would cost more than the
// copy saves. Each block is tagged with the device whose context allocated it (cudaMallocHost runs
// with that device current, so a rank never opens a context on another rank's GPU); with unified
// addressing the memory is usable from every device. Reuse is safe because every host <-> device
// copy (memcpy above) completes before it returns.
namespace {
CachingAllocator& pinned_allocator(int device) {
  require_device(device, "pinned_malloc");
  static auto* allocators = new std::array<std::unique_ptr<CachingAllocator>, kMaxDevices>();  // never destroyed
  static auto* once = new std::array<std::once_flag, kMaxDevices>();
  std::call_once((*once)[device], [device] {
    (*allocators)[device] = std::make_unique<CachingAllocator>(
        "pinned host memory (cuda:" + std::to_string(device) + ")", SIZE_MAX,
        SegmentSource{[device](size_t n) -> void* {
                        DeviceGuard guard(device);
                        void* p = nullptr;
                        const cudaError_t e = cudaMallocHost(&p, n);
                        if (e == cudaErrorMemoryAllocation) {
                          cudaGetLastError();
                          return nullptr;
                        }
                        check_cuda(e, ("cudaMallocHost of " + std::to_string(n) + " bytes").c_str());
                        return p;
                      },
                      [device](void* p) {
                        DeviceGuard guard(device);
                        check_cuda(cudaFreeHost(p), "cudaFreeHost");
                      }});
  });
  return *(*allocators)[device];
}
}  // namespace

void* pinned_malloc(size_t nbytes, int device) {
  require_device(device < 0 ? 0 : device, "pinned_malloc");
  if (device < 0) device = current_device();
  return pinned_allocator(device).allocate(nbytes, nullptr);
}
void pinned_free(void* p, int device) {
  if (p) pinned_allocator(device).free(p);
}
MemoryStats pinned_memory_stats(int device) {
  require_device(device < 0 ? 0 : device, "pinned_memory_stats");
  if (device < 0) device = current_device();
  const CachingAllocatorStats a = pinned_allocator(device).stats();
  return {a.allocated, a.reserved,       a.peak_allocated, a.peak_reserved,
          a.cap,       a.segment_allocs, a.segment_frees,  a.cache_hits};
}

void axpy(float a, const float* x, float* y, long n, int device) {
  DeviceState& s = state(device);
  DeviceGuard guard(device);
  const int block = 256;
  const long grid = (n + block - 1) / block;
  if (n > 0) axpy_kernel<<<static_cast<unsigned>(grid), block, 0, s.compute>>>(a, x, y, n);
  check_launch("axpy");
  check_cuda(cudaStreamSynchronize(s.compute), "axpy kernel");
}

}  // namespace minidl::kernels::cuda
