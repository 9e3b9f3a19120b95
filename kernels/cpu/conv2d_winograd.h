// kernels/cpu/conv2d_winograd.h — 3x3, stride-1 float convolution by Winograd's minimal filtering
// F(2x2, 3x3) (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", 2015,
// https://arxiv.org/abs/1509.09308): each 2x2 block of outputs ("tile") of one channel pair is
//   Y = A^T [ (G g G^T) ⊙ (B^T d B) ] A      (d: the 4x4 input patch, g: the 3x3 kernel)
// so a batch of tiles is 16 GEMMs, one per position ξ of the 4x4 transformed tile:
//   M[ξ] (Co, tiles) = U[ξ] (Co, Ci) · V[ξ] (Ci, tiles)
// with U = the transformed kernels and V = the transformed patches: 16 * Co * Ci multiply-adds per
// tile instead of 36 * Co * Ci (2.25x fewer), plus the cheap transforms. The forward pass and the
// input gradient (a 3x3 convolution of dy with the flipped, transposed kernels) and the weight
// gradient (the same 16 positions, with the transposed transforms) all run here. Images are
// processed in fixed chunks, in parallel; each output element is computed by the same operations
// in the same order whatever the thread count. Tested against im2col + GEMM by tests/kernels/test_cpu_conv.cpp.
#pragma once
#include <cstdint>

namespace minidl::kernels::cpu {

// x (N, Ci, H, W) -> y (N, Co, H + 2 pad - 2, W + 2 pad - 2) (+ b[co] when b is not null), with
// pad in 0..2 and the kernel k taken as
//   flip == false: k stored (Co, Ci, 3, 3), g(co, ci)[kh][kw] = k[co, ci, kh, kw]       (forward)
//   flip == true:  k stored (Ci, Co, 3, 3), g(co, ci)[kh][kw] = k[ci, co, 2 - kh, 2 - kw]
// (flip: dx of a 3x3 stride-1 convolution with padding p is this with x = dy, k = w, pad 2 - p).
// y is overwritten.
void conv3x3_winograd(const float* x, const float* k, const float* b, int64_t N, int64_t Ci, int64_t H, int64_t W,
                      int64_t Co, int64_t pad, bool flip, float* y);

// The weight gradient of the forward case: x (N, Ci, H, W), dy (N, Co, H + 2 pad - 2, W + 2 pad - 2)
// -> dw (Co, Ci, 3, 3), overwritten. Since U = G g G^T and y = A^T M A,
//   dw(co, ci) = G^T [ sum over tiles t of (A e(t, co) A^T) ⊙ (B^T d(t, ci) B) ] G
// (e: the 2x2 tile of dy, zero past the edges), i.e. 16 GEMMs over the tiles
//   dU[ξ] (Ci, Co) = sum over t of V[ξ][t][ci] E[ξ][t][co]
// summed per fixed block of images (at most 16 blocks, fixed by N), the blocks added in order.
// db (Co), when not null: the bias gradient from the same pass over dy (each image's sum in float,
// added in double in the same fixed blocks).
void conv3x3_winograd_weight_grad(const float* x, const float* dy, int64_t N, int64_t Ci, int64_t H, int64_t W,
                                  int64_t Co, int64_t pad, float* dw, float* db);

}  // namespace minidl::kernels::cpu
