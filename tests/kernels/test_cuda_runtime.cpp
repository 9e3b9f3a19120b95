// tests/kernels/test_cuda_runtime.cpp — the first CUDA kernel (axpy) against its CPU loop.
// Skips, saying why, when minidl was built without CUDA or no device is present.
#include "kernels/cuda_api.h"
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

TEST(CudaRuntime, DeviceCountIsZeroOrMoreWithoutThrowing) {
  EXPECT_GE(kernels::cuda::device_count(), 0);
}
