// kernels/cpu/im2col.h — im2col and its adjoint col2im, the data movement that turns a 2-d
// convolution into one GEMM per image (and group):
//   col[(c*kH + kh)*kW + kw, oh*W_out + ow] = x[c, oh*stride_h - pad_h + kh*dil_h, ow*stride_w - pad_w + kw*dil_w]
// (0 where that position falls in the padding). With stride_w == 1 each row of col is a shifted
// copy of an input row, so the inner loops become plain copies/adds over the valid range (the
// general loop, kept for other strides, is the reference: tests/tensor/test_cpu_fast_paths.cpp).
// col2im scatters-adds col back into x's layout,
// so col2im(dcol) is the gradient of im2col. One image at a time, single-threaded: callers run
// images in parallel. Tested through tensor/ops_conv.cpp by tests/tensor/test_ops_conv.cpp
// (against a naive direct convolution, and float64 finite differences of dx, dw, db).
#pragma once
#include <algorithm>
#include <cstdint>

namespace minidl::kernels::cpu {

struct ConvGeometry {
  int64_t C, H, W;  // input planes (of one group) and their size
  int64_t kH, kW;  // kernel
  int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  int64_t H_out, W_out;
};

// x (C, H, W) -> col (C*kH*kW, H_out*W_out)
template <class T> void im2col(const T* x, const ConvGeometry& g, T* col) {
  const int64_t L = g.H_out * g.W_out;
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t kh = 0; kh < g.kH; ++kh)
      for (int64_t kw = 0; kw < g.kW; ++kw) {
        T* row = col + ((c * g.kH + kh) * g.kW + kw) * L;
        const T* plane = x + c * g.H * g.W;
        for (int64_t oh = 0; oh < g.H_out; ++oh) {
          const int64_t h = oh * g.stride_h - g.pad_h + kh * g.dil_h;
          T* out = row + oh * g.W_out;
          if (h < 0 || h >= g.H) {
            for (int64_t ow = 0; ow < g.W_out; ++ow) out[ow] = T(0);
            continue;
          }
          const T* in = plane + h * g.W;
          const int64_t w0 = kw * g.dil_w - g.pad_w;
          if (g.stride_w == 1) {  // a shifted copy of the row, zeros where it hangs over the edges
            const int64_t lo = std::clamp<int64_t>(-w0, 0, g.W_out), hi = std::clamp<int64_t>(g.W - w0, lo, g.W_out);
            for (int64_t ow = 0; ow < lo; ++ow) out[ow] = T(0);
            for (int64_t ow = lo; ow < hi; ++ow) out[ow] = in[ow + w0];
            for (int64_t ow = hi; ow < g.W_out; ++ow) out[ow] = T(0);
            continue;
          }
          for (int64_t ow = 0; ow < g.W_out; ++ow) {
            const int64_t w = ow * g.stride_w + w0;
            out[ow] = (w >= 0 && w < g.W) ? in[w] : T(0);
          }
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
        for (int64_t oh = 0; oh < g.H_out; ++oh) {
          const int64_t h = oh * g.stride_h - g.pad_h + kh * g.dil_h;
          if (h < 0 || h >= g.H) continue;
          const T* in = row + oh * g.W_out;
          T* out = plane + h * g.W;
          const int64_t w0 = kw * g.dil_w - g.pad_w;
          if (g.stride_w == 1) {  // the same shifted row, added back
            const int64_t lo = std::clamp<int64_t>(-w0, 0, g.W_out), hi = std::clamp<int64_t>(g.W - w0, lo, g.W_out);
            for (int64_t ow = lo; ow < hi; ++ow) out[ow + w0] += in[ow];
            continue;
          }
          for (int64_t ow = 0; ow < g.W_out; ++ow) {
            const int64_t w = ow * g.stride_w + w0;
            if (w >= 0 && w < g.W) out[w] += in[ow];
          }
        }
      }
}

}  // namespace minidl::kernels::cpu
