// kernels/cpu/conv2d_winograd.h — 3x3, stride-1 float convolution by Winograd's minimal filtering
// F(m x m, 3x3) (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", 2015,
// https://arxiv.org/abs/1509.09308): each m x m block of outputs ("tile") of one channel pair is
//   Y = A^T [ (G g G^T) ⊙ (B^T d B) ] A      (d: the (m + 2) x (m + 2) input patch, g: the 3x3 kernel)
// so a batch of tiles is (m + 2)² GEMMs, one per position ξ of the transformed tile:
//   M[ξ] (Co, tiles) = U[ξ] (Co, Ci) · V[ξ] (Ci, tiles)
// with U = the transformed kernels and V = the transformed patches, plus the cheap transforms.
// The forward pass and the input gradient (a 3x3 convolution of dy with the flipped, transposed
// kernels) run F(4x4, 3x3): 36 multiply-adds per channel pair and tile of 16 outputs, 4x fewer
// than the direct 144. Its transforms scale by up to 5 (B^T) and 8 (A^T), so its float rounding is
// larger than the direct sum's: about 1e-6 of the sum of |terms| (1e-4 of outputs near 1 with 32
// channels), as in cuDNN's and oneDNN's Winograd. The weight gradient runs F(2x2, 3x3) (16 per 4
// outputs, 2.25x fewer): it sums every tile of the batch and its result cancels, so it keeps the
// smaller transforms (F(4x4) there gained 3% of a ResNet-20 step and moved two-rank training off
// one-process training by 3e-4 after five steps). Images are processed in fixed chunks, in
// parallel; each output element is computed by the same operations in the same order whatever
// the thread count. Tested against im2col + GEMM by tests/kernels/test_cpu_conv.cpp.
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
// (e: the 2x2 tile of dy, zero past the edges; F(2x2, 3x3)), i.e. 16 GEMMs over the tiles
//   dU[ξ] (Ci, Co) = sum over t of V[ξ][t][ci] E[ξ][t][co]
// summed per fixed block of images (at most 16 blocks, fixed by N), the blocks added in order.
// db (Co), when not null: the bias gradient from the same pass over dy (each image's sum in float,
// added in double in the same fixed blocks).
void conv3x3_winograd_weight_grad(const float* x, const float* dy, int64_t N, int64_t Ci, int64_t H, int64_t W,
                                  int64_t Co, int64_t pad, float* dw, float* db);

}  // namespace minidl::kernels::cpu
