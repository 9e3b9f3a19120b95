// kernels/cuda/pool.cu — max_pool2d, avg_pool2d and adaptive_avg_pool2d, forward and backward,
// on planes of (H, W). Same rules as kernels/cpu/pool.h: max keeps the first maximum in row-major
// order and lets NaN win; avg's divisor follows PyTorch (count_include_pad); adaptive windows are
// [floor(o*in/out), ceil((o+1)*in/out)). Backward passes are written without atomics:
//   max: one thread per input element adds the gradients of the outputs whose window covers it
//   and whose argmax it is; avg / adaptive: one thread per input element gathers the windows
//   that contain it. Both in output order (the order in which the CPU's scatter adds them) — so
//   results match the CPU bit for bit.
// Tested by tests/kernels/test_cuda_nn.cpp against the CPU ops.
#include "minidl/kernels/cuda/common.cuh"

namespace minidl::kernels::cuda {

namespace {

__device__ __forceinline__ int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }
__device__ __forceinline__ int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

template <class T>
__global__ void max_pool_forward_kernel(const T* x, int64_t H, int64_t W, T* y, int64_t* idx, int64_t H_out,
                                        int64_t W_out, PoolWindow p, int64_t total) {
  MINIDL_GRID_STRIDE(e, total) {
    const int64_t ow = e % W_out, oh = (e / W_out) % H_out, pl = e / (W_out * H_out);
    const T* xp = x + pl * H * W;
    const int64_t h0 = oh * p.stride_h - p.pad_h, w0 = ow * p.stride_w - p.pad_w;
    const int64_t hs = imax(h0, 0), he = imin(h0 + p.kernel_h, H);
    const int64_t ws = imax(w0, 0), we = imin(w0 + p.kernel_w, W);
    T best = -INFINITY;
    int64_t best_i = hs * W + ws;
    bool nan_seen = false;
    for (int64_t h = hs; h < he && !nan_seen; ++h)
      for (int64_t w = ws; w < we && !nan_seen; ++w) {
        const T v = xp[h * W + w];
        if (v > best || v != v) {
          best = v;
          best_i = h * W + w;
          nan_seen = v != v;
        }
      }
    y[e] = best;
    idx[e] = best_i;
  }
}

// The outputs whose window (oh * stride - pad + [0, kernel)) can contain input row h: oh in
// [first, last] (clipped to [0, n_out - 1]; empty when first > last).
struct CoverRange {
  int64_t first, last;
};
__device__ __forceinline__ CoverRange covering_outputs(int64_t h, int64_t kernel, int64_t stride, int64_t pad,
                                                       int64_t n_out) {
  const int64_t lo = h + pad - kernel + 1;  // oh * stride >= lo
  return {imax(0, lo <= 0 ? 0 : (lo + stride - 1) / stride), imin(n_out - 1, (h + pad) / stride)};
}

// One thread per input element (pl, h, w) of dx (planes, H, W): the sum of dy over the outputs
// of windows covering it whose argmax (idx) it is, in output order.
template <class T>
__global__ void max_pool_backward_kernel(const T* dy, const int64_t* idx, int64_t H_out, int64_t W_out, T* dx,
                                         int64_t H, int64_t W, PoolWindow p, int64_t total) {
  MINIDL_GRID_STRIDE(e, total) {
    const int64_t w = e % W, h = (e / W) % H, pl = e / (W * H);
    const int64_t base = pl * H_out * W_out, self = h * W + w;
    const CoverRange rh = covering_outputs(h, p.kernel_h, p.stride_h, p.pad_h, H_out);
    const CoverRange rw = covering_outputs(w, p.kernel_w, p.stride_w, p.pad_w, W_out);
    T acc = T(0);
    for (int64_t oh = rh.first; oh <= rh.last; ++oh)
      for (int64_t ow = rw.first; ow <= rw.last; ++ow) {
        const int64_t o = base + oh * W_out + ow;
        if (idx[o] == self) acc += dy[o];
      }
    dx[e] = acc;
  }
}

struct AvgWindow {
  int64_t hs, he, ws, we, divisor;
};
__device__ __forceinline__ AvgWindow avg_window(int64_t oh, int64_t ow, int64_t H, int64_t W, const PoolWindow& p,
                                                bool count_include_pad) {
  int64_t hs = oh * p.stride_h - p.pad_h, ws = ow * p.stride_w - p.pad_w;
  int64_t he = imin(hs + p.kernel_h, H + p.pad_h), we = imin(ws + p.kernel_w, W + p.pad_w);
  const int64_t padded = (he - hs) * (we - ws);
  hs = imax(hs, 0);
  ws = imax(ws, 0);
  he = imin(he, H);
  we = imin(we, W);
  return {hs, he, ws, we, count_include_pad ? padded : (he - hs) * (we - ws)};
}

template <class T>
__global__ void avg_pool_forward_kernel(const T* x, int64_t H, int64_t W, T* y, int64_t H_out, int64_t W_out,
                                        PoolWindow p, bool cip, int64_t total) {
  MINIDL_GRID_STRIDE(e, total) {
    const int64_t ow = e % W_out, oh = (e / W_out) % H_out, pl = e / (W_out * H_out);
    const T* xp = x + pl * H * W;
    const AvgWindow a = avg_window(oh, ow, H, W, p, cip);
    double s = 0;
    for (int64_t h = a.hs; h < a.he; ++h)
      for (int64_t w = a.ws; w < a.we; ++w) s += double(xp[h * W + w]);
    y[e] = static_cast<T>(a.divisor > 0 ? s / double(a.divisor) : 0.0);
  }
}

// One thread per input element (pl, h, w): the outputs whose window covers it, in output order.
template <class T>
__global__ void avg_pool_backward_kernel(const T* dy, int64_t H_out, int64_t W_out, T* dx, int64_t H, int64_t W,
                                         PoolWindow p, bool cip, int64_t total) {
  MINIDL_GRID_STRIDE(e, total) {
    const int64_t w = e % W, h = (e / W) % H, pl = e / (W * H);
    const T* g = dy + pl * H_out * W_out;
    // outputs with oh * stride - pad <= h < oh * stride - pad + kernel
    const int64_t oh0 = imax(0, (h + p.pad_h - p.kernel_h) / p.stride_h),
                  oh1 = imin(H_out - 1, (h + p.pad_h) / p.stride_h);
    const int64_t ow0 = imax(0, (w + p.pad_w - p.kernel_w) / p.stride_w),
                  ow1 = imin(W_out - 1, (w + p.pad_w) / p.stride_w);
    T acc = T(0);
    for (int64_t oh = oh0; oh <= oh1; ++oh)
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const AvgWindow a = avg_window(oh, ow, H, W, p, cip);
        if (a.divisor <= 0 || h < a.hs || h >= a.he || w < a.ws || w >= a.we) continue;
        acc += static_cast<T>(double(g[oh * W_out + ow]) / double(a.divisor));
      }
    dx[e] = acc;
  }
}

__device__ __forceinline__ int64_t adaptive_start(int64_t o, int64_t out, int64_t in) { return (o * in) / out; }
__device__ __forceinline__ int64_t adaptive_end(int64_t o, int64_t out, int64_t in) {
  return ((o + 1) * in + out - 1) / out;
}

template <class T>
__global__ void adaptive_forward_kernel(const T* x, int64_t H, int64_t W, T* y, int64_t oh_n, int64_t ow_n,
                                        int64_t total) {
  MINIDL_GRID_STRIDE(e, total) {
    const int64_t ow = e % ow_n, oh = (e / ow_n) % oh_n, pl = e / (ow_n * oh_n);
    const T* xp = x + pl * H * W;
    const int64_t hs = adaptive_start(oh, oh_n, H), he = adaptive_end(oh, oh_n, H);
    const int64_t ws = adaptive_start(ow, ow_n, W), we = adaptive_end(ow, ow_n, W);
    double s = 0;
    for (int64_t h = hs; h < he; ++h)
      for (int64_t w = ws; w < we; ++w) s += double(xp[h * W + w]);
    y[e] = static_cast<T>(s / double((he - hs) * (we - ws)));
  }
}

template <class T>
__global__ void adaptive_backward_kernel(const T* dy, int64_t oh_n, int64_t ow_n, T* dx, int64_t H, int64_t W,
                                         int64_t total) {
  MINIDL_GRID_STRIDE(e, total) {
    const int64_t w = e % W, h = (e / W) % H, pl = e / (W * H);
    const T* g = dy + pl * oh_n * ow_n;
    T acc = T(0);
    for (int64_t oh = 0; oh < oh_n; ++oh) {
      const int64_t hs = adaptive_start(oh, oh_n, H), he = adaptive_end(oh, oh_n, H);
      if (h < hs || h >= he) continue;
      for (int64_t ow = 0; ow < ow_n; ++ow) {
        const int64_t ws = adaptive_start(ow, ow_n, W), we = adaptive_end(ow, ow_n, W);
        if (w < ws || w >= we) continue;
        acc += static_cast<T>(double(g[oh * ow_n + ow]) / double((he - hs) * (we - ws)));
      }
    }
    dx[e] = acc;
  }
}

template <class T> const T* cp(const void* p) { return static_cast<const T*>(p); }
template <class T> T* mp(void* p) { return static_cast<T*>(p); }

}  // namespace

void max_pool2d_forward(ElemType t, const void* x, int64_t planes, int64_t H, int64_t W, void* y, int64_t* indices,
                        int64_t H_out, int64_t W_out, const PoolWindow& win) {
  const int64_t total = planes * H_out * W_out;
  if (total == 0) return;
  switch_type<true>(t, "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    max_pool_forward_kernel<T><<<blocks_for(total), kThreads, 0, current_compute_stream()>>>(
        cp<T>(x), H, W, mp<T>(y), indices, H_out, W_out, win, total);
  });
  check_launch("max_pool2d");
}

void max_pool2d_backward(ElemType t, const void* dy, const int64_t* indices, int64_t planes, int64_t H_out,
                         int64_t W_out, int64_t H, int64_t W, const PoolWindow& win, void* dx) {
  const int64_t total = planes * H * W;
  if (total == 0) return;
  switch_type<true>(t, "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    max_pool_backward_kernel<T><<<blocks_for(total), kThreads, 0, current_compute_stream()>>>(
        cp<T>(dy), indices, H_out, W_out, mp<T>(dx), H, W, win, total);
  });
  check_launch("max_pool2d_backward");
}

void avg_pool2d_forward(ElemType t, const void* x, int64_t planes, int64_t H, int64_t W, void* y, int64_t H_out,
                        int64_t W_out, const PoolWindow& win, bool count_include_pad) {
  const int64_t total = planes * H_out * W_out;
  if (total == 0) return;
  switch_type<true>(t, "avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    avg_pool_forward_kernel<T><<<blocks_for(total), kThreads, 0, current_compute_stream()>>>(
        cp<T>(x), H, W, mp<T>(y), H_out, W_out, win, count_include_pad, total);
  });
  check_launch("avg_pool2d");
}

void avg_pool2d_backward(ElemType t, const void* dy, int64_t planes, int64_t H_out, int64_t W_out, void* dx, int64_t H,
                         int64_t W, const PoolWindow& win, bool count_include_pad) {
  const int64_t total = planes * H * W;
  if (total == 0) return;
  switch_type<true>(t, "avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    avg_pool_backward_kernel<T><<<blocks_for(total), kThreads, 0, current_compute_stream()>>>(
        cp<T>(dy), H_out, W_out, mp<T>(dx), H, W, win, count_include_pad, total);
  });
  check_launch("avg_pool2d_backward");
}

void adaptive_avg_pool2d_forward(ElemType t, const void* x, int64_t planes, int64_t H, int64_t W, void* y,
                                 int64_t out_h, int64_t out_w) {
  const int64_t total = planes * out_h * out_w;
  if (total == 0) return;
  switch_type<true>(t, "adaptive_avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    adaptive_forward_kernel<T>
        <<<blocks_for(total), kThreads, 0, current_compute_stream()>>>(cp<T>(x), H, W, mp<T>(y), out_h, out_w, total);
  });
  check_launch("adaptive_avg_pool2d");
}

void adaptive_avg_pool2d_backward(ElemType t, const void* dy, int64_t planes, int64_t out_h, int64_t out_w, void* dx,
                                  int64_t H, int64_t W) {
  const int64_t total = planes * H * W;
  if (total == 0) return;
  switch_type<true>(t, "adaptive_avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    adaptive_backward_kernel<T>
        <<<blocks_for(total), kThreads, 0, current_compute_stream()>>>(cp<T>(dy), out_h, out_w, mp<T>(dx), H, W, total);
  });
  check_launch("adaptive_avg_pool2d_backward");
}

}  // namespace minidl::kernels::cuda
