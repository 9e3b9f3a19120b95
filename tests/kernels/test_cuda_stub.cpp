// tests/kernels/test_cuda_stub.cpp — what CUDA code does on a machine WITHOUT a usable device
// (runs everywhere, in CPU-only and CUDA builds): allocating a CUDA tensor fails with a message
// saying why; ops refuse mixed devices naming the op and both devices before touching memory;
// a tensor that claims to be on CUDA reaches the CUDA branch and fails there with a clear error;
// each op family checks its arguments once for both devices (the same message for a bad CUDA
// argument as for the CPU one, raised before any device access).
#include <cstdlib>
#include <functional>

#include "minidl/kernels/cuda_api.h"
#include "minidl/tensor/ops_nn.h"
#include "minidl/tensor/tensor_all.h"
#include "tests/kernels/cuda_testing.h"

using namespace minidl;

namespace {
// A host buffer labelled cuda:0 — only for checks that must fire before any device access.
Tensor fake_cuda_tensor(const Shape& shape, DType dtype = DType::Float32) {
  const size_t n = static_cast<size_t>(shape_numel(shape)) * element_size(dtype);
  void* p = std::calloc(n ? n : 1, 1);
  auto st = std::make_shared<Storage>(p, n, Device::cuda(0), [](void* q) { std::free(q); });
  return Tensor(st, shape, contiguous_strides(shape), 0, dtype);
}
// The message of what `op` throws, with the device names taken out ("" when it does not throw).
std::string error_without_device(const std::function<void()>& op) {
  try {
    op();
  } catch (const std::exception& e) {
    std::string m = e.what();
    for (const std::string dev : {" on cuda:0", " on cpu"})
      for (size_t at = m.find(dev); at != std::string::npos; at = m.find(dev)) m.erase(at, dev.size());
    return m;
  }
  return "";
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
    EXPECT_TRUE(m.find("built without CUDA") != std::string::npos ||
                m.find("no CUDA device present") != std::string::npos)
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
    EXPECT_TRUE(m.find("built without CUDA") != std::string::npos ||
                m.find("no CUDA device present") != std::string::npos)
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

TEST(CudaStub, EachOpFamilyChecksItsArgumentsOnceForBothDevices) {
  // each case makes its (bad) arguments with `m`: CPU tensors first, then fake CUDA ones
  using Make = std::function<Tensor(const Shape&, DType)>;
  const Make cpu = [](const Shape& s, DType t) { return zeros(s, t); };
  const Make cuda = [](const Shape& s, DType t) { return fake_cuda_tensor(s, t); };
  const DType f = DType::Float32, i = DType::Int64;
  const Pool2dParams k2{.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2};
  const Pool2dParams k3{.kernel_h = 3, .kernel_w = 3, .stride_h = 1, .stride_w = 1};
  using Case = std::pair<const char*, std::function<void(const Make&)>>;
  const std::vector<Case> cases = {
      {"conv2d channels",
       [&](const Make& m) {
         conv2d_forward(m({1, 3, 8, 8}, f), m({4, 2, 3, 3}, f), {}, {});
       }},
      {"conv2d_backward grad_output",
       [&](const Make& m) {
         conv2d_backward(m({1, 2, 8, 8}, f), m({4, 2, 3, 3}, f), m({1, 4, 5, 5}, f), false, {});
       }},
      {"max_pool2d rank", [&](const Make& m) { max_pool2d_forward(m({8}, f), k2); }},
      {"avg_pool2d window",
       [&](const Make& m) {
         avg_pool2d_forward(m({1, 1, 2, 2}, f), k3);
       }},
      {"adaptive_avg_pool2d size",
       [&](const Make& m) {
         adaptive_avg_pool2d_forward(m({1, 1, 4, 4}, f), 0, 2);
       }},
      {"batch_norm_stats rank", [&](const Make& m) { batch_norm_stats(m({3}, f), 1e-5); }},
      {"batch_norm_elemt mean",
       [&](const Make& m) {
         batch_norm_elemt(m({2, 3, 4}, f), m({4}, f), m({3}, f), {}, {});
       }},
      {"layer_norm shape",
       [&](const Make& m) {
         layer_norm_forward(m({2, 3}, f), {4}, {}, {}, 1e-5);
       }},
      {"cross_entropy target",
       [&](const Make& m) {
         cross_entropy_forward(m({2, 3}, f), m({3}, i), 0.0);
       }},
      {"softmax dim",
       [&](const Make& m) {
         softmax(m({2, 3}, f), 5);
       }},
      {"mean dtype",
       [&](const Make& m) {
         mean(m({2, 3}, i));
       }},
      {"max of nothing",
       [&](const Make& m) {
         max(m({0, 3}, f));
       }},
      {"index_select index dtype",
       [&](const Make& m) {
         index_select(m({4, 2}, f), 0, m({2}, f));
       }},
      {"add shapes",
       [&](const Make& m) {
         add(m({2, 3}, f), m({4}, f));
       }},
      {"matmul shapes",
       [&](const Make& m) {
         matmul(m({2, 3}, f), m({4, 5}, f));
       }},
  };
  for (const Case& c : cases) {
    const char* what = c.first;
    const auto& op = c.second;  // a plain reference: the lambdas below capture it
    const std::string on_cpu = error_without_device([&] { op(cpu); });
    ASSERT_FALSE(on_cpu.empty()) << what << ": the bad CPU call did not throw";
    EXPECT_EQ(error_without_device([&] { op(cuda); }), on_cpu) << what;
  }
}
