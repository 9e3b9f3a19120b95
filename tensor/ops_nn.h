// tensor/ops_nn.h — the neural-network primitives on Tensors, each forward beside its backward,
// without autograd (autograd/ wraps them). Layout is NCHW for images, (N, ..., C) for layer_norm.
// conv2d is im2col + GEMM (Eigen); pools keep what backward needs (argmax indices).
// Batch norm is split as PyTorch's CUDA kernels are (batch_norm_stats / _elemt /
// _backward_reduce / _backward_elemt) so dist's SyncBatchNorm reuses the same pieces with
// statistics gathered across ranks.
#pragma once
#include <cstdint>

#include "minidl/tensor/random.h"
#include "minidl/tensor/tensor.h"

namespace minidl {

struct Conv2dParams {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
};
// x (N, C_in, H, W), w (C_out, C_in/groups, kH, kW), b (C_out) or undefined -> (N, C_out, H_out, W_out)
// x and w float32 or float64 (b and y the same), or both bfloat16 or float16 (autocast's operands;
// b and y float32): float32 sums of the exact products, by the bfloat16 kernels of
// kernels/cpu/conv2d_bf16.h on a CPU where kernels::cpu::conv2d_bf16_pays, else by the float32
// kernels on the widened operands.
Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p);
struct Conv2dGrads {
  Tensor dx, dw, db;  // db undefined when the bias was undefined; dx undefined when !need_dx
};
// need_dx = false skips the input gradient (a first layer's input needs none). dy has y's dtype,
// and so do dx, dw and db; for 16-bit x and w (dy float32) the bfloat16 kernel multiplies dy
// rounded to bfloat16 (as linear's backward under autocast, and PyTorch's), the float32 kernels on
// widened operands the float32 dy itself. round_dx (BFloat16 or Float16; Float32: none): dx rounded
// to that precision and kept in its dtype — autocast's input gradient — as the bfloat16 kernel
// stores it, else in a pass after (the same bits either way).
Conv2dGrads conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& dy, bool has_bias, const Conv2dParams& p,
                            bool need_dx = true, DType round_dx = DType::Float32);

// Transposed convolution (torch.nn.functional.conv_transpose2d), the adjoint of conv2d in its
// input: forward is conv2d's input gradient with x as the output gradient, backward is conv2d
// forward (dx) and conv2d's weight gradient with the roles of x and dy swapped (dw).
//   x (N, C_in, H, W), w (C_in, C_out/groups, kH, kW), b (C_out) -> y (N, C_out, H_out, W_out)
//   H_out = (H - 1) stride_h - 2 pad_h + dil_h (kH - 1) + output_padding_h + 1   (same for W)
// output_padding must be smaller than the stride. The forward is CPU-only (CUDA throws).
struct ConvTranspose2dParams {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t output_padding_h = 0, output_padding_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
};
Tensor conv_transpose2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ConvTranspose2dParams& p);
// dx undefined when !need_dx; db undefined when !has_bias
Conv2dGrads conv_transpose2d_backward(const Tensor& x, const Tensor& w, const Tensor& dy, bool has_bias,
                                      const ConvTranspose2dParams& p, bool need_dx = true);

struct Pool2dParams {
  int64_t kernel_h, kernel_w;
  int64_t stride_h = 0, stride_w = 0;  // 0: the kernel's extent, PyTorch's default stride
  int64_t pad_h = 0, pad_w = 0;
  bool count_include_pad = true;  // avg_pool2d only
  bool ceil_mode = false;  // round the output size up (the last window may hang over the edge)
};
// One output extent, as PyTorch's pooling_output_shape: floor (or, with ceil_mode, ceil) of
// (in + 2 pad - kernel) / stride, plus 1; with ceil_mode the last window must start inside the
// input or its left padding. Needs in + 2 pad >= kernel.
inline int64_t pool2d_out_extent(int64_t in, int64_t kernel, int64_t stride, int64_t pad, bool ceil_mode) {
  int64_t out = (in + 2 * pad - kernel + (ceil_mode ? stride - 1 : 0)) / stride + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}
struct MaxPool2dResult {
  Tensor out;  // (N, C, H_out, W_out)
  Tensor indices;  // int64, flat index h*W + w of the max within each (n, c) plane
};
MaxPool2dResult max_pool2d_forward(const Tensor& x, const Pool2dParams& p);
// indices and p as given to / returned by max_pool2d_forward (the CUDA kernel gathers, for each
// input element, over the windows p places over it).
Tensor max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Shape& x_shape, const Pool2dParams& p);
Tensor avg_pool2d_forward(const Tensor& x, const Pool2dParams& p);
Tensor avg_pool2d_backward(const Tensor& dy, const Shape& x_shape, const Pool2dParams& p);
// adaptive average pooling to (out_h, out_w), PyTorch's start/end index rule
Tensor adaptive_avg_pool2d_forward(const Tensor& x, int64_t out_h, int64_t out_w);
Tensor adaptive_avg_pool2d_backward(const Tensor& dy, const Shape& x_shape);

// ---- batch norm pieces; x is (N, C) or (N, C, *); per-channel tensors are (C) ----
struct BatchNormStats {
  Tensor mean;  // (C)
  Tensor invstd;  // (C) 1 / sqrt(biased_var + eps)
};
BatchNormStats batch_norm_stats(const Tensor& x, double eps);
// The running statistics move towards a batch's: running = running + momentum * (batch - running)
// for the mean and the unbiased variance (converted to the running tensors' dtype). The one
// update every BatchNorm flavour (local, synchronised, ghost) uses.
void batch_norm_update_running_stats_(Tensor& running_mean, Tensor& running_var, const Tensor& mean,
                                      const Tensor& unbiased_var, double momentum);
// y = (x - mean) * invstd * weight + bias ; weight / bias may be undefined (affine=false).
// relu: y = relu(that), in the same pass on the CPU. The backward pieces take the same bias and
// relu and mask dy where that y is <= 0, as relu_backward does; they rebuild y from x (on the CPU
// inside their own pass, kernels/cpu/norm.h's BatchNormAffine), so the backward need not keep y.
Tensor batch_norm_elemt(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                        const Tensor& bias, bool relu = false);
// relu(batch_norm_elemt(x, ...) + residual), residual shaped like x: one pass on the CPU
// (kernels/cpu/batch_norm_add_relu.h; the same bits as the three ops), the three ops on CUDA.
Tensor batch_norm_add_relu_elemt(const Tensor& x, const Tensor& residual, const Tensor& mean, const Tensor& invstd,
                                 const Tensor& weight, const Tensor& bias);
struct BatchNormReduce {
  Tensor sum_dy;  // (C) sum over N, * of dy
  Tensor sum_dy_xmu;  // (C) sum of dy * (x - mean)
  Tensor grad_weight;  // (C) sum_dy_xmu * invstd (undefined if weight undefined)
  Tensor grad_bias;  // (C) sum_dy (undefined if weight undefined)
};
BatchNormReduce batch_norm_backward_reduce(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                                           const Tensor& weight, const Tensor& bias = Tensor(), bool relu = false);
// dx = (dy - sum_dy / count - (x - mean) * invstd^2 * sum_dy_xmu / count) * weight * invstd
Tensor batch_norm_backward_elemt(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                                 const Tensor& weight, const Tensor& sum_dy, const Tensor& sum_dy_xmu, int64_t count,
                                 const Tensor& bias = Tensor(), bool relu = false);
// The same with count a one-element tensor on the inputs' device (SyncBatchNorm's total over the
// ranks): on CUDA it is read by the kernel, so the backward needs no host round trip; it must be
// positive (not checked on CUDA). On the CPU, exactly the int64 form.
Tensor batch_norm_backward_elemt(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                                 const Tensor& weight, const Tensor& sum_dy, const Tensor& sum_dy_xmu,
                                 const Tensor& count, const Tensor& bias = Tensor(), bool relu = false);
// eval mode: dx = dy * weight * invstd (statistics are constants)

// SyncBatchNorm's merge of the all-gathered statistics, on their device (PyTorch's
// batch_norm_gather_stats_with_counts). rows (R, 2C + 1) float64: rank r's (mean (C),
// invstd (C), count); ranks with count 0 are left out. Chan's formula, ranks added in order:
// N = sum n_r; mean = sum n_r m_r / N; var = sum n_r (1 / invstd_r^2 - eps + (m_r - mean)^2) / N.
struct BatchNormGatheredStats {
  Tensor mean;  // (C) float64
  Tensor invstd;  // (C) float64: 1 / sqrt(var + eps)
  Tensor unbiased_var;  // (C) float64: var N / (N - 1), for the running variance
  Tensor count;  // (1) float64: N
};
BatchNormGatheredStats batch_norm_gather_stats_with_counts(const Tensor& rows, double eps);

// ---- batch norm + ReLU + 2x2 max-pool, stride 2, no padding, as one op (CPU) ----
// x (N, C, H, W) -> max_pool2d(relu(batch_norm_elemt(x, ...)), 2), the same bits, without writing
// the full-resolution normalised values. H, W >= 2 (a last odd row / column is dropped).
// What the backward needs of the forward (not its output: the ReLU's mask rides in window_argmax).
struct BatchNormReluPoolSaved {
  // uint8 (N, C, H/2, W/2): the winner's place in its window, 2 * dh + dw, plus 4 where the ReLU
  // passes the gradient (the output is > 0 or NaN)
  Tensor window_argmax;
  Tensor x_at_max;  // (N, C, H/2, W/2): x at the winner
};
struct BatchNormReluPoolResult {
  Tensor out;  // (N, C, H/2, W/2)
  BatchNormReluPoolSaved saved;
};
BatchNormReluPoolResult batch_norm_relu_max_pool2d_forward(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                                                           const Tensor& weight, const Tensor& bias);
struct BatchNormReluPoolGrads {
  Tensor dx, grad_weight, grad_bias;  // grad_weight / grad_bias undefined when weight is undefined
};
// Training-mode backward (mean / invstd are the batch's): the gradients of the composed
// batch_norm (batch statistics) -> relu -> max_pool2d, summing only the windows' winners.
BatchNormReluPoolGrads batch_norm_relu_max_pool2d_backward(const Tensor& dout, const Tensor& x,
                                                           const BatchNormReluPoolSaved& saved, const Tensor& mean,
                                                           const Tensor& invstd, const Tensor& weight);

// ---- layer norm over the last `normalized` dims ----
struct LayerNormResult {
  Tensor out;
  Tensor mean;  // (rows) float of x's dtype
  Tensor invstd;  // (rows)
};
LayerNormResult layer_norm_forward(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                                   const Tensor& bias, double eps);
struct LayerNormGrads {
  Tensor dx, dweight, dbias;  // dweight / dbias undefined when weight undefined
};
LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                                   const Shape& normalized_shape, const Tensor& weight);

// ---- group norm of x (N, C, *) over num_groups groups of C / num_groups channels (CPU) ----
struct GroupNormResult {
  Tensor out;
  Tensor mean;  // (N, num_groups) of x's dtype
  Tensor rstd;  // (N, num_groups): 1 / sqrt(biased variance + eps)
};
// out = (x - mean) * rstd * weight[c] + bias[c]; weight / bias (C) or undefined. relu: out =
// relu(that) in the same pass. The backward takes the same bias and relu and masks dy where that
// out is <= 0, as relu_backward does, rebuilding out from x inside its own pass (out's bits:
// both normalise with the stored mean and rstd), so the backward need not keep out.
GroupNormResult group_norm_forward(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias,
                                   double eps, bool relu = false);
struct GroupNormGrads {
  Tensor dx, dweight, dbias;  // dweight / dbias (C) always (as for a weight of ones when weight is undefined)
};
GroupNormGrads group_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                   int64_t num_groups, const Tensor& weight, const Tensor& bias = Tensor(),
                                   bool relu = false);

// ---- dropout: mask element i is keep iff philox_uniform(key, i) >= p; scale 1/(1-p) ----
Tensor dropout_mask(const Shape& shape, double p, RandomKey key, DType dtype);  // values 0 or 1/(1-p)
// The same mask made directly on `device` (on CUDA: the same Philox stream, the same values).
Tensor dropout_mask(const Shape& shape, double p, RandomKey key, DType dtype, Device device);

// ---- losses ----
// logits (N, C), target int64 (N) -> 0-d mean loss; label_smoothing as torch.nn.functional.cross_entropy
Tensor cross_entropy_forward(const Tensor& logits, const Tensor& target, double label_smoothing);
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& target, double label_smoothing,
                              const Tensor& grad_loss);  // grad_loss: 0-d

// ---- self-attention on a packed projection (CPU; kernels/cpu/attention.h) ----
// qkv (B, L, 3E): q, k, v side by side, E = num_heads * D. No dropout; no mask but, with
// is_causal, the causal one (query i attends to keys j <= i; weights zero above the diagonal).
struct PackedAttentionResult {
  Tensor out;  // (B, L, E): the heads' contexts side by side, as out_proj takes them
  Tensor weights;  // (B, H, L, L) softmax(scale * q k^T), saved for backward
};
// bf16_products (float32 only; autocast(BFloat16)'s attention): the products' operands rounded to
// bfloat16, float32 sums (kernels/cpu/attention.h's *_bf16), where the CPU runs those kernels
// (AVX512_BF16); elsewhere the float32 kernels on qkv as given.
PackedAttentionResult packed_attention_forward(const Tensor& qkv, int64_t num_heads, double scale,
                                               bool is_causal = false, bool bf16_products = false);
Tensor packed_attention_backward(const Tensor& qkv, const Tensor& weights, const Tensor& dout, int64_t num_heads,
                                 double scale, bool is_causal = false,
                                 bool bf16_products = false);  // -> dqkv (B, L, 3E)

}  // namespace minidl
