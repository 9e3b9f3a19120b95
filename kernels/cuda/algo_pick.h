// kernels/cuda/algo_pick.h — which of cuDNN's ranked convolution algorithms conv.cu takes: the
// first one that succeeded, is deterministic, fits the workspace limit and, with TF32 off, uses
// plain FMA math (exact float32). Host code without cuDNN types, so the CPU tests check the rule
// (tests/kernels/test_cuda_host.cpp); -1 when none qualifies (conv.cu then falls back to a slower
// deterministic algorithm and warns).
#pragma once
#include <cstddef>

namespace minidl::kernels::cuda {

struct AlgoCandidate {
  bool ok = false;  // cuDNN's status for this algorithm was success
  bool deterministic = false;  // CUDNN_DETERMINISTIC
  bool fma_math = false;  // CUDNN_FMA_MATH or CUDNN_DEFAULT_MATH (no tensor-op conversion)
  size_t memory = 0;  // workspace bytes
};

inline int pick_algorithm(const AlgoCandidate* c, int n, size_t max_workspace, bool allow_tensor_ops) {
  for (int i = 0; i < n; ++i)
    if (c[i].ok && c[i].deterministic && c[i].memory <= max_workspace && (allow_tensor_ops || c[i].fma_math)) return i;
  return -1;
}

}  // namespace minidl::kernels::cuda
