// autograd/ops.h — differentiable ops on Variables. Each is defined in one autograd/ops_*.cpp
// file as its forward (a tensor/ op) with its backward right below it, as a closure that
// captures only what backward needs. Composite ops (mse_loss, ...) are built from primitives
// and need no backward of their own; linear and packed_self_attention are single nodes for speed.
#pragma once
#include <optional>
#include <vector>

#include "minidl/autograd/variable.h"
#include "minidl/tensor/ops_nn.h"
#include "minidl/tensor/random.h"

namespace minidl {

// ---- element-wise (broadcasting) ----
Variable add(const Variable& a, const Variable& b);
Variable sub(const Variable& a, const Variable& b);
Variable mul(const Variable& a, const Variable& b);
Variable div(const Variable& a, const Variable& b);
Variable add(const Variable& a, double s);
Variable mul(const Variable& a, double s);
Variable neg(const Variable& x);
Variable exp(const Variable& x);
Variable log(const Variable& x);
Variable sqrt(const Variable& x);
Variable pow(const Variable& x, double p);
Variable tanh(const Variable& x);
Variable sigmoid(const Variable& x);
Variable relu(const Variable& x);
Variable gelu(const Variable& x, bool tanh_approximation = false);
Variable silu(const Variable& x);
Variable leaky_relu(const Variable& x, double negative_slope = 0.01);
Variable elu(const Variable& x, double alpha = 1.0);
Variable softplus(const Variable& x, double beta = 1.0, double threshold = 20.0);
Variable hardswish(const Variable& x);
Variable abs(const Variable& x);
Variable operator+(const Variable& a, const Variable& b);
Variable operator-(const Variable& a, const Variable& b);
Variable operator*(const Variable& a, const Variable& b);
Variable operator/(const Variable& a, const Variable& b);
Variable operator+(const Variable& a, double s);
Variable operator-(const Variable& a, double s);
Variable operator*(const Variable& a, double s);
Variable operator/(const Variable& a, double s);
Variable operator*(double s, const Variable& a);
Variable operator-(const Variable& a);

// ---- reductions (dims empty = all) ----
Variable sum(const Variable& x, const Shape& dims = {}, bool keepdim = false);
Variable mean(const Variable& x, const Shape& dims = {}, bool keepdim = false);
Variable var(const Variable& x, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
Variable max(const Variable& x, int64_t dim, bool keepdim = false);  // values; gradient to the first max

// ---- shape ----
Variable reshape(const Variable& x, const Shape& shape);
Variable flatten(const Variable& x, int64_t start = 0, int64_t end = -1);
Variable permute(const Variable& x, const Shape& dims);
Variable transpose(const Variable& x, int64_t d0, int64_t d1);
Variable slice(const Variable& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Variable narrow(const Variable& x, int64_t dim, int64_t start, int64_t length);
Variable select(const Variable& x, int64_t dim, int64_t index);
Variable unsqueeze(const Variable& x, int64_t dim);
Variable squeeze(const Variable& x, int64_t dim);
Variable expand(const Variable& x, const Shape& shape);
Variable contiguous(const Variable& x);
// x converted to dtype (as Tensor::to, rounding to nearest even into bfloat16 / float16); the
// gradient is converted back to x's dtype ("ToCopyBackward"). x itself when it already has dtype.
Variable to(const Variable& x, DType dtype);
// x (float32) rounded to dtype's precision and kept float32: to(to(x, dtype), Float32) as one op
// (tensor round_to), and its gradient dy rounded the same way, as that pair's is.
Variable round_to(const Variable& x, DType dtype);
Variable cat(const std::vector<Variable>& xs, int64_t dim);
Variable stack(const std::vector<Variable>& xs, int64_t dim);
Variable index_select(const Variable& x, int64_t dim, const Tensor& index);

// ---- linear algebra ----
Variable matmul(const Variable& a, const Variable& b);
// y = x W^T + b; x (..., in), W (out, in), b (out) or undefined (one node: "LinearBackward").
// round_output: under autocast, where the product multiplies 16-bit operands (autocast.h,
// autocast_gemm_takes_low), y rounded to their dtype (and kept float32) as the GEMM stores it, for
// a consumer that rounds its operand anyway (packed_self_attention's qkv). Its backward is the
// same either way: it rounds dy to that dtype itself. Elsewhere it changes nothing.
Variable linear(const Variable& x, const Variable& w, const Variable& b, bool round_output = false);

// ---- softmax family ----
Variable softmax(const Variable& x, int64_t dim);
Variable log_softmax(const Variable& x, int64_t dim);

// ---- losses (as torch.nn.functional's) ----
enum class Reduction { None, Mean, Sum };
// Class-index targets: input (N, C) or (N, C, d1, ...), int64 target (N) or (N, d1, ...).
// weight: (C) per-class rescaling or undefined; targets equal to ignore_index add nothing and
// are not counted; Mean divides by the summed weight of the counted targets; None keeps the
// target's shape (0 at ignored positions).
struct NLLLossOptions {
  Tensor weight = {};
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::Mean;
};
struct CrossEntropyOptions {
  Tensor weight = {};
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::Mean;
  double label_smoothing = 0.0;
};
// mean over the batch, optional label smoothing: the fused kernel
Variable cross_entropy(const Variable& logits, const Tensor& target, double label_smoothing = 0.0);
Variable cross_entropy(const Variable& logits, const Tensor& target, const CrossEntropyOptions& options);
Variable nll_loss(const Variable& log_probs, const Tensor& target, const NLLLossOptions& options = {});
// -[pos_weight t log sigmoid(x) + (1 - t) log(1 - sigmoid(x))] * weight, computed stably;
// weight broadcasts to the input, pos_weight (C) to its last dim
struct BCEWithLogitsOptions {
  Tensor weight = {};
  Tensor pos_weight = {};
  Reduction reduction = Reduction::Mean;
};
Variable binary_cross_entropy_with_logits(const Variable& logits, const Variable& target,
                                          const BCEWithLogitsOptions& options = {});
// element-wise losses of input - target (same shapes)
Variable mse_loss(const Variable& input, const Variable& target, Reduction reduction = Reduction::Mean);
Variable l1_loss(const Variable& input, const Variable& target, Reduction reduction = Reduction::Mean);
// 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta; beta = 0 is l1_loss
Variable smooth_l1_loss(const Variable& input, const Variable& target, Reduction reduction = Reduction::Mean,
                        double beta = 1.0);

// ---- attention ----
// As torch.nn.functional.scaled_dot_product_attention: query (..., L, E), key (..., S, E),
// value (..., S, Ev) -> (..., L, Ev) = softmax(q k^T * scale + mask) v, dropout on the weights.
// attn_mask broadcasts to (..., L, S): boolean (uint8) with 1 = may attend (PyTorch's rule for
// this function), or floating, added to the scores. is_causal: query i sees keys j <= i.
struct ScaledDotProductAttentionOptions {
  Tensor attn_mask = {};
  double dropout_p = 0.0;
  bool is_causal = false;
  std::optional<double> scale = std::nullopt;  // 1 / sqrt(E) when unset
};
Variable scaled_dot_product_attention(const Variable& query, const Variable& key, const Variable& value,
                                      const ScaledDotProductAttentionOptions& options = {});
// The pieces nn::MultiheadAttention shares: an (L, S) additive causal mask (-inf above the
// diagonal); a boolean or floating mask as an additive one (for a boolean mask, which value
// means "masked" is the caller's convention); attention returning its weights as well.
Tensor causal_mask(int64_t L, int64_t S, DType dtype, Device device = Device::cpu());
Tensor additive_mask(const Tensor& mask, bool true_means_masked, DType dtype, Device device, const char* op);
struct AttentionResult {
  Variable output;  // (..., L, Ev)
  Variable weights;  // (..., L, S), after dropout
};
AttentionResult attention_with_weights(const Variable& q, const Variable& k, const Variable& v, const Tensor& mask,
                                       double scale, double dropout_p, bool training);
// Self-attention without dropout, unmasked or causal (is_causal: query i sees keys j <= i), on a
// packed projection qkv (B, L, 3E) (q, k, v side by side, E = num_heads * D) -> the heads'
// contexts (B, L, E): one node whose backward writes the gradient of qkv directly (CPU only;
// tensor/ops_nn.h). The same values as slicing q, k, v into heads and calling
// attention_with_weights (with causal_mask when is_causal).
Variable packed_self_attention(const Variable& qkv, int64_t num_heads, double scale, bool is_causal = false);
// The same from the projection's operands: packed_self_attention(linear(x, w, b), ...), where
// under autocast the projection's GEMM stores qkv already rounded (linear's round_output), so the
// attention rounds nothing itself and its gradient takes no rounding pass (the same bits).
Variable packed_self_attention(const Variable& x, const Variable& w, const Variable& b, int64_t num_heads, double scale,
                               bool is_causal = false);

// ---- resampling (torch.nn.functional.interpolate) of x (N, C, H, W) ----
enum class InterpolateMode { Nearest, Bilinear };
// Exactly one of size and scale_factor, each with one value (both dims) or two (h, w). From a
// scale factor the output size is floor(in * scale), and the source coordinates use 1 / scale
// unless recompute_scale_factor (then in / out, as with a size). align_corners: bilinear only
// (unset = false).
struct InterpolateOptions {
  std::vector<int64_t> size = {};
  std::vector<double> scale_factor = {};
  InterpolateMode mode = InterpolateMode::Nearest;
  std::optional<bool> align_corners = std::nullopt;
  bool recompute_scale_factor = false;
};
// Composed per axis from index_select (nearest: out[i] = x[min(floor(i * scale), in - 1)]) and,
// for bilinear, the weighted sum of the two neighbours, so the gradient needs no kernel of its own.
Variable interpolate(const Variable& x, const InterpolateOptions& options);

// ---- padding (torch.nn.functional.pad): pads = (left, right) pairs, the last dim first ----
enum class PadMode { Constant, Reflect, Replicate, Circular };
Variable pad(const Variable& x, const std::vector<int64_t>& pads, PadMode mode = PadMode::Constant, double value = 0.0);

// ---- neural-network ops ----
Variable conv2d(const Variable& x, const Variable& w, const Variable& b, const Conv2dParams& p = {});
Variable max_pool2d(const Variable& x, const Pool2dParams& p);
Variable avg_pool2d(const Variable& x, const Pool2dParams& p);
Variable adaptive_avg_pool2d(const Variable& x, int64_t out_h, int64_t out_w);
// Functional batch norm, as torch.nn.functional.batch_norm. In training, running_mean/var
// (if defined) are updated in place with `momentum` and the unbiased batch variance.
// relu = true: relu(batch_norm(...)) as one node (the ReLU fused into the normalising pass and
// its mask, rebuilt from x, into the backward's passes: the node keeps no output; the same
// values as the two ops).
Variable batch_norm(const Variable& x, Tensor running_mean, Tensor running_var, const Variable& weight,
                    const Variable& bias, bool training, double momentum, double eps, bool relu = false);
// relu(batch_norm(x, ...) + residual) as one node, the tail of a residual block (torchvision's
// BasicBlock): one forward pass where the three ops take three, the same values and gradients.
// An explicit choice of the model's code (nn::BatchNormBase::forward_add_relu), never a rewrite.
Variable batch_norm_add_relu(const Variable& x, const Variable& residual, Tensor running_mean, Tensor running_var,
                             const Variable& weight, const Variable& bias, bool training, double momentum, double eps);
// max_pool2d(batch_norm(..., relu = true), p) as one node when training on the CPU with a 2x2
// window, stride 2 and no padding (the same values and, up to the order of the per-channel sums,
// the same gradients, without the full-resolution intermediates); otherwise the composed ops.
Variable batch_norm_relu_max_pool2d(const Variable& x, Tensor running_mean, Tensor running_var, const Variable& weight,
                                    const Variable& bias, bool training, double momentum, double eps,
                                    const Pool2dParams& p);
Variable layer_norm(const Variable& x, const Shape& normalized_shape, const Variable& weight, const Variable& bias,
                    double eps);
// Group norm, as torch.nn.functional.group_norm: x (N, C, *) normalised over each of num_groups
// groups of C / num_groups channels (with *), then scaled and shifted per channel by weight /
// bias (C) when defined. On the CPU one fused op (kernels/cpu/group_norm.h); on CUDA composed
// from layer_norm and a per-channel affine.
Variable group_norm(const Variable& x, int64_t num_groups, const Variable& weight, const Variable& bias,
                    double eps = 1e-5);
// relu(group_norm(x, ...)): on the CPU one node (the two ops' values, one pass fewer each way,
// the ReLU's mask rebuilt from x in the backward so that the node keeps no output;
// nn::fuse_for_training runs a GroupNorm + ReLU of a Sequential through it), on CUDA the two ops.
Variable group_norm_relu(const Variable& x, int64_t num_groups, const Variable& weight, const Variable& bias,
                         double eps = 1e-5);
// Transposed convolution, as torch.nn.functional.conv_transpose2d: x (N, C_in, H, W),
// w (C_in, C_out / groups, kH, kW), b (C_out) or undefined -> (N, C_out, H_out, W_out); the
// gradient of conv2d with respect to its input (tensor/ops_nn.h).
Variable conv_transpose2d(const Variable& x, const Variable& w, const Variable& b, const ConvTranspose2dParams& p = {});
// Inverted dropout; the mask is keyed by `key` (identity when !training or p == 0).
Variable dropout(const Variable& x, double p, bool training, RandomKey key);
Variable dropout(const Variable& x, double p, bool training);  // key from the default generator
// Channel dropout, as torch.nn.functional.dropout2d: x (N, C, H, W); each (n, c) plane is zeroed
// with probability p, the others scaled by 1 / (1 - p) (one mask of shape (N, C, 1, 1)).
Variable dropout2d(const Variable& x, double p, bool training, RandomKey key);
Variable dropout2d(const Variable& x, double p, bool training);  // key from the default generator
// weight (num, dim) rows gathered by int64 indices of any shape -> (*indices.shape, dim)
Variable embedding(const Tensor& indices, const Variable& weight);

}  // namespace minidl
