// kernels/cuda/algo_pick.h — which of cuDNN's ranked convolution algorithms conv.cu takes: the
// first one that succeeded, is deterministic, fits the workspace limit and, with TF32 off, uses
// plain FMA math (exact float32). Determinism is decided by the algorithm itself, from cuDNN's
// documented list (the "Reproducibility" section of its developer guide: only backward-data
// ALGO_0 and backward-filter ALGO_0 and ALGO_3 use atomics; every forward algorithm is
// deterministic), not by the `determinism` field of the v7 heuristics' results: that field is a
// heuristic's report, and where it reads non-deterministic for a deterministic algorithm,
// trusting it sends the shape to the slow fallback. Host code without cuDNN types (conv.cu checks
// the enum values), so the CPU tests check the rule on made-up rankings (tests/kernels/test_cuda_host.cpp);
// -1 when none qualifies (conv.cu then falls back to a slower deterministic algorithm and warns).
#pragma once
#include <cstddef>

namespace minidl::kernels::cuda {

enum class ConvDirection { Forward, BackwardData, BackwardFilter };

// The values of cudnnConvolutionBwdDataAlgo_t / cudnnConvolutionBwdFilterAlgo_t that are not
// deterministic.
inline constexpr int kBwdDataAlgo0 = 0, kBwdFilterAlgo0 = 0, kBwdFilterAlgo3 = 3;

inline bool is_deterministic(ConvDirection d, int algo) {
  switch (d) {
    case ConvDirection::Forward:
      return true;
    case ConvDirection::BackwardData:
      return algo != kBwdDataAlgo0;
    case ConvDirection::BackwardFilter:
      return algo != kBwdFilterAlgo0 && algo != kBwdFilterAlgo3;
  }
  return false;
}

struct AlgoCandidate {
  int algo = 0;  // the cuDNN algorithm enum's value
  bool ok = false;  // cuDNN's status for this algorithm was success
  bool fma_math = false;  // CUDNN_FMA_MATH or CUDNN_DEFAULT_MATH (no tensor-op conversion)
  size_t memory = 0;  // workspace bytes
};

inline int pick_algorithm(ConvDirection d, const AlgoCandidate* c, int n, size_t max_workspace, bool allow_tensor_ops) {
  for (int i = 0; i < n; ++i)
    if (c[i].ok && is_deterministic(d, c[i].algo) && c[i].memory <= max_workspace &&
        (allow_tensor_ops || c[i].fma_math))
      return i;
  return -1;
}

}  // namespace minidl::kernels::cuda
