// kernels/cuda/optim.cu — fused optimizer updates on the GPU: one thread per element runs the
// SAME functor as the CPU kernel (kernels/optim_functors.h: SgdStep, AdamStep — Adam and AdamW),
// with the per-step scalars computed once on the host. Elements are independent, so the result
// equals the CPU's up to the device's floating-point rounding of the same operations.
// Tested by tests/kernels/test_cuda_optim.cpp (several steps against the CPU update).
#include "minidl/kernels/cuda/common.cuh"

namespace minidl::kernels::cuda {

namespace {

template <class T> __global__ void sgd_kernel(T* p, const T* g, T* buf, int64_t n, SgdStep op) {
  MINIDL_GRID_STRIDE(i, n) {
    if (buf == nullptr)
      op(p[i], g[i]);
    else
      op(p[i], g[i], buf[i]);
  }
}

template <class T> __global__ void adam_kernel(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, AdamStep op) {
  MINIDL_GRID_STRIDE(i, n) {
    T unused = T(0);
    op(p[i], g[i], m[i], v[i], vmax ? vmax[i] : unused);
  }
}

}  // namespace

void sgd_step(ElemType t, void* param, const void* grad, void* momentum_buffer, int64_t n, const SgdStep& op) {
  if (n == 0) return;
  switch_type<true>(t, "SGD.step", [&](auto tag) {
    using T = decltype(tag);
    sgd_kernel<T><<<blocks_for(n), kThreads, 0, current_compute_stream()>>>(
        static_cast<T*>(param), static_cast<const T*>(grad), static_cast<T*>(momentum_buffer), n, op);
  });
  check_launch("SGD.step");
}

void adam_step(ElemType t, void* param, const void* grad, void* exp_avg, void* exp_avg_sq, void* max_exp_avg_sq,
               int64_t n, const AdamStep& op) {
  if (n == 0) return;
  switch_type<true>(t, "Adam.step", [&](auto tag) {
    using T = decltype(tag);
    adam_kernel<T><<<blocks_for(n), kThreads, 0, current_compute_stream()>>>(
        static_cast<T*>(param), static_cast<const T*>(grad), static_cast<T*>(exp_avg), static_cast<T*>(exp_avg_sq),
        static_cast<T*>(max_exp_avg_sq), n, op);
  });
  check_launch("Adam.step");
}

}  // namespace minidl::kernels::cuda
