// tests/kernels/cuda_testing.h — shared by the GPU tests: MINIDL_SKIP_WITHOUT_GPU() skips a test
// with a message saying why (built without CUDA, or no device present), its _IN_CHILD form asks in
// a forked child (for tests that fork ranks later), and expect_cuda_matches_cpu compares a CUDA
// result with the CPU reference (copied back first).
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "minidl/kernels/cuda_api.h"
#include "tests/common/testing.h"

namespace minidl::testing {

// Empty when a device can be used, else why not.
inline std::string why_no_gpu() {
  if (!kernels::cuda::compiled_with_cuda()) return "built without CUDA (nvcc was not found at configure time)";
  if (kernels::cuda::device_count() == 0) return "no CUDA device present on this machine (no driver or no GPU)";
  return "";
}

// The same question asked in a forked child, so that this process never initialises CUDA: a test
// that forks ranks afterwards (dist::spawn) needs that, since a CUDA context does not survive fork().
inline std::string why_no_gpu_in_child() {
  if (!kernels::cuda::compiled_with_cuda()) return "built without CUDA (nvcc was not found at configure time)";
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(kernels::cuda::device_count() > 0 ? 0 : 1);
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return "could not fork to look for a device";
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? ""
                                                       : "no CUDA device present on this machine (no driver or no GPU)";
}

inline Tensor on_gpu(const Tensor& t) { return t.defined() ? t.to(Device::cuda(0)) : t; }

inline void expect_cuda_matches_cpu(const Tensor& gpu, const Tensor& cpu, double rtol, double atol,
                                    const std::string& what) {
  ASSERT_TRUE(gpu.defined() == cpu.defined()) << what;
  if (!gpu.defined()) return;
  EXPECT_TRUE(gpu.device().is_cuda()) << what << ": result not on the GPU";
  EXPECT_EQ(gpu.shape(), cpu.shape()) << what;
  EXPECT_EQ(gpu.dtype(), cpu.dtype()) << what;
  expect_close(gpu.cpu(), cpu, rtol, atol, what);
}

}  // namespace minidl::testing

#define MINIDL_SKIP_WITHOUT_GPU()                                  \
  do {                                                             \
    const std::string why = ::minidl::testing::why_no_gpu();       \
    if (!why.empty()) GTEST_SKIP() << "GPU test skipped: " << why; \
  } while (0)

#define MINIDL_SKIP_WITHOUT_GPU_IN_CHILD()                            \
  do {                                                                \
    const std::string why = ::minidl::testing::why_no_gpu_in_child(); \
    if (!why.empty()) GTEST_SKIP() << "GPU test skipped: " << why;    \
  } while (0)
