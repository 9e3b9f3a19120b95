// autograd/ops.h — differentiable ops on Variables. Each is defined in one autograd/ops_*.cpp
// file as its forward (a tensor/ op) with its backward right below it, as a closure that
// captures only what backward needs. Composite ops (linear, mse_loss, ...) are built from
// primitives and need no backward of their own.
#pragma once
#include <vector>

#include "autograd/variable.h"
#include "tensor/ops_nn.h"
#include "tensor/random.h"

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
Variable cat(const std::vector<Variable>& xs, int64_t dim);
Variable stack(const std::vector<Variable>& xs, int64_t dim);
Variable index_select(const Variable& x, int64_t dim, const Tensor& index);

// ---- linear algebra ----
Variable matmul(const Variable& a, const Variable& b);
// y = x W^T + b; x (..., in), W (out, in), b (out) or undefined
Variable linear(const Variable& x, const Variable& w, const Variable& b);

// ---- softmax family ----
Variable softmax(const Variable& x, int64_t dim);
Variable log_softmax(const Variable& x, int64_t dim);

// ---- losses ----
Variable cross_entropy(const Variable& logits, const Tensor& target, double label_smoothing = 0.0);
Variable nll_loss(const Variable& log_probs, const Tensor& target);  // mean of -log_probs[i, target[i]]
Variable mse_loss(const Variable& input, const Variable& target);   // mean reduction

// ---- neural-network ops ----
Variable conv2d(const Variable& x, const Variable& w, const Variable& b, const Conv2dParams& p = {});
Variable max_pool2d(const Variable& x, const Pool2dParams& p);
Variable avg_pool2d(const Variable& x, const Pool2dParams& p);
Variable adaptive_avg_pool2d(const Variable& x, int64_t out_h, int64_t out_w);
// Functional batch norm, as torch.nn.functional.batch_norm. In training, running_mean/var
// (if defined) are updated in place with `momentum` and the unbiased batch variance.
Variable batch_norm(const Variable& x, Tensor running_mean, Tensor running_var, const Variable& weight,
                    const Variable& bias, bool training, double momentum, double eps);
Variable layer_norm(const Variable& x, const Shape& normalized_shape, const Variable& weight, const Variable& bias,
                    double eps);
// Inverted dropout; the mask is keyed by `key` (identity when !training or p == 0).
Variable dropout(const Variable& x, double p, bool training, RandomKey key);
Variable dropout(const Variable& x, double p, bool training);  // key from the default generator
// weight (num, dim) rows gathered by int64 indices of any shape -> (*indices.shape, dim)
Variable embedding(const Tensor& indices, const Variable& weight);

}  // namespace minidl
