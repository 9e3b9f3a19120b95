// kernels/cpu/optim_kernels.h — fused optimizer updates on the CPU: one pass over a parameter
// tensor that reads the gradient and the optimizer state and writes the new parameter and state,
// element by element, with the math of kernels/optim_functors.h. Raw contiguous pointers, n
// elements each; the caller (tensor/ops_optim.cpp) checks shapes and dtypes. Elements are
// independent, so the result is the same whatever the thread count.
#pragma once
#include <cstdint>

#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/optim_functors.h"

namespace minidl::kernels::cpu {

// Elements per parallel task: small tensors (biases, norms) run on the calling thread.
inline constexpr int64_t kOptimChunk = 1 << 15;

// param, grad: (n,). momentum_buffer: (n,), or nullptr when op.momentum == 0.
template <class T> void sgd_step(T* param, const T* grad, T* momentum_buffer, int64_t n, const SgdStep& op) {
  parallel_for(n, kOptimChunk, [&](int64_t begin, int64_t end) {
    if (momentum_buffer == nullptr) {
      for (int64_t i = begin; i < end; ++i) op(param[i], grad[i]);
    } else {
      for (int64_t i = begin; i < end; ++i) op(param[i], grad[i], momentum_buffer[i]);
    }
  });
}

// param, grad, exp_avg, exp_avg_sq: (n,). max_exp_avg_sq: (n,) when op.amsgrad, else nullptr.
template <class T>
void adam_step(T* param, const T* grad, T* exp_avg, T* exp_avg_sq, T* max_exp_avg_sq, int64_t n, const AdamStep& op) {
  parallel_for(n, kOptimChunk, [&](int64_t begin, int64_t end) {
    if (max_exp_avg_sq == nullptr) {
      T unused = T(0);
      for (int64_t i = begin; i < end; ++i) op(param[i], grad[i], exp_avg[i], exp_avg_sq[i], unused);
    } else {
      for (int64_t i = begin; i < end; ++i) op(param[i], grad[i], exp_avg[i], exp_avg_sq[i], max_exp_avg_sq[i]);
    }
  });
}

}  // namespace minidl::kernels::cpu
