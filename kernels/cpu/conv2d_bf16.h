// kernels/cpu/conv2d_bf16.h — 2-d convolution of bfloat16 operands into float32 results: the
// convolution autocast(BFloat16) runs on the CPU where conv2d_bf16_pays. Two kernels:
//   - the implicit GEMM on AMX tiles (conv2d_bf16_implicit.cpp), for stride 1: each tap a product
//     of a weight slice and the zero-padded, flattened input read at the tap's offset, no im2col
//     copy; the input gradient the same kernel with flipped, transposed weights; the weight
//     gradient tap by tap over the images' positions;
//   - im2col + the bfloat16 GEMM (kernels/cpu/gemm_bf16.h; conv2d_bf16.cpp), for the rest:
//       forward, per image n:  y[n] (O, L) = w (O, K) · col(x[n]) (K, L) + b
//       backward:              dcol = w^T · dy[n], then col2im -> dx[n]
//                              dw += dy[n] · col(x[n])^T
//     with K = C kH kW and L = H_out W_out; col is im2col's (kernels/cpu/im2col.h) on the bf16
//     bits (a 1x1 stride-1 unpadded convolution reads x[n] in place).
// Both sum in float32 and sum the weight gradient in conv2d's fixed blocks of images (depending on
// N alone), added in order; images run in parallel; so nothing depends on the thread count. Only
// the order of the sums differs from the reference, the float32 im2col path on the widened
// operands (conv2d_forward_reference / conv2d_backward_reference in conv2d.h): the same bits on
// small integers, float32 rounding apart otherwise (tests/kernels/test_cpu_conv_bf16.cpp).
#pragma once
#include <cstdint>

#include "minidl/kernels/cpu/conv2d.h"

namespace minidl::kernels::cpu {

// Whether a convolution of this shape runs here on bf16 operands: where gemm_bf16 runs on AMX
// (about 5x the float32 GEMM, `bench_gemm bf16`), with one group, except the direct kernel's shapes
// (3x3 stride 1 with fewer than 8 input channels, conv2d_uses_direct). `bench_gemm bf16` at batch
// 128, one thread, against the float32 kernels as run: the reference CNN's 32 -> 64 3x3 layer
// (implicit against Winograd) 2.7x forward and 2.4x backward, ResNet-20's 64 -> 64 8x8 ones 1.3x
// and 1.2x, stride-2 3x3 1.3-1.5x, 1x1 1.2-2.7x; the reference CNN's one-channel first layer 0.8x
// and 0.35x (so it stays float32). Grouped and depthwise convolutions, and every CPU without AMX
// (whose AVX512_BF16 GEMM does not beat float32 Winograd, on some CPUs not even float32 GEMM), keep
// the float32 kernels on widened operands.
bool conv2d_bf16_pays(const Conv2dShape& s);

// x (N, C, H, W) and w (O, C, kH, kW) bf16, b (O) float32 or null -> y (N, O, H_out, W_out) float32,
// by the implicit kernel where it applies, else im2col + GEMM. False, y untouched, where gemm_bf16
// does not run or with groups.
bool conv2d_bf16_forward(const uint16_t* x, const uint16_t* w, const float* b, const Conv2dShape& s, float* y);

// dy (N, O, H_out, W_out) bf16 -> dx (N, C, H, W) float32 (null: not wanted) and dw (O, C, kH, kW)
// float32, likewise (the bias gradient: conv2d_bf16_bias_grad); round_dx: dx rounded to bfloat16
// precision as it is stored (autocast's input gradient), the same bits as a rounding pass after.
// False, nothing written, where gemm_bf16 does not run or with groups.
bool conv2d_bf16_backward(const uint16_t* x, const uint16_t* w, const uint16_t* dy, const Conv2dShape& s, float* dx,
                          float* dw, bool round_dx = false);

// dy (N, O, H_out, W_out) bf16 -> db (O) float32: conv2d_bias_grad's sums (double, the same order)
// of the widened values, read in place (no float32 copy of dy).
void conv2d_bf16_bias_grad(const uint16_t* dy, const Conv2dShape& s, float* db);

// The im2col + GEMM kernel (conv2d_bf16.cpp; any shape with one group), which they run where the
// implicit one does not apply. The same arguments and results; false, nothing written, without a
// bfloat16 GEMM or with groups.
bool conv2d_bf16_im2col_forward(const uint16_t* x, const uint16_t* w, const float* b, const Conv2dShape& s, float* y);
bool conv2d_bf16_im2col_backward(const uint16_t* x, const uint16_t* w, const uint16_t* dy, const Conv2dShape& s,
                                 float* dx, float* dw, bool round_dx = false);

// The implicit-GEMM kernel on AMX tiles (conv2d_bf16_implicit.cpp), which conv2d_bf16_forward /
// _backward run where it applies: stride 1, one group, a kernel larger than 1x1 (a 1x1 one reads
// x in place on the im2col path, faster), 8 or more input channels (its tiles take 32 channels),
// padding at most the dilated kernel's reach (dil (k - 1), so the input gradient is a convolution
// too), and AMX. The same arguments and results as above; false, nothing written, where it does
// not apply.
bool conv2d_bf16_implicit_applies(const Conv2dShape& s);
bool conv2d_bf16_implicit_forward(const uint16_t* x, const uint16_t* w, const float* b, const Conv2dShape& s, float* y);
bool conv2d_bf16_implicit_backward(const uint16_t* x, const uint16_t* w, const uint16_t* dy, const Conv2dShape& s,
                                   float* dx, float* dw, bool round_dx = false);

}  // namespace minidl::kernels::cpu
