// kernels/cpu/conv2d.h — 2-d convolution forward and backward as im2col + GEMM, on raw pointers.
//   forward, per image n and group g:  y[n, g] (O/G, L) = w[g] (O/G, K) · col(x[n, g]) (K, L) + b
//   backward: dcol = w[g]^T · dy[n, g] then col2im -> dx;  dw[g] += dy[n, g] · col(x[n, g])^T;
//             db[o] = sum over n, l of dy[n, o, l]
// with K = (C/G)*kH*kW and L = H_out*W_out. Images run in parallel; the weight gradient is
// summed in blocks of images fixed by N alone (at most 16 blocks, added in block order), so the
// result does not depend on the thread count. GEMM is kernels/cpu/gemm.h.
// Faster paths for some shapes, each chosen by a predicate on the shape (never by model):
//   - float 3x3 stride-1 convolutions with 8 or more channels: forward and backward as Winograd
//     F(4x4, 3x3) and, for the weight gradient, F(2x2, 3x3) (kernels/cpu/conv2d_winograd.h;
//     conv2d_uses_winograd);
//   - float 3x3 stride-1 ones with fewer input channels: the weight gradient by a direct kernel
//     (kernels/cpu/conv2d_direct.h; conv2d_uses_direct);
//   - float depthwise ones (groups == C, O a multiple of C, any kernel, stride and padding, no
//     dilation): forward and backward by a kernel over phase planes (kernels/cpu/
//     conv2d_depthwise.h; conv2d_uses_depthwise), where im2col + GEMM would run one GEMM with a
//     single output row per channel;
//   - 1x1 stride-1 unpadded ones (not depthwise; float and double): the same GEMMs on x and dx in
//     place, without the im2col copy and col2im (conv2d_forward_1x1 / conv2d_backward_1x1;
//     conv2d_uses_1x1; the same bits as the reference, but for the weight gradient of images
//     smaller than 256 pixels, summed over several images per GEMM).
// Other shapes (strided, dilated, grouped, larger kernels) run im2col + GEMM as the reference
// does, but with float products whose sides are all at least 16 on the packed AVX-512 GEMM
// whatever their size (conv2d_forward_im2col<true> / conv2d_backward_im2col<true>; conv_gemm):
// gemm() gives products under 4 MFLOP, like a stride-2 3x3's per-image ones, to a loop built for
// K = 9. The *_reference functions (im2col + gemm()) are the reference all paths are tested
// against (tests/kernels/test_cpu_conv.cpp). Tested through tensor/ops_conv.cpp by
// tests/tensor/test_ops_conv.cpp (naive direct convolution, float64 finite differences with
// stride, padding, dilation and groups).
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <vector>

#include "minidl/kernels/cpu/conv2d_depthwise.h"
#include "minidl/kernels/cpu/conv2d_direct.h"
#include "minidl/kernels/cpu/conv2d_winograd.h"
#include "minidl/kernels/cpu/gemm.h"
#include "minidl/kernels/cpu/im2col.h"
#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/cpu/reduce.h"

namespace minidl::kernels::cpu {

// Items per parallel chunk so that a chunk holds at least ~64K multiply-adds (tiny problems stay
// on one thread). Chunking changes which thread runs what, never the arithmetic.
inline int64_t conv_grain(int64_t work_per_item) {
  return std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(work_per_item, 1));
}

struct Conv2dShape {
  int64_t N, C, H, W;  // x (N, C, H, W)
  int64_t O, kH, kW;  // w (O, C/groups, kH, kW)
  int64_t groups;
  int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  int64_t H_out, W_out;  // y (N, O, H_out, W_out)

  ConvGeometry group_geometry() const {
    return {C / groups, H, W, kH, kW, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, H_out, W_out};
  }
};

// Whether a float convolution of this shape runs as Winograd (kernels/cpu/conv2d_winograd.h):
// 3x3, stride 1, no dilation, one group, the same padding (at most 2) on both axes, and at least 8
// channels on each side (with fewer, the transforms cost more than the GEMMs save).
inline bool conv2d_uses_winograd(const Conv2dShape& s) {
  return s.kH == 3 && s.kW == 3 && s.stride_h == 1 && s.stride_w == 1 && s.dil_h == 1 && s.dil_w == 1 &&
         s.groups == 1 && s.pad_h == s.pad_w && s.pad_h <= 2 && s.C >= 8 && s.O >= 8 && s.H_out > 0 && s.W_out > 0;
}

// Whether a float convolution of this shape computes its weight and bias gradients with the direct
// kernel (kernels/cpu/conv2d_direct.h; the reference CNN's first layer): 3x3, stride 1, no
// dilation, one group, fewer than 8 input channels (any padding).
inline bool conv2d_uses_direct(const Conv2dShape& s) {
  return s.kH == 3 && s.kW == 3 && s.stride_h == 1 && s.stride_w == 1 && s.dil_h == 1 && s.dil_w == 1 &&
         s.groups == 1 && s.C < 8 && s.H_out > 0 && s.W_out > 0;
}

// Whether a float convolution of this shape runs as the depthwise kernel (kernels/cpu/
// conv2d_depthwise.h): one input channel per group (groups == C > 1), O a multiple of C, no
// dilation; any kernel size, stride and padding.
inline bool conv2d_uses_depthwise(const Conv2dShape& s) {
  return s.groups == s.C && s.C > 1 && s.O % s.C == 0 && s.dil_h == 1 && s.dil_w == 1 && s.H_out > 0 && s.W_out > 0;
}

// Whether a convolution of this shape runs as conv2d_forward_1x1 / conv2d_backward_1x1: a 1x1
// kernel, stride 1, no padding (im2col would copy x unchanged), any groups but the depthwise ones.
inline bool conv2d_uses_1x1(const Conv2dShape& s) {
  return s.kH == 1 && s.kW == 1 && s.stride_h == 1 && s.stride_w == 1 && s.pad_h == 0 && s.pad_w == 0 &&
         !conv2d_uses_depthwise(s) && s.H_out > 0 && s.W_out > 0;
}

// y[n, o, l] += b[o] for the images n0 .. n1 - 1 of y (N, O, L)
template <class T> void add_conv_bias(const T* b, int64_t n0, int64_t n1, int64_t O, int64_t L, T* y) {
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t o = 0; o < O; ++o) {
      T* plane = y + (n * O + o) * L;
      for (int64_t l = 0; l < L; ++l) plane[l] += b[o];
    }
}

// The GEMMs of the im2col path. kPacked (float, every side at least 16): the packed AVX-512
// kernel whatever the size, where gemm() sends products under 4 MFLOP to its small-product loop,
// built for K = 9 and attention heads: on a stride-2 3x3 convolution's per-image products (e.g.
// 32 x 256 x 144) the packed kernel runs 1.6-4x faster. Otherwise (the reference) gemm().
template <bool kPacked, class T>
void conv_gemm(int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, bool trans_a, const T* B, int64_t ldb,
               bool trans_b, T* C, int64_t ldc, T beta) {
  if constexpr (kPacked && std::is_same_v<T, float>) {
    if (std::min({M, N, K}) >= 16 && gemm_avx512(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, 1.0f, beta)) return;
  }
  gemm(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, T(1), beta);
}

// x (N, C, H, W), w (O, C/G, kH, kW), b (O) or null -> y (N, O, H_out, W_out), as im2col + GEMM
// (any shape): conv2d_forward_im2col<false> is conv2d_forward_reference, the reference of every
// other path; <true> the general path as run (conv_gemm's packed GEMMs)
template <bool kPacked, class T>
void conv2d_forward_im2col(const T* x, const T* w, const T* b, const Conv2dShape& s, T* y) {
  const ConvGeometry geo = s.group_geometry();
  const int64_t Cg = s.C / s.groups, Og = s.O / s.groups;
  const int64_t K = Cg * s.kH * s.kW, L = s.H_out * s.W_out;
  parallel_for(s.N, conv_grain(s.O * K * L), [&](int64_t n0, int64_t n1) {
    std::vector<T> col(static_cast<size_t>(K * L));  // (K, L), one buffer per chunk of images
    for (int64_t n = n0; n < n1; ++n) {
      for (int64_t g = 0; g < s.groups; ++g) {
        im2col(x + (n * s.C + g * Cg) * s.H * s.W, geo, col.data());
        conv_gemm<kPacked>(Og, L, K, w + g * Og * K, K, false, col.data(), L, false, y + (n * s.O + g * Og) * L, L,
                           T(0));
      }
      if (b) add_conv_bias(b, n, n + 1, s.O, L, y);
    }
  });
}
template <class T> void conv2d_forward_reference(const T* x, const T* w, const T* b, const Conv2dShape& s, T* y) {
  conv2d_forward_im2col<false>(x, w, b, s, y);
}

// The same where conv2d_uses_1x1: per image and group, y[n, g] (O/G, L) = w[g] (O/G, C/G) · x[n, g]
// (C/G, L), x read in place (the reference's GEMM on the reference's operands: the same bits)
template <class T> void conv2d_forward_1x1(const T* x, const T* w, const T* b, const Conv2dShape& s, T* y) {
  const int64_t Cg = s.C / s.groups, Og = s.O / s.groups, L = s.H * s.W;
  parallel_for(s.N, conv_grain(s.O * Cg * L), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t g = 0; g < s.groups; ++g)
        gemm(Og, L, Cg, w + g * Og * Cg, Cg, false, x + (n * s.C + g * Cg) * L, L, false, y + (n * s.O + g * Og) * L, L,
             T(1), T(0));
    if (b) add_conv_bias(b, n0, n1, s.O, L, y);
  });
}

// x (N, C, H, W), w (O, C/G, kH, kW), b (O) or null -> y (N, O, H_out, W_out)
template <class T> void conv2d_forward(const T* x, const T* w, const T* b, const Conv2dShape& s, T* y) {
  if constexpr (std::is_same_v<T, float>) {
    if (conv2d_uses_winograd(s)) return conv3x3_winograd(x, w, b, s.N, s.C, s.H, s.W, s.O, s.pad_h, false, y);
    if (conv2d_uses_depthwise(s)) return conv2d_depthwise_forward(x, w, b, s, y);
  }
  if (conv2d_uses_1x1(s)) return conv2d_forward_1x1(x, w, b, s, y);
  conv2d_forward_im2col<true>(x, w, b, s, y);
}

// dy (N, O, H_out, W_out) -> db (O): db[o] = sum over n, l of dy[n, o, l], in double, in a fixed
// order; image_stride: the elements between dy's images (O L when dy is contiguous; more when dy is
// a slice of a larger tensor's channels); widen: a stored dy value as a number (bfloat16 dy, stored
// as its bits: conv2d_bf16_bias_grad)
template <class T, class S = T, class Widen = std::identity>
void conv2d_bias_grad(const S* dy, const Conv2dShape& s, T* db, int64_t image_stride, Widen widen = {}) {
  const int64_t L = s.H_out * s.W_out;
  parallel_for(s.O, conv_grain(s.N * L), [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      double acc[8] = {};  // 8 interleaved partial sums (one vector), added in order at the end
      for (int64_t n = 0; n < s.N; ++n) {
        const S* plane = dy + n * image_stride + o * L;
        int64_t l = 0;
        for (; l + 8 <= L; l += 8)
          for (int j = 0; j < 8; ++j) acc[j] += static_cast<double>(widen(plane[l + j]));
        for (int j = 0; l + j < L; ++j) acc[j] += static_cast<double>(widen(plane[l + j]));
      }
      double sum = 0;
      for (double a : acc) sum += a;
      db[o] = static_cast<T>(sum);
    }
  });
}
template <class T> void conv2d_bias_grad(const T* dy, const Conv2dShape& s, T* db) {
  conv2d_bias_grad(dy, s, db, s.O * s.H_out * s.W_out);
}

// dy (N, O, H_out, W_out) -> dx (N, C, H, W), dw (O, C/G, kH, kW), db (O) (db may be null: no
// bias; dx may be null: no input gradient wanted; dw may be null: computed elsewhere), as im2col +
// GEMM (any shape): <false> is conv2d_backward_reference, <true> the general path as run
template <bool kPacked, class T>
void conv2d_backward_im2col(const T* x, const T* w, const T* dy, const Conv2dShape& s, T* dx, T* dw, T* db) {
  const ConvGeometry geo = s.group_geometry();
  const int64_t Cg = s.C / s.groups, Og = s.O / s.groups;
  const int64_t K = Cg * s.kH * s.kW, L = s.H_out * s.W_out;
  const int64_t w_numel = s.O * K;
  // Fixed blocks of images (depend on N only): block k sums its images' dw into partial[k].
  const int64_t per_block = std::max<int64_t>(1, (s.N + 15) / 16);
  const int64_t blocks = (s.N + per_block - 1) / per_block;
  std::vector<T> partial(static_cast<size_t>(dw ? std::max<int64_t>(blocks, 1) * w_numel : 0), T(0));
  parallel_for(blocks, conv_grain(2 * per_block * s.O * K * L), [&](int64_t k0, int64_t k1) {
    std::vector<T> col(static_cast<size_t>(dw ? K * L : 0)), dcol(static_cast<size_t>(dx ? K * L : 0));  // (K, L)
    for (int64_t k = k0; k < k1; ++k) {
      T* dw_k = dw ? partial.data() + k * w_numel : nullptr;
      for (int64_t n = k * per_block; n < std::min(s.N, (k + 1) * per_block); ++n) {
        if (dx) std::fill(dx + n * s.C * s.H * s.W, dx + (n + 1) * s.C * s.H * s.W, T(0));
        for (int64_t g = 0; g < s.groups; ++g) {
          const T* dy_ng = dy + (n * s.O + g * Og) * L;  // (Og, L)
          const int64_t x_off = (n * s.C + g * Cg) * s.H * s.W;
          if (dw) {  // dw[g] (Og, K) += dy[n, g] (Og, L) · col^T (L, K)
            im2col(x + x_off, geo, col.data());
            conv_gemm<kPacked>(Og, K, L, dy_ng, L, false, col.data(), L, true, dw_k + g * Og * K, K, T(1));
          }
          if (!dx) continue;
          // dcol (K, L) = w[g]^T (K, Og) · dy[n, g] (Og, L), scattered back into dx
          conv_gemm<kPacked>(K, L, Og, w + g * Og * K, K, true, dy_ng, L, false, dcol.data(), L, T(0));
          col2im(dcol.data(), geo, dx + x_off);
        }
      }
    }
  });
  if (dw) sum_blocks_in_order(partial.data(), blocks, w_numel, dw);
  if (db) conv2d_bias_grad(dy, s, db);
}
template <class T>
void conv2d_backward_reference(const T* x, const T* w, const T* dy, const Conv2dShape& s, T* dx, T* dw, T* db) {
  conv2d_backward_im2col<false>(x, w, dy, s, dx, dw, db);
}

// Images per weight-gradient GEMM of conv2d_backward_1x1: one where an image's L = H W is a long
// enough sum (256, one K block of the packed GEMM); otherwise enough images of a block that their
// L's together are, up to the whole block. Each image's own GEMM of a 4x4 layer sums over 16 values
// only, and reads and writes its (O/G, C/G) block of dw for every 16 multiply-adds per element.
inline int64_t conv1x1_images_per_gemm(int64_t L, int64_t per_block) {
  return L >= 256 ? 1 : std::min(per_block, (255 + L) / L);
}

// The same gradients where conv2d_uses_1x1, x and dx in place of col and dcol, summed in the
// reference's blocks of images:
//   dx[n, g] (C/G, L) = w[g]^T (C/G, O/G) · dy[n, g]     (the reference's GEMM: the same bits)
//   dw[g] += dy[n, g] (O/G, L) · x[n, g]^T (L, C/G)      for L >= 256 (the reference's GEMMs: the same bits)
//   dw[g] += dy[n0:n1, g] (O/G, q L) · x[n0:n1, g]^T     for smaller L, q = conv1x1_images_per_gemm
// images at a time, their rows copied side by side (O/G, q L) and (C/G, q L): one GEMM summing
// over q L in place of q GEMMs over L (the same sum in another order: rounding apart, the same).
template <class T>
void conv2d_backward_1x1(const T* x, const T* w, const T* dy, const Conv2dShape& s, T* dx, T* dw, T* db) {
  const int64_t Cg = s.C / s.groups, Og = s.O / s.groups, L = s.H * s.W, w_numel = s.O * Cg;
  const int64_t per_block = std::max<int64_t>(1, (s.N + 15) / 16);  // the reference's blocks
  const int64_t blocks = (s.N + per_block - 1) / per_block;
  const int64_t q_max = conv1x1_images_per_gemm(L, per_block);
  std::vector<T> partial(static_cast<size_t>(dw ? std::max<int64_t>(blocks, 1) * w_numel : 0), T(0));
  parallel_for(blocks, conv_grain(2 * per_block * s.O * Cg * L), [&](int64_t k0, int64_t k1) {
    std::vector<T> dy_rows(static_cast<size_t>(dw && q_max > 1 ? Og * q_max * L : 0)),
        x_rows(static_cast<size_t>(dw && q_max > 1 ? Cg * q_max * L : 0));
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t n_end = std::min(s.N, (k + 1) * per_block);
      for (int64_t n0 = k * per_block; n0 < n_end; n0 += q_max) {
        const int64_t q = std::min(q_max, n_end - n0);
        for (int64_t g = 0; g < s.groups; ++g) {
          T* dw_kg = dw ? partial.data() + k * w_numel + g * Og * Cg : nullptr;
          if (dw && q_max == 1) {
            const int64_t off_y = (n0 * s.O + g * Og) * L, off_x = (n0 * s.C + g * Cg) * L;
            gemm(Og, Cg, L, dy + off_y, L, false, x + off_x, L, true, dw_kg, Cg, T(1), T(1));
          } else if (dw) {  // rows of q images side by side: dy_rows (Og, q L), x_rows (Cg, q L)
            for (int64_t j = 0; j < q; ++j) {
              const T* dy_n = dy + ((n0 + j) * s.O + g * Og) * L;
              const T* x_n = x + ((n0 + j) * s.C + g * Cg) * L;
              for (int64_t o = 0; o < Og; ++o) std::copy_n(dy_n + o * L, L, dy_rows.data() + (o * q + j) * L);
              for (int64_t c = 0; c < Cg; ++c) std::copy_n(x_n + c * L, L, x_rows.data() + (c * q + j) * L);
            }
            gemm(Og, Cg, q * L, dy_rows.data(), q * L, false, x_rows.data(), q * L, true, dw_kg, Cg, T(1), T(1));
          }
          if (dx)
            for (int64_t n = n0; n < n0 + q; ++n) {
              const T* dy_ng = dy + (n * s.O + g * Og) * L;  // (Og, L)
              gemm(Cg, L, Og, w + g * Og * Cg, Cg, true, dy_ng, L, false, dx + (n * s.C + g * Cg) * L, L, T(1), T(0));
            }
        }
      }
    }
  });
  if (dw) sum_blocks_in_order(partial.data(), blocks, w_numel, dw);
  if (db) conv2d_bias_grad(dy, s, db);
}

// The same gradients, by Winograd where conv2d_uses_winograd (float): the weight and bias gradients
// by conv3x3_winograd_weight_grad, the input gradient as the 3x3 convolution of dy with the flipped,
// transposed weights and padding 2 - pad; all three by the depthwise kernel where
// conv2d_uses_depthwise (float); the weight and bias gradients by the direct kernel where
// conv2d_uses_direct (the input gradient, when wanted, by im2col + GEMM); all three by
// conv2d_backward_1x1 where conv2d_uses_1x1.
template <class T>
void conv2d_backward(const T* x, const T* w, const T* dy, const Conv2dShape& s, T* dx, T* dw, T* db) {
  if constexpr (std::is_same_v<T, float>) {
    if (conv2d_uses_winograd(s)) {
      conv3x3_winograd_weight_grad(x, dy, s.N, s.C, s.H, s.W, s.O, s.pad_h, dw, db);
      if (dx) conv3x3_winograd(dy, w, nullptr, s.N, s.O, s.H_out, s.W_out, s.C, 2 - s.pad_h, true, dx);
      return;
    }
    if (conv2d_uses_depthwise(s)) return conv2d_depthwise_backward(x, w, dy, s, dx, dw, db);
    if (conv2d_uses_direct(s)) {
      conv3x3_direct_weight_grad(x, dy, s.N, s.C, s.H, s.W, s.O, s.pad_h, s.pad_w, dw, db);
      if (dx) conv2d_backward_im2col<true>(x, w, dy, s, dx, static_cast<T*>(nullptr), static_cast<T*>(nullptr));
      return;
    }
  }
  if (conv2d_uses_1x1(s)) return conv2d_backward_1x1(x, w, dy, s, dx, dw, db);
  conv2d_backward_im2col<true>(x, w, dy, s, dx, dw, db);
}

}  // namespace minidl::kernels::cpu
