// kernels/cuda/common.cuh — shared by the .cu files (not a public header): status checks that
// name the failing call, the current device's compute stream, launch-size helpers, the
// ElemType -> C++ type switch, block reductions and the two-pass row reduction (reduce_rows).
// Tested through every kernel's parity test (tests/kernels/test_cuda_*.cpp).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "minidl/kernels/cuda_api.h"
#include "minidl/kernels/cuda_ops.h"

namespace minidl::kernels::cuda {

inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

cudaStream_t current_compute_stream();  // runtime.cu

// A bad value that only a kernel sees (a cross-entropy target out of range, read on the device
// so the step needs no host copy of the targets): the first one is recorded in mapped host memory
// and raised as std::invalid_argument, naming the op, at the next synchronisation with the host
// (a copy to the host, item(), synchronize()). runtime.cu owns the record.
enum class DeviceErrorOp : int { CrossEntropy = 1, CrossEntropyBackward = 2 };
struct DeviceError {
  int flag;
  int op;
  long long value, index, limit;
};
DeviceError* device_error_record();  // the device-side address of the record (created on first use)
__device__ __forceinline__ void report_device_error(DeviceError* e, DeviceErrorOp op, long long value, long long index,
                                                    long long limit) {
  if (atomicCAS(&e->flag, 0, 1) == 0) {
    e->op = static_cast<int>(op);
    e->value = value;
    e->index = index;
    e->limit = limit;
    __threadfence_system();
  }
}

// After a kernel launch or a cuBLAS / cuDNN call: a bad launch configuration is reported at once,
// naming the op; with MINIDL_CUDA_SYNC=1 (kernels/cuda_api.h) the compute stream is synchronised
// too, so a fault inside the kernel is reported here, with the op that launched it.
inline void check_launch(const char* op) {
  check_cuda(cudaGetLastError(), op);
  if (sync_after_kernels())
    check_cuda(cudaStreamSynchronize(current_compute_stream()),
               (std::string(op) + ": asynchronous CUDA error in its kernel (found by MINIDL_CUDA_SYNC=1)").c_str());
}

// Makes `device` current for a scope and restores the caller's device after (the CUDA current
// device is per host thread state that a library call must not change behind the caller's back).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check_cuda(cudaSetDevice(device), "cudaSetDevice");
    switched_ = previous_ != device;
  }
  ~DeviceGuard() {
    if (switched_ && cudaSetDevice(previous_) != cudaSuccess)
      std::fprintf(stderr, "minidl: cudaSetDevice(%d) failed while restoring the current device\n", previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool switched_ = false;
};

inline constexpr int kThreads = 256;
inline unsigned blocks_for(int64_t n, int threads = kThreads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 1048576 ? 1048576 : b));  // kernels grid-stride beyond this
}

// Calls f(T{}) for the element type; FloatingOnly rejects (and never instantiates) the integer types.
template <bool FloatingOnly, class F> void switch_type(ElemType t, const char* op, F&& f) {
  switch (t) {
    case ElemType::F32:
      f(float{});
      return;
    case ElemType::F64:
      f(double{});
      return;
    case ElemType::I64:
      if constexpr (!FloatingOnly) {
        f(int64_t{});
        return;
      }
      break;
    case ElemType::U8:
      if constexpr (!FloatingOnly) {
        f(uint8_t{});
        return;
      }
      break;
    case ElemType::BF16:
      throw std::invalid_argument(std::string(op) + ": not implemented for bfloat16 on CUDA");
    case ElemType::F16:
      throw std::invalid_argument(std::string(op) + ": not implemented for float16 on CUDA");
  }
  throw std::invalid_argument(std::string(op) + ": unsupported element type on CUDA");
}

}  // namespace minidl::kernels::cuda

// ---- block-wide reductions; deterministic: fixed thread count and tree ----
#include <cub/block/block_reduce.cuh>

namespace minidl::kernels::cuda {

struct SumOp {
  template <class A> __device__ __forceinline__ A operator()(A a, A b) const { return a + b; }
};
struct MaxValueOp {
  __device__ __forceinline__ double operator()(double a, double b) const { return a > b || a != a ? a : b; }
};

// Reduces v over the block with op and returns the result to EVERY thread. Uses shared memory;
// safe to call several times in a row (it synchronises before returning).
template <class A, class Op> __device__ __forceinline__ A block_all_reduce(A v, Op op) {
  using Reduce = cub::BlockReduce<A, kThreads>;
  __shared__ typename Reduce::TempStorage temp;
  __shared__ A result;
  const A r = Reduce(temp).Reduce(v, op);
  if (threadIdx.x == 0) result = r;
  __syncthreads();
  const A out = result;
  __syncthreads();
  return out;
}

// ---- reductions of (rows, len) with few rows: each row split over several blocks ----
// reduce_rows reduces load(r, i) for i in [0, len) with op, for each row r, and hands the result
// to store(r, result). A row of more than kChunkElems elements is cut into up to `chunks` fixed
// chunks, one block each (grid (rows, chunks)), whose partial results go to a workspace; a
// second pass, one block per row, combines them in chunk order. Chunking depends only on the
// shape, so the result is the same on every run.
inline constexpr int64_t kChunkElems = 4096;  // at least 16 elements per thread of a chunk
inline constexpr int64_t kTargetBlocks = 2048;  // enough blocks to fill a large GPU several times

inline int64_t chunks_for(int64_t rows, int64_t len) {
  if (rows >= kTargetBlocks || len <= kChunkElems) return 1;
  const int64_t want = (kTargetBlocks + rows - 1) / rows, most = (len + kChunkElems - 1) / kChunkElems;
  return want < most ? want : most;
}

template <class A, class Load, class Op, class Sink>
__global__ void reduce_chunks_kernel(Load load, int64_t len, int64_t chunk_len, A identity, Op op, Sink sink) {
  const int64_t r = blockIdx.x, begin = int64_t(blockIdx.y) * chunk_len;
  const int64_t end = begin + chunk_len < len ? begin + chunk_len : len;
  A a = identity;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) a = op(a, load(r, i));
  a = block_all_reduce(a, op);
  if (threadIdx.x == 0) sink(r, int64_t(blockIdx.y), a);
}

// Sinks of the first pass: straight to the store (one chunk per row), or into the workspace.
template <class Store> struct StoreSink {
  Store store;
  template <class A> __device__ void operator()(int64_t r, int64_t, const A& a) const { store(r, a); }
};
template <class A> struct PartSink {
  A* part;
  int64_t chunks;
  __device__ void operator()(int64_t r, int64_t c, const A& a) const { part[r * chunks + c] = a; }
};
template <class A> struct PartLoad {
  const A* part;
  int64_t chunks;
  __device__ A operator()(int64_t r, int64_t c) const { return part[r * chunks + c]; }
};

template <class A, class Load, class Op, class Store>
void reduce_rows(int64_t rows, int64_t len, Load load, A identity, Op op, Store store, const char* what) {
  if (rows > 2147483647LL) throw std::invalid_argument(std::string(what) + ": too many rows for one CUDA launch");
  cudaStream_t s = current_compute_stream();
  const int64_t chunks = chunks_for(rows, len);
  const int64_t chunk_len = (len + chunks - 1) / chunks;
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(chunks));
  if (chunks == 1) {
    reduce_chunks_kernel<A><<<grid, kThreads, 0, s>>>(load, len, chunk_len, identity, op, StoreSink<Store>{store});
    check_launch(what);
    return;
  }
  const int device = current_device();
  A* part = static_cast<A*>(device_malloc(sizeof(A) * size_t(rows * chunks), device));
  reduce_chunks_kernel<A><<<grid, kThreads, 0, s>>>(load, len, chunk_len, identity, op, PartSink<A>{part, chunks});
  reduce_chunks_kernel<A><<<dim3(static_cast<unsigned>(rows), 1), kThreads, 0, s>>>(
      PartLoad<A>{part, chunks}, chunks, chunks, identity, op, StoreSink<Store>{store});
  device_free(part, device);  // stream-ordered: reused only by work queued after these kernels
  check_launch(what);
}

#define MINIDL_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

}  // namespace minidl::kernels::cuda
