// kernels/cpu/conv2d_direct.h — the weight gradient of a 3x3, stride-1 float convolution with few
// input channels (the reference CNN's first layer: 1 input channel), where im2col + GEMM has
// N = 9 * C columns, far too few for the GEMM to pay for its packing:
//   dw[o, c, kh, kw] = sum over n, oh, ow of dy[n, o, oh, ow] * xp[n, c, oh + kh, ow + kw]
//   db[o]            = sum over n, oh, ow of dy[n, o, oh, ow]     (from the same loads of dy)
// (xp: x zero-padded by pad_h, pad_w). Each image is zero-padded once into a plane whose rows are
// whole 16-float vectors; each weight sums 16 lanes over fixed blocks of images (at most 16, fixed
// by N), then the lanes in order, then the blocks in order: the same bits whatever the thread count.
// The bias sums each image's plane in 16 float lanes, added into per-block lanes in double.
// (The forward pass stays im2col + GEMM: with one input channel it is bound by writing y.) Tested
// against im2col + GEMM by tests/kernels/test_cpu_conv.cpp.
#pragma once
#include <cstdint>

namespace minidl::kernels::cpu {

// x (N, C, H, W), dy (N, O, H + 2 pad_h - 2, W + 2 pad_w - 2) -> dw (O, C, 3, 3) and, when not
// null, db (O), both overwritten
void conv3x3_direct_weight_grad(const float* x, const float* dy, int64_t N, int64_t C, int64_t H, int64_t W,
                                int64_t O, int64_t pad_h, int64_t pad_w, float* dw, float* db);

}  // namespace minidl::kernels::cpu
