// kernels/cpu/conv_transpose2d.h — 2-d transposed convolution forward and backward on raw
// pointers (torch.nn.functional.conv_transpose2d). A transposed convolution is the adjoint of a
// convolution's input, so the shape s passed here is that of the convolution whose input is y
// and whose output is x (same weight, stride, padding, dilation, groups):
//   x (N, s.O, s.H_out, s.W_out), w (s.O, s.C / G, kH, kW), b (s.C) -> y (N, s.C, s.H, s.W)
// and the reference (any shape) is built from conv2d's pieces (kernels/cpu/conv2d.h):
//   forward   y  = conv2d's input gradient with x as the output gradient (GEMM + col2im) + b
//   backward  dx = conv2d forward of dy;  dw = conv2d's weight gradient with input dy and output
//             gradient x;  db = sum of dy over (N, H, W) (conv2d_bias_grad over y's shape)
// The fast path, chosen by conv_transpose2d_uses_nonoverlapping: kernel == stride, no padding,
// dilation or output_padding, one group (U-Net's 2x2 stride-2 upsampling). Each input pixel then
// owns its own kH x kW block of y, so with K = C_out kH kW and L = H_in W_in, per image
//   forward   cols (K, L) = w^T (K, C_in) · x (C_in, L), then cols scattered into y (each element
//             written once, the bias added on the way: no col2im accumulation, no zero fill, no
//             separate bias pass)
//   backward  dcols (K, L) = dy gathered the same way (one gather for both products), then
//             dx (C_in, L) = w (C_in, K) · dcols;  dw (C_in, K) += x (C_in, L) · dcols^T
// Cost: 2 C_in K L flops per product per image, plus one pass over y (forward) or dy (backward).
// The GEMMs are conv_gemm<true>'s (the packed AVX-512 kernel for float when every side is at
// least 16). The weight gradient is summed in conv2d's fixed blocks of images (fixed by N), so
// the result does not depend on the thread count. (The general reference runs the same products
// through col2im's zero fill and += and gemm()'s small-product loop; a scatter straight out of
// the GEMM's registers would save the cols buffer but needs a GEMM of its own.) Tested against
// the reference by tests/kernels/test_cpu_conv.cpp (ConvTranspose*).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "minidl/kernels/cpu/conv2d.h"

namespace minidl::kernels::cpu {

// Whether a transposed convolution of this shape (the convolution y -> x, as above) runs as
// conv_transpose2d_forward_nonoverlapping / _backward_nonoverlapping: kernel == stride on both
// axes, no padding, no dilation, one group, y exactly kH H_in x kW W_in (no output_padding).
inline bool conv_transpose2d_uses_nonoverlapping(const Conv2dShape& s) {
  return s.kH == s.stride_h && s.kW == s.stride_w && s.pad_h == 0 && s.pad_w == 0 && s.dil_h == 1 && s.dil_w == 1 &&
         s.groups == 1 && s.H_out > 0 && s.W_out > 0 && s.H == s.kH * s.H_out && s.W == s.kW * s.W_out;
}

// The shape conv2d_bias_grad reads for the sum of dy (N, s.C, s.H, s.W) over (N, H, W)
inline Conv2dShape conv_transpose2d_bias_shape(const Conv2dShape& s) {
  Conv2dShape t = s;
  t.O = s.C, t.H_out = s.H, t.W_out = s.W;
  return t;
}

// out[v kW + j] = in[j ld + v] + bias for v < W_in, j < kW: the kW rows at in (ld apart)
// interleaved into one row of y. kFixedW > 0: kW known at compile time (U-Net's 2), so the
// compiler vectorises the loop with shuffles; 0: kW at run time (a scalar loop).
template <int64_t kFixedW, class T>
void interleave_rows(const T* in, int64_t ld, int64_t W_in, int64_t kW, T bias, T* out) {
  const int64_t k = kFixedW > 0 ? kFixedW : kW;
  for (int64_t v = 0; v < W_in; ++v)
    for (int64_t j = 0; j < k; ++j) out[v * k + j] = in[j * ld + v] + bias;
}
// Its adjoint without the bias: out[j ld + v] = in[v kW + j], one row of dy split into kW rows
template <int64_t kFixedW, class T> void deinterleave_row(const T* in, int64_t W_in, int64_t kW, int64_t ld, T* out) {
  const int64_t k = kFixedW > 0 ? kFixedW : kW;
  for (int64_t v = 0; v < W_in; ++v)
    for (int64_t j = 0; j < k; ++j) out[j * ld + v] = in[v * k + j];
}

// x (N, C_in, H_in, W_in), w (C_in, C_out / G, kH, kW), b (C_out) or null -> y (N, C_out, H, W),
// any shape: the reference (conv2d_backward_reference's input gradient, then the bias)
template <class T>
void conv_transpose2d_forward_reference(const T* x, const T* w, const T* b, const Conv2dShape& s, T* y) {
  conv2d_backward_reference(static_cast<const T*>(nullptr), w, x, s, y, static_cast<T*>(nullptr),
                            static_cast<T*>(nullptr));
  if (b) add_conv_bias(b, 0, s.N, s.C, s.H * s.W, y);
}

// The same where conv_transpose2d_uses_nonoverlapping: one GEMM per image, then the scatter
template <class T>
void conv_transpose2d_forward_nonoverlapping(const T* x, const T* w, const T* b, const Conv2dShape& s, T* y) {
  const int64_t C_in = s.O, C_out = s.C, kH = s.kH, kW = s.kW, H_in = s.H_out, W_in = s.W_out;
  const int64_t K = C_out * kH * kW, L = H_in * W_in;
  parallel_for(s.N, conv_grain(C_in * K * L), [&](int64_t n0, int64_t n1) {
    std::vector<T> cols(static_cast<size_t>(K * L));  // (K, L), rows (c, i, j), columns (h, w)
    for (int64_t n = n0; n < n1; ++n) {
      conv_gemm<true>(K, L, C_in, w, K, true, x + n * C_in * L, L, false, cols.data(), L, T(0));
      for (int64_t c = 0; c < C_out; ++c) {
        const T bias = b ? b[c] : T(0);
        for (int64_t h = 0; h < H_in; ++h)
          for (int64_t i = 0; i < kH; ++i) {  // y row h kH + i takes row (c, i, j) of cols at kW w + j
            T* out = y + ((n * C_out + c) * s.H + h * kH + i) * s.W;
            const T* in = cols.data() + (c * kH + i) * kW * L + h * W_in;
            if (kW == 2)
              interleave_rows<2>(in, L, W_in, kW, bias, out);
            else
              interleave_rows<0>(in, L, W_in, kW, bias, out);
          }
      }
    }
  });
}

// x (N, C_in, H_in, W_in), w (C_in, C_out / G, kH, kW), dy (N, C_out, H, W) -> dx (as x; null: not
// wanted), dw (as w) and db (C_out; null: no bias), any shape: the reference
template <class T>
void conv_transpose2d_backward_reference(const T* x, const T* w, const T* dy, const Conv2dShape& s, T* dx, T* dw,
                                         T* db) {
  if (dx) conv2d_forward_reference(dy, w, static_cast<const T*>(nullptr), s, dx);
  conv2d_backward_reference(dy, w, x, s, static_cast<T*>(nullptr), dw, static_cast<T*>(nullptr));
  if (db) conv2d_bias_grad(dy, conv_transpose2d_bias_shape(s), db);
}

// The same where conv_transpose2d_uses_nonoverlapping: per image the gather, then the two GEMMs.
// dy's images lie dy_image_stride elements apart, each (C_out, H, W) contiguous: a slice of the
// channels of a larger gradient (torch.cat's backward in a U-Net) is read in place, not copied.
template <class T>
void conv_transpose2d_backward_nonoverlapping(const T* x, const T* w, const T* dy, int64_t dy_image_stride,
                                              const Conv2dShape& s, T* dx, T* dw, T* db) {
  const int64_t C_in = s.O, C_out = s.C, kH = s.kH, kW = s.kW, H_in = s.H_out, W_in = s.W_out;
  const int64_t K = C_out * kH * kW, L = H_in * W_in, w_numel = C_in * K;
  const int64_t per_block = std::max<int64_t>(1, (s.N + 15) / 16);  // conv2d's blocks
  const int64_t blocks = (s.N + per_block - 1) / per_block;
  std::vector<T> partial(static_cast<size_t>(blocks * w_numel), T(0));
  parallel_for(blocks, conv_grain(2 * per_block * C_in * K * L), [&](int64_t k0, int64_t k1) {
    std::vector<T> dcols(static_cast<size_t>(K * L));  // (K, L), rows (c, i, j), columns (h, w)
    for (int64_t k = k0; k < k1; ++k)
      for (int64_t n = k * per_block; n < std::min(s.N, (k + 1) * per_block); ++n) {
        for (int64_t c = 0; c < C_out; ++c)
          for (int64_t h = 0; h < H_in; ++h)
            for (int64_t i = 0; i < kH; ++i) {  // the forward's scatter, reversed
              const T* in = dy + n * dy_image_stride + (c * s.H + h * kH + i) * s.W;
              T* out = dcols.data() + (c * kH + i) * kW * L + h * W_in;
              if (kW == 2)
                deinterleave_row<2>(in, W_in, kW, L, out);
              else
                deinterleave_row<0>(in, W_in, kW, L, out);
            }
        const T* x_n = x + n * C_in * L;
        conv_gemm<true>(C_in, K, L, x_n, L, false, dcols.data(), L, true, partial.data() + k * w_numel, K, T(1));
        if (dx) conv_gemm<true>(C_in, L, K, w, K, false, dcols.data(), L, false, dx + n * C_in * L, L, T(0));
      }
  });
  sum_blocks_in_order(partial.data(), blocks, w_numel, dw);
  if (db) conv2d_bias_grad(dy, conv_transpose2d_bias_shape(s), db, dy_image_stride);
}

// The dispatching entry points: the fast path where conv_transpose2d_uses_nonoverlapping; otherwise
// the reference's forward (col2im), and the backward on conv2d's own fast paths
template <class T> void conv_transpose2d_forward(const T* x, const T* w, const T* b, const Conv2dShape& s, T* y) {
  if (conv_transpose2d_uses_nonoverlapping(s)) return conv_transpose2d_forward_nonoverlapping(x, w, b, s, y);
  conv_transpose2d_forward_reference(x, w, b, s, y);
}
// (dy_image_stride as above: the fast path reads dy in place, the others take a contiguous copy)
template <class T>
void conv_transpose2d_backward(const T* x, const T* w, const T* dy, int64_t dy_image_stride, const Conv2dShape& s,
                               T* dx, T* dw, T* db) {
  if (conv_transpose2d_uses_nonoverlapping(s))
    return conv_transpose2d_backward_nonoverlapping(x, w, dy, dy_image_stride, s, dx, dw, db);
  const int64_t image = s.C * s.H * s.W;
  if (dy_image_stride != image) {
    std::vector<T> packed(static_cast<size_t>(s.N * image));
    for (int64_t n = 0; n < s.N; ++n)
      std::copy(dy + n * dy_image_stride, dy + n * dy_image_stride + image, packed.data() + n * image);
    return conv_transpose2d_backward(x, w, packed.data(), image, s, dx, dw, db);
  }
  if (dx) conv2d_forward(dy, w, static_cast<const T*>(nullptr), s, dx);
  conv2d_backward(dy, w, x, s, static_cast<T*>(nullptr), dw, static_cast<T*>(nullptr));
  if (db) conv2d_bias_grad(dy, conv_transpose2d_bias_shape(s), db);
}

}  // namespace minidl::kernels::cpu
