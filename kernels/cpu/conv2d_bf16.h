// kernels/cpu/conv2d_bf16.h — 2-d convolution of bfloat16 operands into float32 results, as im2col
// + the bfloat16 GEMM (kernels/cpu/gemm_bf16.h): the convolution autocast(BFloat16) runs on the
// CPU where conv2d_bf16_pays.
//   forward, per image n:  y[n] (O, L) = w (O, K) · col(x[n]) (K, L) + b          float32 sums
//   backward:              dcol = w^T · dy[n], then col2im -> dx[n]               float32
//                          dw += dy[n] · col(x[n])^T, in blocks of images fixed by N alone
// with K = C kH kW and L = H_out W_out; col is im2col's (kernels/cpu/im2col.h) on the bf16 bits
// (a 1x1 stride-1 unpadded convolution reads x[n] in place). Only the GEMM's sums differ from the
// reference, the float32 im2col path on the widened operands (conv2d_forward_reference /
// conv2d_backward_reference in conv2d.h): the same bits on small integers, float32 rounding apart
// otherwise (tests/kernels/test_cpu_conv_bf16.cpp). Images run in parallel; the weight gradient's
// blocks are added in order, so nothing depends on the thread count.
#pragma once
#include <cstdint>

#include "minidl/kernels/cpu/conv2d.h"

namespace minidl::kernels::cpu {

// Whether a convolution of this shape runs here on bf16 operands: where gemm_bf16 runs on AMX
// (about 5x the float32 GEMM, `bench_gemm bf16`), for the shapes whose float32 path is im2col +
// GEMM or the 1x1 GEMMs: one group, and neither Winograd's nor the direct kernel's
// (conv2d_uses_winograd / conv2d_uses_direct). Measured by `bench_gemm bf16` at batch 128: a
// stride-2 3x3 1.35-1.64x the float32 kernels, a 1x1 128->128 2.3-2.8x; but Winograd's 3x3
// stride-1 layers 0.4-0.8x, since for K = 9 C and 8x8 to 14x14 images im2col's short row copies,
// the operand packing and the float32 C cost more than AMX saves over Winograd's 2.25-4x fewer
// multiplies. Grouped and depthwise convolutions, and every shape where the AVX512_BF16 kernel is
// all there is (on some CPUs slower than float32), keep the float32 kernels on widened operands.
bool conv2d_bf16_pays(const Conv2dShape& s);

// x (N, C, H, W) and w (O, C, kH, kW) bf16, b (O) float32 or null -> y (N, O, H_out, W_out) float32.
// False, y untouched, where gemm_bf16 does not run.
bool conv2d_bf16_forward(const uint16_t* x, const uint16_t* w, const float* b, const Conv2dShape& s, float* y);

// dy (N, O, H_out, W_out) bf16 -> dx (N, C, H, W) float32 (null: not wanted) and dw (O, C, kH, kW)
// float32. The bias gradient is conv2d_bias_grad's on the float32 dy. False, nothing written, where
// gemm_bf16 does not run.
bool conv2d_bf16_backward(const uint16_t* x, const uint16_t* w, const uint16_t* dy, const Conv2dShape& s, float* dx,
                          float* dw);

}  // namespace minidl::kernels::cpu
