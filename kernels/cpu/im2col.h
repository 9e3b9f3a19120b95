// kernels/cpu/im2col.h — im2col and its adjoint col2im, the data movement that turns a 2-d
// convolution into one GEMM per image (and group):
//   col[(c*kH + kh)*kW + kw, oh*W_out + ow] = x[c, oh*stride_h - pad_h + kh*dil_h, ow*stride_w - pad_w + kw*dil_w]
// (0 where that position falls in the padding). Each row of col takes, from one input row, the
// outputs ow in [lo, hi) (valid_outputs: the columns ow * stride_w + w0 inside the row) and zeros
// outside, so the inner loops are plain strided copies/adds without a bounds test per element;
// stride 1 (a shifted copy) and 2 get loops whose stride the compiler knows, so they vectorise.
// (tests/tensor/test_cpu_fast_paths.cpp checks both against their definition, strides 1 to 3.)
// col2im scatters-adds col back into x's layout,
// so col2im(dcol) is the gradient of im2col. One image at a time, single-threaded: callers run
// images in parallel. Tested through tensor/ops_conv.cpp by tests/tensor/test_ops_conv.cpp
// (against a naive direct convolution, and float64 finite differences of dx, dw, db).
#pragma once
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "minidl/kernels/cpu/vec_math.h"

namespace minidl::kernels::cpu {

struct ConvGeometry {
  int64_t C, H, W;  // input planes (of one group) and their size
  int64_t kH, kW;  // kernel
  int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  int64_t H_out, W_out;
};

// The outputs [lo, hi) of a row of W_out whose column ow reads input column ow * stride + w0 of
// a row of W: those with 0 <= ow * stride + w0 < W.
struct ValidOutputs {
  int64_t lo, hi;
};
inline ValidOutputs valid_outputs(int64_t w0, int64_t stride, int64_t W, int64_t W_out) {
  const int64_t lo = w0 >= 0 ? 0 : (-w0 + stride - 1) / stride;
  const int64_t hi = W - w0 <= 0 ? 0 : (W - w0 + stride - 1) / stride;
  const int64_t lo_c = std::clamp<int64_t>(lo, 0, W_out);
  return {lo_c, std::clamp<int64_t>(hi, lo_c, W_out)};
}

// out[i] = in[2 i] for i in [0, n), 16 floats at a time: the even lanes of 32 read by masked
// loads that stop at in[2 n - 2], the row's last input (the compiler's own loop for this ran 8 at
// a time, then one by one: most of a stride-2 im2col's time on rows of 15 or 16 outputs)
inline void gather_stride2(const float* in, int64_t n, float* out) {
  constexpr int64_t kW = kLanes<float>;
  for (int64_t i = 0; i < n; i += kW) {
    const int64_t avail = 2 * (n - i) - 1;  // in[2 i .. 2 n - 2]
    const FloatLanes lo = load_first_lanes(in + 2 * i, std::min(avail, kW));
    const FloatLanes hi = avail > kW ? load_first_lanes(in + 2 * i + kW, std::min(avail - kW, kW)) : FloatLanes{};
    store_first_lanes(out + i, even_lanes(lo, hi), std::min(n - i, kW));
  }
}

// out[ow] = in[ow * stride] for ow in [0, n), with the strides 1 and 2 as constants (float's
// stride 2: gather_stride2)
template <class T> void gather_strided(const T* in, int64_t stride, int64_t n, T* out) {
  if constexpr (std::is_same_v<T, float>) {
    if (stride == 2) return gather_stride2(in, n, out);
  }
  if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) out[i] = in[i];
  } else if (stride == 2) {
    for (int64_t i = 0; i < n; ++i) out[i] = in[2 * i];
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = in[i * stride];
  }
}
// out[2 i] += in[i] for i in [0, n), 16 floats at a time: in's lanes interleaved with -0.0 (x +
// -0.0 is x for every x, -0.0 included, so the odd positions keep their bits) and added to the 32
// floats of out, loaded and stored masked up to out[2 n - 2]
inline void scatter_add_stride2(const float* in, int64_t n, float* out) {
  constexpr int64_t kW = kLanes<float>;
  constexpr float kNegativeZero = -0.0f;
  const FloatLanes negative_zeros = broadcast_lanes(&kNegativeZero);  // (splat(-0.0f) is +0.0)
  for (int64_t i = 0; i < n; i += kW) {
    const int64_t m = std::min(n - i, kW), avail = 2 * m - 1;  // out[2 i .. 2 (i + m - 1)]
    FloatLanes lo, hi;
    interleave(load_first_lanes(in + i, m), negative_zeros, lo, hi);
    float* o = out + 2 * i;
    store_first_lanes(o, load_first_lanes(o, std::min(avail, kW)) + lo, std::min(avail, kW));
    if (avail > kW) store_first_lanes(o + kW, load_first_lanes(o + kW, avail - kW) + hi, avail - kW);
  }
}

// out[ow * stride] += in[ow] for ow in [0, n), likewise (float's stride 2: scatter_add_stride2)
template <class T> void scatter_add_strided(const T* in, int64_t stride, int64_t n, T* out) {
  if constexpr (std::is_same_v<T, float>) {
    if (stride == 2) return scatter_add_stride2(in, n, out);
  }
  if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) out[i] += in[i];
  } else if (stride == 2) {
    for (int64_t i = 0; i < n; ++i) out[2 * i] += in[i];
  } else {
    for (int64_t i = 0; i < n; ++i) out[i * stride] += in[i];
  }
}

// x (C, H, W) -> col (C*kH*kW, H_out*W_out)
template <class T> void im2col(const T* x, const ConvGeometry& g, T* col) {
  const int64_t L = g.H_out * g.W_out;
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t kh = 0; kh < g.kH; ++kh)
      for (int64_t kw = 0; kw < g.kW; ++kw) {
        T* row = col + ((c * g.kH + kh) * g.kW + kw) * L;
        const T* plane = x + c * g.H * g.W;
        const int64_t w0 = kw * g.dil_w - g.pad_w;
        const auto [lo, hi] = valid_outputs(w0, g.stride_w, g.W, g.W_out);  // zeros where it hangs over the edges
        for (int64_t oh = 0; oh < g.H_out; ++oh) {
          const int64_t h = oh * g.stride_h - g.pad_h + kh * g.dil_h;
          T* out = row + oh * g.W_out;
          if (h < 0 || h >= g.H) {
            std::fill(out, out + g.W_out, T(0));
            continue;
          }
          std::fill(out, out + lo, T(0));
          if (hi > lo) gather_strided(plane + h * g.W + lo * g.stride_w + w0, g.stride_w, hi - lo, out + lo);
          std::fill(out + hi, out + g.W_out, T(0));
        }
      }
}

// dx (C, H, W) += col (C*kH*kW, H_out*W_out) scattered back; dx must be initialised by the caller.
template <class T> void col2im(const T* col, const ConvGeometry& g, T* dx) {
  const int64_t L = g.H_out * g.W_out;
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t kh = 0; kh < g.kH; ++kh)
      for (int64_t kw = 0; kw < g.kW; ++kw) {
        const T* row = col + ((c * g.kH + kh) * g.kW + kw) * L;
        T* plane = dx + c * g.H * g.W;
        const int64_t w0 = kw * g.dil_w - g.pad_w;
        const auto [lo, hi] = valid_outputs(w0, g.stride_w, g.W, g.W_out);  // the same columns, added back
        if (hi <= lo) continue;
        for (int64_t oh = 0; oh < g.H_out; ++oh) {
          const int64_t h = oh * g.stride_h - g.pad_h + kh * g.dil_h;
          if (h < 0 || h >= g.H) continue;
          scatter_add_strided(row + oh * g.W_out + lo, g.stride_w, hi - lo, plane + h * g.W + lo * g.stride_w + w0);
        }
      }
}

}  // namespace minidl::kernels::cpu
