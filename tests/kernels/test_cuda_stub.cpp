// tests/kernels/test_cuda_stub.cpp — what CUDA code does on a machine WITHOUT a usable device
// (runs everywhere, in CPU-only and CUDA builds): allocating a CUDA tensor fails with a message
// saying why; ops refuse mixed devices naming the op and both devices before touching memory;
// a tensor that claims to be on CUDA reaches the CUDA branch and fails there with a clear error.
#include <cstdlib>

#include "minidl/kernels/cuda_api.h"
#include "minidl/tensor/ops_nn.h"
#include "minidl/tensor/tensor_all.h"
#include "tests/kernels/cuda_testing.h"

using namespace minidl;

namespace {
// A host buffer labelled cuda:0 — only for checks that must fire before any device access.
Tensor fake_cuda_tensor(const Shape& shape) {
  const size_t n = static_cast<size_t>(shape_numel(shape)) * sizeof(float);
  void* p = std::calloc(n ? n : 1, 1);
  auto st = std::make_shared<Storage>(p, n, Device::cuda(0), [](void* q) { std::free(q); });
  return Tensor(st, shape, contiguous_strides(shape), 0, DType::Float32);
}
bool has_gpu() { return minidl::testing::why_no_gpu().empty(); }
}  // namespace

TEST(CudaStub, CompiledWithCudaMatchesTheBuild) {
#ifdef MINIDL_WITH_CUDA
  EXPECT_TRUE(kernels::cuda::compiled_with_cuda());
#else
  EXPECT_TRUE(!kernels::cuda::compiled_with_cuda());
  EXPECT_EQ(kernels::cuda::device_count(), 0);
#endif
}

TEST(CudaStub, AllocatingACudaTensorWithoutADeviceSaysWhy) {
  if (has_gpu()) GTEST_SKIP() << "a CUDA device is present: this test covers machines without one";
  try {
    Tensor t({2, 3}, DType::Float32, Device::cuda(0));
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_TRUE(m.find("built without CUDA") != std::string::npos || m.find("no CUDA device present") != std::string::npos)
        << m;
  }
}

TEST(CudaStub, MixedDevicesAreRejectedNamingTheOpAndBothDevices) {
  Tensor a = ones({2, 2});
  Tensor b = fake_cuda_tensor({2, 2});
  try {
    add(a, b);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "add: expected all tensors on the same device, got cpu and cuda:0");
  }
  EXPECT_THROW(matmul(a, b), std::invalid_argument);
  EXPECT_THROW(cat({a, b}, 0), std::invalid_argument);
  EXPECT_THROW(conv2d_forward(ones({1, 1, 3, 3}), fake_cuda_tensor({1, 1, 2, 2}), Tensor(), {}), std::invalid_argument);
  EXPECT_THROW(cross_entropy_forward(fake_cuda_tensor({2, 3}), zeros({2}, DType::Int64), 0.0), std::invalid_argument);
}

TEST(CudaStub, ACudaTensorWithoutADeviceFailsInTheCudaBranchWithAClearMessage) {
  if (has_gpu()) GTEST_SKIP() << "a CUDA device is present: this test covers machines without one";
  Tensor x = fake_cuda_tensor({4});
  try {
    relu(x);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_TRUE(m.find("built without CUDA") != std::string::npos || m.find("no CUDA device present") != std::string::npos)
        << m;
  }
}

TEST(CudaStub, DeviceQueriesWithoutADeviceThrowOrReportZero) {
  if (has_gpu()) GTEST_SKIP() << "a CUDA device is present: this test covers machines without one";
  EXPECT_EQ(kernels::cuda::device_count(), 0);
  EXPECT_THROW(kernels::cuda::select_device_from_env(), std::runtime_error);
  EXPECT_THROW(kernels::cuda::memory_stats(0), std::runtime_error);
  EXPECT_THROW(kernels::cuda::pinned_malloc(16), std::runtime_error);
}
