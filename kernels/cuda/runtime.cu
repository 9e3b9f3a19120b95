// kernels/cuda/runtime.cu — device queries, allocation and copies through the CUDA runtime,
// plus axpy, the first kernel (tests/kernels/test_cuda.cpp compares it with the CPU loop and
// skips when no device is present). Every call checks its status and names what failed.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda_api.h"

namespace minidl::kernels::cuda {

namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

__global__ void axpy_kernel(float a, const float* x, float* y, long n) {
  const long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
}  // namespace

bool compiled_with_cuda() { return true; }

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::string device_name(int index) {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
  return prop.name;
}

void* device_malloc(size_t nbytes, int device) {
  check(cudaSetDevice(device), "cudaSetDevice");
  void* p = nullptr;
  if (nbytes) check(cudaMalloc(&p, nbytes), "cudaMalloc");
  return p;
}

void device_free(void* p, int device) {
  cudaSetDevice(device);
  cudaFree(p);
}

void memcpy(void* dst, const void* src, size_t nbytes, int kind) {
  const cudaMemcpyKind k = kind == 0 ? cudaMemcpyHostToDevice
                           : kind == 1 ? cudaMemcpyDeviceToHost
                                       : cudaMemcpyDeviceToDevice;
  check(cudaMemcpy(dst, src, nbytes, k), "cudaMemcpy");
}

void axpy(float a, const float* x, float* y, long n, int device) {
  check(cudaSetDevice(device), "cudaSetDevice");
  const int block = 256;
  const long grid = (n + block - 1) / block;
  if (n > 0) axpy_kernel<<<static_cast<unsigned>(grid), block>>>(a, x, y, n);
  check(cudaGetLastError(), "axpy kernel launch");
  check(cudaDeviceSynchronize(), "axpy kernel");
}

}  // namespace minidl::kernels::cuda
