// kernels/cpu/pool.h — 2-d pooling on one (H, W) plane at a time: max (with argmax indices),
// average (count_include_pad or not) and adaptive average, each forward beside its backward.
// Window rules follow PyTorch's CPU kernels exactly (padding = -inf for max, PyTorch's divisor
// rule for avg, start = floor(o*H/OH), end = ceil((o+1)*H/OH) for adaptive). Callers loop over
// the N*C planes with parallel_for; planes never share output, so no reduction order matters.
// Tested through tensor/ops_pool.cpp by tests/tensor/test_ops_pool.cpp (hand-computed cases and
// float64 finite differences of every backward).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace minidl::kernels::cpu {

struct PoolWindow {
  int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
};

// x (H, W) -> y (H_out, W_out), idx (H_out, W_out) = flat h*W + w of the max in x.
// NaN wins (propagates), as in PyTorch; ties keep the first position in row-major order.
template <class T>
void max_pool2d_plane_forward(const T* x, int64_t H, int64_t W, T* y, int64_t* idx, int64_t H_out, int64_t W_out,
                              const PoolWindow& p) {
  for (int64_t oh = 0; oh < H_out; ++oh) {
    const int64_t h0 = oh * p.stride_h - p.pad_h;
    const int64_t hs = std::max<int64_t>(h0, 0), he = std::min(h0 + p.kernel_h, H);
    for (int64_t ow = 0; ow < W_out; ++ow) {
      const int64_t w0 = ow * p.stride_w - p.pad_w;
      const int64_t ws = std::max<int64_t>(w0, 0), we = std::min(w0 + p.kernel_w, W);
      T best = -std::numeric_limits<T>::infinity();
      int64_t best_i = hs * W + ws;
      bool nan_seen = false;
      for (int64_t h = hs; h < he && !nan_seen; ++h)
        for (int64_t w = ws; w < we && !nan_seen; ++w) {
          const T v = x[h * W + w];
          if (v > best || std::isnan(v)) {
            best = v;
            best_i = h * W + w;
            nan_seen = std::isnan(v);
          }
        }
      y[oh * W_out + ow] = best;
      idx[oh * W_out + ow] = best_i;
    }
  }
}

// The common 2x2 window, stride 2, no padding (H_out = H / 2, W_out = W / 2): the same result as
// max_pool2d_plane_forward (tests/tensor/test_cpu_fast_paths.cpp checks it against that reference,
// NaNs and ties included) without the per-element window bookkeeping. Candidates are taken in
// row-major order; a later one wins only if it is greater or a NaN while the best so far is not.
// With AVX-512 (checked at run time) 16 outputs of a row are done at once.
namespace pool_detail {
// One output row of float 2x2 max-pool with AVX-512 (kernels/cpu/pool_avx512.cpp); returns false,
// doing nothing, when the CPU (checked at run time) or the build has no AVX-512.
bool max_pool2d_row_2x2_avx512(const float* r0, const float* r1, float* y, int64_t* idx, int64_t W_out, int64_t W,
                               int64_t base);
// The same rule on a plane z (rows of W values) for the fused batch norm + ReLU + max-pool of
// kernels/cpu/norm.h: y = the max, arg = the winner's place 2 * dh + dw, plus 4 where the ReLU
// passes the gradient (y > 0 or NaN: norm.h's relu_keeps), x_at = x there (y, arg, x_at: (H_out, W_out)).
bool max_pool2d_plane_2x2_arg_avx512(const float* z, const float* x, int64_t W, int64_t H_out, int64_t W_out, float* y,
                                     uint8_t* arg, float* x_at);
// Its backward's input gradient for one plane: g (rows of W values) = v at the place arg names
// and 0 elsewhere in each window, v = 0 + dout where arg has the ReLU's bit 4, else 0; what no
// window covers (a last odd row / column) is left as it was. Needs AVX-512 F, BW and VL.
bool relu_max_pool2d_grad_plane_2x2_avx512(const float* dout, const uint8_t* arg, int64_t W, int64_t H_out,
                                           int64_t W_out, float* g);
}  // namespace pool_detail

template <class T>
void max_pool2d_plane_forward_2x2(const T* x, int64_t H, int64_t W, T* y, int64_t* idx, int64_t H_out, int64_t W_out) {
  (void)H;
  for (int64_t oh = 0; oh < H_out; ++oh) {
    const T* r0 = x + 2 * oh * W;
    const T* r1 = r0 + W;
    T* yo = y + oh * W_out;
    int64_t* io = idx + oh * W_out;
    const int64_t base = 2 * oh * W;
    if constexpr (std::is_same_v<T, float>) {
      if (pool_detail::max_pool2d_row_2x2_avx512(r0, r1, yo, io, W_out, W, base)) continue;
    }
    for (int64_t ow = 0; ow < W_out; ++ow) {
      T best = r0[2 * ow];
      int64_t bi = 0;
      auto consider = [&](T v, int64_t off) {
        const bool take = (best == best) & ((v > best) | (v != v));
        best = take ? v : best;
        bi = take ? off : bi;
      };
      consider(r0[2 * ow + 1], 1);
      consider(r1[2 * ow], W);
      consider(r1[2 * ow + 1], W + 1);
      yo[ow] = best;
      io[ow] = base + 2 * ow + bi;
    }
  }
}

// dx (H*W) = the sum of dy over the outputs whose recorded index is that element (0 elsewhere);
// dx is overwritten. Returns false (leaving dx partly written) when an index is outside [0, H*W).
template <class T>
bool max_pool2d_plane_backward(const T* dy, const int64_t* idx, int64_t n_out, T* dx, int64_t plane_elems) {
  std::fill(dx, dx + plane_elems, T(0));
  bool ok = true;
  for (int64_t i = 0; i < n_out; ++i) {
    const int64_t j = idx[i];
    if (j < 0 || j >= plane_elems) {
      ok = false;
      continue;
    }
    dx[j] += dy[i];
  }
  return ok;
}

// The window of output (oh, ow) clipped to the input, and its divisor, as PyTorch's avg_pool2d.
struct AvgWindow {
  int64_t hs, he, ws, we;
  int64_t divisor;
};
inline AvgWindow avg_window(int64_t oh, int64_t ow, int64_t H, int64_t W, const PoolWindow& p, bool count_include_pad) {
  int64_t hs = oh * p.stride_h - p.pad_h, ws = ow * p.stride_w - p.pad_w;
  int64_t he = std::min(hs + p.kernel_h, H + p.pad_h), we = std::min(ws + p.kernel_w, W + p.pad_w);
  const int64_t padded = (he - hs) * (we - ws);
  hs = std::max<int64_t>(hs, 0);
  ws = std::max<int64_t>(ws, 0);
  he = std::min(he, H);
  we = std::min(we, W);
  return {hs, he, ws, we, count_include_pad ? padded : (he - hs) * (we - ws)};
}

// x (H, W) -> y (H_out, W_out); sums in double.
template <class T>
void avg_pool2d_plane_forward(const T* x, int64_t H, int64_t W, T* y, int64_t H_out, int64_t W_out, const PoolWindow& p,
                              bool count_include_pad) {
  for (int64_t oh = 0; oh < H_out; ++oh)
    for (int64_t ow = 0; ow < W_out; ++ow) {
      const AvgWindow a = avg_window(oh, ow, H, W, p, count_include_pad);
      double s = 0;
      for (int64_t h = a.hs; h < a.he; ++h)
        for (int64_t w = a.ws; w < a.we; ++w) s += x[h * W + w];
      y[oh * W_out + ow] = static_cast<T>(a.divisor > 0 ? s / static_cast<double>(a.divisor) : 0.0);
    }
}

// dx (H, W) += dy / divisor over each window; dx must be zeroed by the caller.
template <class T>
void avg_pool2d_plane_backward(const T* dy, int64_t H_out, int64_t W_out, T* dx, int64_t H, int64_t W,
                               const PoolWindow& p, bool count_include_pad) {
  for (int64_t oh = 0; oh < H_out; ++oh)
    for (int64_t ow = 0; ow < W_out; ++ow) {
      const AvgWindow a = avg_window(oh, ow, H, W, p, count_include_pad);
      if (a.divisor <= 0) continue;
      const T g = static_cast<T>(static_cast<double>(dy[oh * W_out + ow]) / static_cast<double>(a.divisor));
      for (int64_t h = a.hs; h < a.he; ++h)
        for (int64_t w = a.ws; w < a.we; ++w) dx[h * W + w] += g;
    }
}

// PyTorch's adaptive pooling bounds: [floor(o*in/out), ceil((o+1)*in/out)).
inline int64_t adaptive_start(int64_t o, int64_t out, int64_t in) { return (o * in) / out; }
inline int64_t adaptive_end(int64_t o, int64_t out, int64_t in) { return ((o + 1) * in + out - 1) / out; }

template <class T>
void adaptive_avg_pool2d_plane_forward(const T* x, int64_t H, int64_t W, T* y, int64_t H_out, int64_t W_out) {
  for (int64_t oh = 0; oh < H_out; ++oh) {
    const int64_t hs = adaptive_start(oh, H_out, H), he = adaptive_end(oh, H_out, H);
    for (int64_t ow = 0; ow < W_out; ++ow) {
      const int64_t ws = adaptive_start(ow, W_out, W), we = adaptive_end(ow, W_out, W);
      double s = 0;
      for (int64_t h = hs; h < he; ++h)
        for (int64_t w = ws; w < we; ++w) s += x[h * W + w];
      y[oh * W_out + ow] = static_cast<T>(s / static_cast<double>((he - hs) * (we - ws)));
    }
  }
}

// dx (H, W) += dy / window size; dx must be zeroed by the caller.
template <class T>
void adaptive_avg_pool2d_plane_backward(const T* dy, int64_t H_out, int64_t W_out, T* dx, int64_t H, int64_t W) {
  for (int64_t oh = 0; oh < H_out; ++oh) {
    const int64_t hs = adaptive_start(oh, H_out, H), he = adaptive_end(oh, H_out, H);
    for (int64_t ow = 0; ow < W_out; ++ow) {
      const int64_t ws = adaptive_start(ow, W_out, W), we = adaptive_end(ow, W_out, W);
      const T g = static_cast<T>(static_cast<double>(dy[oh * W_out + ow]) / static_cast<double>((he - hs) * (we - ws)));
      for (int64_t h = hs; h < he; ++h)
        for (int64_t w = ws; w < we; ++w) dx[h * W + w] += g;
    }
  }
}

// Whether adaptive pooling's windows tile the plane (each size a multiple of its output's): every
// input then lies in exactly one window.
inline bool adaptive_windows_tile(int64_t H, int64_t H_out, int64_t W, int64_t W_out) {
  return H_out > 0 && W_out > 0 && H % H_out == 0 && W % W_out == 0;
}

// dx (H, W) = 0 + dy / window size where the windows tile the plane (adaptive_windows_tile): each
// input written once, the bits adaptive_avg_pool2d_plane_backward adds onto zeros, without the
// zeroing pass (global average pooling's backward is one broadcast per plane).
template <class T>
void adaptive_avg_pool2d_plane_backward_tiled(const T* dy, int64_t H_out, int64_t W_out, T* dx, int64_t H, int64_t W) {
  const int64_t kh = H / H_out, kw = W / W_out;
  for (int64_t oh = 0; oh < H_out; ++oh)
    for (int64_t ow = 0; ow < W_out; ++ow) {
      const T g = static_cast<T>(static_cast<double>(dy[oh * W_out + ow]) / static_cast<double>(kh * kw));
      const T v = T(0) + g;  // as added onto a zeroed dx (-0.0 becomes +0.0)
      for (int64_t h = oh * kh; h < (oh + 1) * kh; ++h)
        for (int64_t w = ow * kw; w < (ow + 1) * kw; ++w) dx[h * W + w] = v;
    }
}

}  // namespace minidl::kernels::cpu
