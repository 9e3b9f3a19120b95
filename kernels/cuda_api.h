// kernels/cuda_api.h — the host-side entry points of the CUDA runtime layer, callable from plain C++:
// devices, the caching allocator, streams, copies, pinned host memory.
// With CUDA built in they are implemented in kernels/cuda/runtime.cu (which also plugs the caching allocator into cudaMalloc/cudaFree);
// without it, kernels/cuda_stub.cpp implements them to report "no CUDA" (device_count() == 0, allocations throw).
// Tested by tests/kernels/test_cuda_runtime.cpp and test_cuda_allocator.cpp (skip without a device)
// and tests/kernels/test_cuda_stub.cpp (runs everywhere: the no-device error paths).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace minidl::kernels::cuda {

bool compiled_with_cuda();
int device_count();  // 0 when no driver or no device (CUDA_VISIBLE_DEVICES respected)
// True in a process forked (without exec) after its parent had started CUDA (device_count(), and
// every call that needs a device, does): CUDA cannot be used in such a child; its first call
// fails with "initialization error". dist::spawn names this when a child fails.
bool initialized_before_fork();
std::string device_name(int index);
// Throws std::runtime_error naming `op` and the reason when no CUDA device can be used
// ("built without CUDA" or "no CUDA device present"), or when `device` is out of range.
void require_device(int device, const char* op);
void set_device(int device);  // makes `device` current for this host thread
int current_device();
// LOCAL_RANK (default 0) modulo the number of visible devices (CUDA_VISIBLE_DEVICES is applied by
// the runtime); sets it current and returns it. Throws when there is no device.
int select_device_from_env();

// ---- memory: every device allocation goes through the caching allocator ----
void* device_malloc(size_t nbytes, int device);  // on the device's compute stream
void device_free(void* p, int device);
// The live block p (device_malloc's pointer, i.e. a Storage's data()) is also used by `stream`:
// when freed it is not reused until the work queued on `stream` by then has run (PyTorch's
// Tensor.record_stream). A Work dropped before wait() uses it for the tensors NCCL still reads.
void record_stream(void* p, int device, void* stream);
struct MemoryStats {
  size_t allocated = 0;  // bytes in live blocks (rounded to 512)
  size_t reserved = 0;  // bytes held from cudaMalloc (segments)
  size_t peak_allocated = 0;
  size_t peak_reserved = 0;
  size_t cap = 0;  // memory fraction * device total (SIZE_MAX: no cap)
  int64_t segment_allocs = 0;  // cudaMalloc calls
  int64_t segment_frees = 0;  // cudaFree calls
  int64_t cache_hits = 0;  // allocations served from the cache
};
MemoryStats memory_stats(int device);
void reset_peak_memory_stats(int device);
void empty_cache(int device);  // returns unused segments to the driver
void set_memory_fraction(double fraction, int device);  // cap = fraction * total device memory

// Copies nbytes between host and device (kind: 0 host->device, 1 device->host, 2 within one device),
// ordered with the work already queued on `device`'s compute stream (-1: the current device);
// returns when the copy is done.
void memcpy(void* dst, const void* src, size_t nbytes, int kind, int device = -1);
// Copies nbytes from src on src_device to dst on another device, ordered after the work already
// queued on BOTH devices' compute streams (the source's producers, the destination's earlier
// users); returns when the copy is done.
void memcpy_between_devices(void* dst, int dst_device, const void* src, int src_device, size_t nbytes);
void synchronize(int device);  // waits for the device's compute and communication streams

// ---- streams (opaque cudaStream_t / cudaEvent_t handles for plain C++ code) ----
void* compute_stream(int device);  // one per device; every minidl kernel runs on it
void* communication_stream(int device);  // one per device; NCCL collectives run on it
// `waiter` waits (on the device, not the host) for everything queued so far on `signaller`.
void stream_wait_stream(void* waiter, void* signaller);

// ---- pinned (page-locked) host memory, for fast asynchronous host->device batch copies ----
// Cached per device: a freed block is reused by the next request for the same device that fits
// (no cudaMallocHost per batch). `device` is the one whose context allocates it (-1: the current
// device); pinned_free takes the device pinned_malloc was given (resolved).
void* pinned_malloc(size_t nbytes, int device = -1);
void pinned_free(void* p, int device);
// the device's pinned cache's counters (segment_allocs = cudaMallocHost calls); -1: the current device
MemoryStats pinned_memory_stats(int device = -1);

// ---- debugging: with MINIDL_CUDA_SYNC=1 every kernel launch and cuBLAS / cuDNN call is followed
// by a stream synchronisation, so an asynchronous fault (a bad address in a kernel) is reported
// with the op that launched it instead of at some later copy. Slow: for finding bugs only. ----
bool sync_after_kernels();  // initially parse_cuda_sync(getenv("MINIDL_CUDA_SYNC"))
void set_sync_after_kernels(bool on);
// MINIDL_CUDA_SYNC's value: unset, "" or "0" is off, "1" on; anything else throws naming it.
inline bool parse_cuda_sync(const char* value) {
  if (value == nullptr || std::strcmp(value, "") == 0 || std::strcmp(value, "0") == 0) return false;
  if (std::strcmp(value, "1") == 0) return true;
  throw std::invalid_argument(std::string("MINIDL_CUDA_SYNC must be 0 or 1, got '") + value + "'");
}

// y[i] = a * x[i] + y[i] on the device; the first kernel, tested against the CPU loop.
void axpy(float a, const float* x, float* y, long n, int device);

}  // namespace minidl::kernels::cuda
