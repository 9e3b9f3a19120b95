// kernels/cuda_stub.cpp — the CUDA entry points for a build without nvcc: no device, clear errors.
#include <stdexcept>

#include "kernels/cuda_api.h"

namespace minidl::kernels::cuda {

namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw std::runtime_error(std::string(what) + ": minidl was built without CUDA (nvcc not found at configure time)");
}
}  // namespace

bool compiled_with_cuda() { return false; }
int device_count() { return 0; }
std::string device_name(int) { no_cuda("device_name"); }
void* device_malloc(size_t, int) { no_cuda("device_malloc"); }
void device_free(void*, int) {}
void memcpy(void*, const void*, size_t, int) { no_cuda("cuda memcpy"); }
void axpy(float, const float*, float*, long, int) { no_cuda("cuda axpy"); }

}  // namespace minidl::kernels::cuda
