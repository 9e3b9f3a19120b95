// kernels/cuda/common.cuh — shared by the .cu files (not a public header): status checks that
// name the failing call, the current device's compute stream, launch-size helpers, and the
// ElemType -> C++ type switch. Tested through every kernel's parity test (tests/kernels/test_cuda_*.cpp).
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
  }
  throw std::invalid_argument(std::string(op) + ": unsupported element type on CUDA");
}

}  // namespace minidl::kernels::cuda

// ---- block-wide reductions (one block per row); deterministic: fixed thread count and tree ----
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

#define MINIDL_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

}  // namespace minidl::kernels::cuda
