// kernels/cuda/softmax.cu — softmax / log_softmax forward and backward along the middle axis of a
// contiguous (outer, len, inner) tensor, the fused softmax cross entropy (label smoothing, mean
// over rows) forward and backward, and gather_rows. One block per softmax row; max and sums in
// double, as kernels/cpu/softmax.h and kernels/cpu/cross_entropy.h. The cross-entropy mean adds
// the per-row losses in a fixed order (one block), so it reproduces run to run.
// Tested by tests/kernels/test_cuda_ops.cpp and test_cuda_nn.cpp against the CPU ops.
#include <cmath>

#include "minidl/kernels/cuda/common.cuh"
#include "minidl/kernels/cuda_api.h"

namespace minidl::kernels::cuda {

namespace {

// Row (o, i) of (outer, len, inner): elements base[j * inner], j < len; one block per row.
template <class T> __global__ void softmax_forward_kernel(const T* x, T* y, int64_t len, int64_t inner, bool log) {
  const int64_t o = blockIdx.x / inner, in = blockIdx.x % inner;
  const T* xr = x + o * len * inner + in;
  T* yr = y + o * len * inner + in;
  double m = -INFINITY;
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x) m = MaxValueOp{}(m, double(xr[j * inner]));
  m = block_all_reduce(m, MaxValueOp{});
  double s = 0;
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x) s += exp(double(xr[j * inner]) - m);
  s = block_all_reduce(s, SumOp{});
  const double lse = m + ::log(s);
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
    const double v = double(xr[j * inner]);
    yr[j * inner] = static_cast<T>(log ? v - lse : exp(v - m) / s);
  }
}

// softmax: dx = y * (dy - sum(dy * y));  log_softmax: dx = dy - exp(y) * sum(dy)
template <class T>
__global__ void softmax_backward_kernel(const T* y, const T* dy, T* dx, int64_t len, int64_t inner, bool log) {
  const int64_t base = (blockIdx.x / inner) * len * inner + blockIdx.x % inner;
  double s = 0;
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
    const int64_t k = base + j * inner;
    s += log ? double(dy[k]) : double(dy[k]) * double(y[k]);
  }
  s = block_all_reduce(s, SumOp{});
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
    const int64_t k = base + j * inner;
    dx[k] = static_cast<T>(log ? double(dy[k]) - exp(double(y[k])) * s : double(y[k]) * (double(dy[k]) - s));
  }
}

// log-sum-exp of row x (C), shared by every thread of the block
template <class T> __device__ double block_logsumexp(const T* x, int64_t C) {
  double m = -INFINITY;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) m = MaxValueOp{}(m, double(x[c]));
  m = block_all_reduce(m, MaxValueOp{});
  if (isinf(m)) return m;
  double s = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += exp(double(x[c]) - m);
  s = block_all_reduce(s, SumOp{});
  return m + ::log(s);
}

template <class T>
__global__ void cross_entropy_rows_kernel(const T* logits, const int64_t* target, int64_t C, double eps,
                                          double* row_loss, DeviceError* err) {
  const T* x = logits + blockIdx.x * C;
  const double lse = block_logsumexp(x, C);
  double sx = 0;
  if (eps != 0.0) {
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) sx += double(x[c]);
    sx = block_all_reduce(sx, SumOp{});
  }
  if (threadIdx.x == 0) {
    const int64_t t = target[blockIdx.x];
    if (t < 0 || t >= C) {  // recorded for the host; this row's loss is NaN
      report_device_error(err, DeviceErrorOp::CrossEntropy, t, blockIdx.x, C);
      row_loss[blockIdx.x] = NAN;
      return;
    }
    double loss = (1.0 - eps) * (lse - double(x[t]));
    if (eps != 0.0) loss += eps * (lse - sx / double(C));
    row_loss[blockIdx.x] = loss;
  }
}

template <class T> __global__ void mean_of_rows_kernel(const double* row_loss, int64_t N, T* loss) {
  double s = 0;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) s += row_loss[i];
  s = block_all_reduce(s, SumOp{});
  if (threadIdx.x == 0) *loss = static_cast<T>(N > 0 ? s / double(N) : NAN);
}

template <class T>
__global__ void cross_entropy_backward_kernel(const T* logits, const int64_t* target, int64_t N, int64_t C, double eps,
                                              const T* grad_loss, T* dlogits, DeviceError* err) {
  const T* x = logits + blockIdx.x * C;
  T* d = dlogits + blockIdx.x * C;
  const double lse = block_logsumexp(x, C);
  const double off = eps / double(C);
  const double scale = double(*grad_loss) / double(N);  // read on the device: no host sync for the grad
  const int64_t t = target[blockIdx.x];
  if (t < 0 || t >= C) {  // the whole block takes this branch: recorded for the host, the row is NaN
    if (threadIdx.x == 0) report_device_error(err, DeviceErrorOp::CrossEntropyBackward, t, blockIdx.x, C);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) d[c] = static_cast<T>(NAN);
    return;
  }
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const double q = (c == t ? 1.0 - eps : 0.0) + off;
    d[c] = static_cast<T>((exp(double(x[c]) - lse) - q) * scale);
  }
}

template <class T>
__global__ void gather_rows_kernel(const T* x, int64_t s0, int64_t s1, const int64_t* target, int64_t ts, int64_t n,
                                   T* out) {
  MINIDL_GRID_STRIDE(i, n) { out[i] = x[i * s0 + target[i * ts] * s1]; }
}

unsigned rows_grid(int64_t rows, const char* op) {
  if (rows > 2147483647LL) throw std::invalid_argument(std::string(op) + ": too many rows for one CUDA launch");
  return static_cast<unsigned>(rows);
}

}  // namespace

void softmax_forward(ElemType t, const void* x, void* y, int64_t outer, int64_t len, int64_t inner, bool log) {
  if (outer * inner == 0 || len == 0) return;
  switch_type<true>(t, "softmax", [&](auto tag) {
    using T = decltype(tag);
    softmax_forward_kernel<T><<<rows_grid(outer * inner, "softmax"), kThreads, 0, current_compute_stream()>>>(
        static_cast<const T*>(x), static_cast<T*>(y), len, inner, log);
  });
  check_launch("softmax");
}

void softmax_backward(ElemType t, const void* y, const void* dy, void* dx, int64_t outer, int64_t len, int64_t inner,
                      bool log) {
  if (outer * inner == 0 || len == 0) return;
  switch_type<true>(t, "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    softmax_backward_kernel<T><<<rows_grid(outer * inner, "softmax_backward"), kThreads, 0, current_compute_stream()>>>(
        static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dx), len, inner, log);
  });
  check_launch("softmax_backward");
}

void cross_entropy_forward(ElemType t, const void* logits, const int64_t* target, int64_t N, int64_t C, double eps,
                           void* loss) {
  const int device = current_device();
  double* row_loss = static_cast<double*>(device_malloc(sizeof(double) * static_cast<size_t>(N > 0 ? N : 1), device));
  switch_type<true>(t, "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    if (N > 0)
      cross_entropy_rows_kernel<T><<<rows_grid(N, "cross_entropy"), kThreads, 0, current_compute_stream()>>>(
          static_cast<const T*>(logits), target, C, eps, row_loss, device_error_record());
    mean_of_rows_kernel<T><<<1, kThreads, 0, current_compute_stream()>>>(row_loss, N, static_cast<T*>(loss));
  });
  // Freed at once: the block is reused only by later work on the same stream, after these kernels.
  device_free(row_loss, device);
  check_launch("cross_entropy");
}

void cross_entropy_backward(ElemType t, const void* logits, const int64_t* target, int64_t N, int64_t C, double eps,
                            const void* grad_loss, void* dlogits) {
  if (N == 0) return;
  switch_type<true>(t, "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_backward_kernel<T><<<rows_grid(N, "cross_entropy_backward"), kThreads, 0, current_compute_stream()>>>(
        static_cast<const T*>(logits), target, N, C, eps, static_cast<const T*>(grad_loss), static_cast<T*>(dlogits),
        device_error_record());
  });
  check_launch("cross_entropy_backward");
}

void gather_rows(ElemType t, const void* x, int64_t s0, int64_t s1, const int64_t* target, int64_t ts, int64_t n,
                 void* out) {
  if (n == 0) return;
  switch_type<false>(t, "gather_rows", [&](auto tag) {
    using T = decltype(tag);
    gather_rows_kernel<T><<<blocks_for(n), kThreads, 0, current_compute_stream()>>>(
        static_cast<const T*>(x), s0, s1, target, ts, n, static_cast<T*>(out));
  });
  check_launch("gather_rows");
}

}  // namespace minidl::kernels::cuda
