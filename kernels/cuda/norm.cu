// kernels/cuda/norm.cu — layer norm forward/backward and the four batch norm pieces
// (batch_norm_stats / _elemt / _backward_reduce / _backward_elemt, as PyTorch's CUDA kernels split
// them, so SyncBatchNorm can all-reduce between them). Same math and precision as
// kernels/cpu/norm.h and layer_norm.h: sums in double, two-pass variance, biased variance in invstd.
// Layer norm rows: one block per row with a fixed CUB block reduction. Batch norm channel sums:
// reduce_rows (common.cuh), each channel cut into fixed chunks of one block each when there are
// few channels, the chunks combined in order by a second pass. The layer norm affine gradients:
// a 2-D grid of column tiles by row chunks, each writing per-chunk partial sums that a second
// pass adds in chunk order. Deterministic: the split depends only on the shape.
// Tested by tests/kernels/test_cuda_nn.cpp against the CPU ops (forward and backward).
#include <algorithm>

#include "minidl/kernels/batch_norm_gather.h"
#include "minidl/kernels/cuda/common.cuh"

namespace minidl::kernels::cuda {

namespace {

template <class T> __device__ __forceinline__ double load_or(const T* p, int64_t i, double dflt) {
  return p ? double(p[i]) : dflt;
}

template <class T>
__global__ void layer_norm_forward_kernel(const T* x, int64_t M, const T* weight, const T* bias, double eps, T* y,
                                          T* mean, T* invstd) {
  const T* xp = x + blockIdx.x * M;
  T* yp = y + blockIdx.x * M;
  double s = 0;
  for (int64_t j = threadIdx.x; j < M; j += blockDim.x) s += double(xp[j]);
  const double m = block_all_reduce(s, SumOp{}) / double(M);
  double ss = 0;
  for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
    const double d = double(xp[j]) - m;
    ss += d * d;
  }
  const double is = 1.0 / sqrt(block_all_reduce(ss, SumOp{}) / double(M) + eps);
  for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
    double v = (double(xp[j]) - m) * is;
    if (weight) v *= double(weight[j]);
    if (bias) v += double(bias[j]);
    yp[j] = static_cast<T>(v);
  }
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = static_cast<T>(m);
    invstd[blockIdx.x] = static_cast<T>(is);
  }
}

template <class T>
__global__ void layer_norm_backward_input_kernel(const T* dy, const T* x, int64_t M, const T* mean, const T* invstd,
                                                 const T* weight, T* dx) {
  const int64_t r = blockIdx.x;
  const T* g = dy + r * M;
  const T* xp = x + r * M;
  T* o = dx + r * M;
  const double m = double(mean[r]), is = double(invstd[r]);
  double sg = 0, sgx = 0;
  for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
    const double gj = double(g[j]) * load_or(weight, j, 1.0);
    sg += gj;
    sgx += gj * (double(xp[j]) - m) * is;
  }
  const double mg = block_all_reduce(sg, SumOp{}) / double(M);
  const double mgx = block_all_reduce(sgx, SumOp{}) / double(M);
  for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
    const double gj = double(g[j]) * load_or(weight, j, 1.0);
    o[j] = static_cast<T>(is * (gj - mg - (double(xp[j]) - m) * is * mgx));
  }
}

// dweight[j] = sum_r dy[r, j] * (x[r, j] - mean[r]) * invstd[r];  dbias[j] = sum_r dy[r, j]
// Block (kTileCols, kRowLanes) of grid (column tiles, row chunks): lane y adds rows y, y + kRowLanes,
// ... of its chunk for column j; the lanes are added in order; with one chunk the sums are the
// result, else they go to part_w / part_b (chunks, M) for layer_norm_affine_finish_kernel.
constexpr int kTileCols = 32, kRowLanes = 8;
template <class T>
__global__ void layer_norm_affine_partial_kernel(const T* dy, const T* x, int64_t rows, int64_t M, const T* mean,
                                                 const T* invstd, int64_t chunk_rows, double* part_w, double* part_b,
                                                 T* dweight, T* dbias) {
  __shared__ double sw[kRowLanes][kTileCols], sb[kRowLanes][kTileCols];
  const int64_t j = int64_t(blockIdx.x) * kTileCols + threadIdx.x;
  const int64_t r0 = int64_t(blockIdx.y) * chunk_rows, r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
  double w = 0, b = 0;
  if (j < M)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) {
      const double g = double(dy[r * M + j]);
      w += g * (double(x[r * M + j]) - double(mean[r])) * double(invstd[r]);
      b += g;
    }
  sw[threadIdx.y][threadIdx.x] = w;
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y != 0 || j >= M) return;
  for (int k = 1; k < kRowLanes; ++k) {
    w += sw[k][threadIdx.x];
    b += sb[k][threadIdx.x];
  }
  if (gridDim.y == 1) {
    dweight[j] = static_cast<T>(w);
    dbias[j] = static_cast<T>(b);
  } else {
    part_w[int64_t(blockIdx.y) * M + j] = w;
    part_b[int64_t(blockIdx.y) * M + j] = b;
  }
}

template <class T>
__global__ void layer_norm_affine_finish_kernel(const double* part_w, const double* part_b, int64_t chunks, int64_t M,
                                                T* dweight, T* dbias) {
  MINIDL_GRID_STRIDE(j, M) {
    double w = 0, b = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      w += part_w[c * M + j];
      b += part_b[c * M + j];
    }
    dweight[j] = static_cast<T>(w);
    dbias[j] = static_cast<T>(b);
  }
}

// x (N, C, S): element k of channel c is x[(n * C + c) * S + s] with n = k / S, s = k % S.
template <class T> __device__ __forceinline__ int64_t channel_offset(int64_t k, int64_t c, int64_t C, int64_t S) {
  return ((k / S) * C + c) * S + k % S;
}

// Channel c of x (N, C, S) as a row of count = N * S elements for reduce_rows.
template <class T> struct ChannelValue {
  const T* x;
  int64_t C, S;
  __device__ double operator()(int64_t c, int64_t k) const { return double(x[channel_offset<T>(k, c, C, S)]); }
};
template <class T> struct ChannelSquaredDeviation {
  const T* x;
  int64_t C, S;
  const double* mean;  // (C)
  __device__ double operator()(int64_t c, int64_t k) const {
    const double d = double(x[channel_offset<T>(k, c, C, S)]) - mean[c];
    return d * d;
  }
};
struct StoreChannelMean {
  double* mean;
  int64_t count;
  __device__ void operator()(int64_t c, double s) const { mean[c] = s / double(count); }
};
template <class T> struct StoreStats {
  const double* mean_d;
  int64_t count;
  double eps;
  T* mean;
  T* invstd;
  __device__ void operator()(int64_t c, double ss) const {
    mean[c] = static_cast<T>(mean_d[c]);
    invstd[c] = static_cast<T>(1.0 / sqrt(ss / double(count) + eps));
  }
};

template <class T>
__global__ void batch_norm_elemt_kernel(const T* x, int64_t n, int64_t C, int64_t S, const T* mean, const T* invstd,
                                        const T* weight, const T* bias, T* y) {
  MINIDL_GRID_STRIDE(i, n) {
    const int64_t c = (i / S) % C;
    const double scale = double(invstd[c]) * load_or(weight, c, 1.0);
    y[i] = static_cast<T>((double(x[i]) - double(mean[c])) * scale + load_or(bias, c, 0.0));
  }
}

// (sum dy, sum dy * (x - mean)) of one channel, added as a pair.
struct Sums2 {
  double dy, dy_xmu;
};
struct Sums2Op {
  __device__ __forceinline__ Sums2 operator()(const Sums2& a, const Sums2& b) const {
    return {a.dy + b.dy, a.dy_xmu + b.dy_xmu};
  }
};
template <class T> struct ChannelGradTerms {
  const T* dy;
  const T* x;
  int64_t C, S;
  const T* mean;
  __device__ Sums2 operator()(int64_t c, int64_t k) const {
    const int64_t off = channel_offset<T>(k, c, C, S);
    return {double(dy[off]), double(dy[off]) * (double(x[off]) - double(mean[c]))};
  }
};
template <class T> struct StoreGradSums {
  const T* invstd;
  T* sum_dy;
  T* sum_dy_xmu;
  T* grad_weight;
  T* grad_bias;
  __device__ void operator()(int64_t c, const Sums2& a) const {
    sum_dy[c] = static_cast<T>(a.dy);
    sum_dy_xmu[c] = static_cast<T>(a.dy_xmu);
    if (grad_weight) grad_weight[c] = static_cast<T>(a.dy_xmu * double(invstd[c]));
    if (grad_bias) grad_bias[c] = static_cast<T>(a.dy);
  }
};

// dx for every element, given 1 / the element count per channel (both kernels below).
template <class T>
__device__ void batch_norm_backward_elemt_body(const T* dy, const T* x, int64_t n, int64_t C, int64_t S,
                                               const T* mean, const T* invstd, const T* weight, const T* sum_dy,
                                               const T* sum_dy_xmu, double inv_count, T* dx) {
  MINIDL_GRID_STRIDE(i, n) {
    const int64_t c = (i / S) % C;
    const double is = double(invstd[c]);
    const double mean_dy = double(sum_dy[c]) * inv_count;
    const double k = is * is * double(sum_dy_xmu[c]) * inv_count;
    const double scale = load_or(weight, c, 1.0) * is;
    dx[i] = static_cast<T>((double(dy[i]) - mean_dy - (double(x[i]) - double(mean[c])) * k) * scale);
  }
}

template <class T>
__global__ void batch_norm_backward_elemt_kernel(const T* dy, const T* x, int64_t n, int64_t C, int64_t S,
                                                 const T* mean, const T* invstd, const T* weight, const T* sum_dy,
                                                 const T* sum_dy_xmu, double inv_count, T* dx) {
  batch_norm_backward_elemt_body(dy, x, n, C, S, mean, invstd, weight, sum_dy, sum_dy_xmu, inv_count, dx);
}

// SyncBatchNorm's merge, one thread per channel adding the ranks in order (kernels/batch_norm_gather.h,
// the formula the CPU loop runs).
__global__ void batch_norm_gather_stats_kernel(const double* rows, int64_t R, int64_t C, double eps, double* mean,
                                               double* invstd, double* unbiased_var, double* total) {
  MINIDL_GRID_STRIDE(c, C) {
    const double n_all = batch_norm_gather_count(rows, R, C);
    batch_norm_gather_channel(rows, R, C, c, eps, n_all, mean, invstd, unbiased_var);
    if (c == 0) *total = n_all;
  }
}

// batch_norm_backward_elemt_kernel with the count read on the device (SyncBatchNorm's total).
template <class T>
__global__ void batch_norm_backward_elemt_count_kernel(const T* dy, const T* x, int64_t n, int64_t C, int64_t S,
                                                       const T* mean, const T* invstd, const T* weight, const T* sum_dy,
                                                       const T* sum_dy_xmu, const double* count, T* dx) {
  batch_norm_backward_elemt_body(dy, x, n, C, S, mean, invstd, weight, sum_dy, sum_dy_xmu, 1.0 / *count, dx);
}

unsigned grid_of(int64_t rows, const char* op) {
  if (rows > 2147483647LL) throw std::invalid_argument(std::string(op) + ": too many rows for one CUDA launch");
  return static_cast<unsigned>(rows);
}

template <class T> const T* cp(const void* p) { return static_cast<const T*>(p); }
template <class T> T* mp(void* p) { return static_cast<T*>(p); }

}  // namespace

void layer_norm_forward(ElemType t, const void* x, int64_t rows, int64_t M, const void* weight, const void* bias,
                        double eps, void* y, void* mean, void* invstd) {
  if (rows == 0 || M == 0) return;
  switch_type<true>(t, "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    layer_norm_forward_kernel<T><<<grid_of(rows, "layer_norm"), kThreads, 0, current_compute_stream()>>>(
        cp<T>(x), M, cp<T>(weight), cp<T>(bias), eps, mp<T>(y), mp<T>(mean), mp<T>(invstd));
  });
  check_launch("layer_norm");
}

void layer_norm_backward(ElemType t, const void* dy, const void* x, int64_t rows, int64_t M, const void* mean,
                         const void* invstd, const void* weight, void* dx, void* dweight, void* dbias) {
  if (M == 0) return;
  switch_type<true>(t, "layer_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    cudaStream_t s = current_compute_stream();
    if (rows > 0)
      layer_norm_backward_input_kernel<T><<<grid_of(rows, "layer_norm_backward"), kThreads, 0, s>>>(
          cp<T>(dy), cp<T>(x), M, cp<T>(mean), cp<T>(invstd), cp<T>(weight), mp<T>(dx));
    if (!dweight) return;
    // Row chunks: enough for about kTargetBlocks blocks in all, each at least 8 rows per lane.
    const int64_t tiles = (M + kTileCols - 1) / kTileCols;
    const int64_t most = (rows + 8 * kRowLanes - 1) / (8 * kRowLanes), want = (kTargetBlocks + tiles - 1) / tiles;
    const int64_t target = std::max<int64_t>(1, std::min(most, want));
    const int64_t chunk_rows = std::max<int64_t>(1, (rows + target - 1) / target);
    const int64_t chunks = std::max<int64_t>(1, (rows + chunk_rows - 1) / chunk_rows);
    if (tiles > 2147483647LL) throw std::invalid_argument("layer_norm_backward: too many columns for one CUDA launch");
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(chunks)), block(kTileCols, kRowLanes);
    if (chunks == 1) {
      layer_norm_affine_partial_kernel<T><<<grid, block, 0, s>>>(cp<T>(dy), cp<T>(x), rows, M, cp<T>(mean),
                                                                 cp<T>(invstd), chunk_rows, nullptr, nullptr,
                                                                 mp<T>(dweight), mp<T>(dbias));
      return;
    }
    const int device = current_device();
    double* part = static_cast<double*>(device_malloc(2 * sizeof(double) * size_t(chunks * M), device));
    layer_norm_affine_partial_kernel<T><<<grid, block, 0, s>>>(cp<T>(dy), cp<T>(x), rows, M, cp<T>(mean), cp<T>(invstd),
                                                               chunk_rows, part, part + chunks * M, mp<T>(dweight),
                                                               mp<T>(dbias));
    layer_norm_affine_finish_kernel<T>
        <<<blocks_for(M), kThreads, 0, s>>>(part, part + chunks * M, chunks, M, mp<T>(dweight), mp<T>(dbias));
    device_free(part, device);  // stream-ordered: reused only by work queued after these kernels
  });
  check_launch("layer_norm_backward");
}

// Two-pass like the CPU: the channel means (in double), then the squared deviations from them.
void batch_norm_stats(ElemType t, const void* x, int64_t N, int64_t C, int64_t S, double eps, void* mean,
                      void* invstd) {
  if (C == 0) return;
  switch_type<true>(t, "batch_norm_stats", [&](auto tag) {
    using T = decltype(tag);
    const int64_t count = N * S;
    const int device = current_device();
    double* mean_d = static_cast<double*>(device_malloc(sizeof(double) * size_t(C), device));  // (C)
    reduce_rows(C, count, ChannelValue<T>{cp<T>(x), C, S}, 0.0, SumOp{}, StoreChannelMean{mean_d, count},
                "batch_norm_stats");
    reduce_rows(C, count, ChannelSquaredDeviation<T>{cp<T>(x), C, S, mean_d}, 0.0, SumOp{},
                StoreStats<T>{mean_d, count, eps, mp<T>(mean), mp<T>(invstd)}, "batch_norm_stats");
    device_free(mean_d, device);
  });
}

void batch_norm_elemt(ElemType t, const void* x, int64_t N, int64_t C, int64_t S, const void* mean, const void* invstd,
                      const void* weight, const void* bias, void* y) {
  const int64_t n = N * C * S;
  if (n == 0) return;
  switch_type<true>(t, "batch_norm_elemt", [&](auto tag) {
    using T = decltype(tag);
    batch_norm_elemt_kernel<T><<<blocks_for(n), kThreads, 0, current_compute_stream()>>>(
        cp<T>(x), n, C, S, cp<T>(mean), cp<T>(invstd), cp<T>(weight), cp<T>(bias), mp<T>(y));
  });
  check_launch("batch_norm_elemt");
}

void batch_norm_backward_reduce(ElemType t, const void* dy, const void* x, int64_t N, int64_t C, int64_t S,
                                const void* mean, const void* invstd, void* sum_dy, void* sum_dy_xmu, void* grad_weight,
                                void* grad_bias) {
  if (C == 0) return;
  switch_type<true>(t, "batch_norm_backward_reduce", [&](auto tag) {
    using T = decltype(tag);
    reduce_rows(C, N * S, ChannelGradTerms<T>{cp<T>(dy), cp<T>(x), C, S, cp<T>(mean)}, Sums2{0, 0}, Sums2Op{},
                StoreGradSums<T>{cp<T>(invstd), mp<T>(sum_dy), mp<T>(sum_dy_xmu), mp<T>(grad_weight), mp<T>(grad_bias)},
                "batch_norm_backward_reduce");
  });
}

void batch_norm_backward_elemt(ElemType t, const void* dy, const void* x, int64_t N, int64_t C, int64_t S,
                               const void* mean, const void* invstd, const void* weight, const void* sum_dy,
                               const void* sum_dy_xmu, int64_t count, void* dx) {
  const int64_t n = N * C * S;
  if (n == 0) return;
  switch_type<true>(t, "batch_norm_backward_elemt", [&](auto tag) {
    using T = decltype(tag);
    batch_norm_backward_elemt_kernel<T><<<blocks_for(n), kThreads, 0, current_compute_stream()>>>(
        cp<T>(dy), cp<T>(x), n, C, S, cp<T>(mean), cp<T>(invstd), cp<T>(weight), cp<T>(sum_dy), cp<T>(sum_dy_xmu),
        1.0 / double(count), mp<T>(dx));
  });
  check_launch("batch_norm_backward_elemt");
}

void batch_norm_gather_stats(const double* rows, int64_t R, int64_t C, double eps, double* mean, double* invstd,
                             double* unbiased_var, double* total) {
  if (C == 0) return;
  batch_norm_gather_stats_kernel<<<blocks_for(C), kThreads, 0, current_compute_stream()>>>(rows, R, C, eps, mean,
                                                                                           invstd, unbiased_var, total);
  check_launch("batch_norm_gather_stats");
}

void batch_norm_backward_elemt(ElemType t, const void* dy, const void* x, int64_t N, int64_t C, int64_t S,
                               const void* mean, const void* invstd, const void* weight, const void* sum_dy,
                               const void* sum_dy_xmu, const double* count, void* dx) {
  const int64_t n = N * C * S;
  if (n == 0) return;
  switch_type<true>(t, "batch_norm_backward_elemt", [&](auto tag) {
    using T = decltype(tag);
    batch_norm_backward_elemt_count_kernel<T><<<blocks_for(n), kThreads, 0, current_compute_stream()>>>(
        cp<T>(dy), cp<T>(x), n, C, S, cp<T>(mean), cp<T>(invstd), cp<T>(weight), cp<T>(sum_dy), cp<T>(sum_dy_xmu),
        count, mp<T>(dx));
  });
  check_launch("batch_norm_backward_elemt");
}

}  // namespace minidl::kernels::cuda
