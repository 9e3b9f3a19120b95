// kernels/cuda_api.h — the host-side entry points of the CUDA backend, callable from plain C++.
// With CUDA built in they are implemented in kernels/cuda/*.cu; without it, kernels/cuda_stub.cpp
// implements them to report "no CUDA" (device_count() == 0, allocations throw).
#pragma once
#include <cstddef>
#include <string>

namespace minidl::kernels::cuda {

bool compiled_with_cuda();
int device_count();                 // 0 when no driver or no device
std::string device_name(int index);
void* device_malloc(size_t nbytes, int device);
void device_free(void* p, int device);
// Copies nbytes between host and device (kind: 0 host->device, 1 device->host, 2 device->device).
void memcpy(void* dst, const void* src, size_t nbytes, int kind);
// y[i] = a * x[i] + y[i] on the device; the first kernel, tested against the CPU loop.
void axpy(float a, const float* x, float* y, long n, int device);

}  // namespace minidl::kernels::cuda
