// kernels/cpu/conv2d_depthwise.h — depthwise float convolution (groups == C, O = k * C: output
// channel o reads input channel o / k only), any kernel size, stride and padding, dilation 1:
//   y[n, o, oh, ow] = b[o] + sum over kh, kw of w[o, kh, kw] * xp[n, o / k, s_h oh + kh, s_w ow + kw]
// (xp: x zero-padded). im2col + GEMM runs this as one GEMM per image and channel with a single
// output row, kH * kW deep: packing and call overhead for ~2 flops per element of col (~1 GFLOP/s).
// Here each plane is split once into s_h * s_w phase planes, P[a, b][i, j] = xp[s_h i + a, s_w j + b],
// which turns any stride into stride 1: tap (kh, kw) reads phase (kh % s_h, kw % s_w) at
// (oh + kh / s_h, ow + kw / s_w). Phase planes and outputs are flattened over rows of one common
// width Wq = W_out + (kW - 1) / s_w, so a tap is one fixed offset into a flat array and 16 outputs
// (across row ends: the Wq - W_out extra columns are computed and dropped) are one 16-lane
// vector: kH * kW loads and FMAs per 16 outputs, whatever W_out (4 or 32) is. (Vectors along each
// output row, the simpler layout, would leave 12 of 16 lanes idle on a 4-wide plane.)
//   input gradient: per phase, dP[a, b][i, j] = sum over taps (kh, kw) of that phase and the k
//     output channels of w[o, kh, kw] * dy[n, o, i - kh / s_h, j - kw / s_w] (a gather over dy
//     laid out with width Wq, zero outside), then dx = the phases put back in place (the
//     adjoint of the split);
//   weight gradient: dw[o, kh, kw] = sum over n, flat j of dy[n, o, j] * P[tap](j + its offset),
//     in 16 lanes per tap over the images of fixed blocks (at most 16, fixed by N), then the
//     lanes (horizontal_sum's fixed tree) and the blocks in order: the same bits whatever the
//     thread count. The bias gradient is conv2d_bias_grad's.
// Cost: 2 kH kW flops per output against one read of x and one write of y (dx: reads of dy and
// x, one write), so with 3x3 kernels the passes are bound by memory bandwidth, not the FMAs.
// Work runs in parallel over (image, channel) planes (forward) and (block of images, channel)
// (backward). Tested against im2col + GEMM (conv2d_forward_reference / conv2d_backward_reference)
// by tests/kernels/test_cpu_conv.cpp.
#pragma once
#include <cstdint>

namespace minidl::kernels::cpu {

struct Conv2dShape;  // kernels/cpu/conv2d.h

// x (N, C, H, W), w (O, 1, kH, kW), b (O) or null -> y (N, O, H_out, W_out)
void conv2d_depthwise_forward(const float* x, const float* w, const float* b, const Conv2dShape& s, float* y);

// dy (N, O, H_out, W_out) -> dx (N, C, H, W), dw (O, 1, kH, kW), db (O), each skipped when null,
// else overwritten
void conv2d_depthwise_backward(const float* x, const float* w, const float* dy, const Conv2dShape& s, float* dx,
                               float* dw, float* db);

}  // namespace minidl::kernels::cpu
