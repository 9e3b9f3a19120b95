// tensor/ops.h — math on Tensors, without autograd: element-wise (broadcasting), reductions,
// linear algebra, softmax, joining and indexing. Each op checks its inputs and throws
// std::invalid_argument naming the op and the shapes/dtypes involved. CPU work is done by
// kernels/cpu; results are new contiguous tensors unless the name ends in '_' (in place).
// Reductions are deterministic: the same bits whatever the thread count.
#pragma once
#include <utility>
#include <vector>

#include "minidl/tensor/tensor.h"

namespace minidl {

// ---- broadcasting helpers ----
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);  // throws naming op and shapes
// Sums `t` down to `shape` (the inverse of broadcasting), for gradients of broadcast ops.
Tensor sum_to(const Tensor& t, const Shape& shape);

// ---- element-wise binary (same dtype; shapes broadcast) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);  // 1 where equal, else 0, in a's dtype
Tensor gt(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
// torch.where: a where cond is non-zero, else b; cond in a's dtype (the 1/0 of eq, gt, lt,
// isfinite); all three broadcast. No host read: a flag kept on a GPU is updated there.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor isfinite(const Tensor& x);  // 1 where x is neither NaN nor +-Inf, else 0, in x's dtype
// A float32 x rounded to dtype's precision (bfloat16 or float16; to nearest, ties to even) and kept
// float32: the bits of x.to(dtype).to(Float32), in one pass for bfloat16 on the CPU
// (kernels/cpu/half_span.h) — autocast's operands of float32 kernels.
Tensor round_to(const Tensor& x, DType dtype);
// with a scalar
Tensor add(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double s);
Tensor operator-(const Tensor& a, double s);
Tensor operator*(const Tensor& a, double s);
Tensor operator/(const Tensor& a, double s);
Tensor operator*(double s, const Tensor& a);
Tensor operator-(const Tensor& a);

// ---- element-wise unary (floating dtypes) ----
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x, bool tanh_approximation = false);
Tensor pow(const Tensor& x, double p);
// derivatives used by autograd: dx from (x or y, dy)
Tensor relu_backward(const Tensor& x, const Tensor& dy);
Tensor gelu_backward(const Tensor& x, const Tensor& dy, bool tanh_approximation = false);
Tensor tanh_backward(const Tensor& y, const Tensor& dy);
Tensor sigmoid_backward(const Tensor& y, const Tensor& dy);

// more activations and loss pieces (floating dtypes), each with its backward dx from (x, dy)
Tensor silu(const Tensor& x);  // x * sigmoid(x)
Tensor leaky_relu(const Tensor& x, double slope);  // x > 0 ? x : slope * x
Tensor elu(const Tensor& x, double alpha);  // x > 0 ? x : alpha (e^x - 1)
Tensor softplus(const Tensor& x, double beta, double threshold);  // log(1 + e^(beta x)) / beta
Tensor hardswish(const Tensor& x);  // x relu6(x + 3) / 6
Tensor smooth_l1(const Tensor& d, double beta);  // |d| < beta ? d^2 / 2beta : |d| - beta/2
Tensor silu_backward(const Tensor& x, const Tensor& dy);
Tensor leaky_relu_backward(const Tensor& x, const Tensor& dy, double slope);
Tensor elu_backward(const Tensor& x, const Tensor& dy, double alpha);
Tensor softplus_backward(const Tensor& x, const Tensor& dy, double beta, double threshold);
Tensor hardswish_backward(const Tensor& x, const Tensor& dy);
Tensor abs_backward(const Tensor& x, const Tensor& dy);  // dy * sign(x)
Tensor smooth_l1_backward(const Tensor& d, const Tensor& dy, double beta);

// ---- in place (optimizers, gradient accumulation); `a` keeps its shape, b broadcasts ----
Tensor& add_(Tensor& a, const Tensor& b, double alpha = 1.0);  // a += alpha * b
Tensor& mul_(Tensor& a, double s);
Tensor& mul_(Tensor& a, const Tensor& b);
// a = a * beta + b * alpha (beta first), e.g. momentum buffers; a += alpha * b * c (addcmul)
Tensor& axpby_(Tensor& a, double beta, const Tensor& b, double alpha);
Tensor& lerp_(Tensor& a, const Tensor& b, double weight);  // a += weight * (b - a)
Tensor& addcmul_(Tensor& a, const Tensor& b, const Tensor& c, double alpha);
Tensor& addcdiv_(Tensor& a, const Tensor& b, const Tensor& c, double alpha);  // a += alpha * b / c

// ---- reductions; dims empty = all dims; negative dims allowed ----
Tensor sum(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
// variance with `correction` (1 = unbiased, 0 = biased), as torch.var(correction=)
Tensor var(const Tensor& x, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
struct MaxResult {
  Tensor values;
  Tensor indices;  // int64, position along dim of the first maximum
};
MaxResult max(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& x);  // over all elements, 0-d
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
// top-k indices along the last dim of a 2-d tensor (largest first), for top-5 accuracy
Tensor topk_indices(const Tensor& x, int64_t k);

// ---- linear algebra (Eigen) ----
// torch.matmul semantics: 1-d·1-d, 2-d·2-d, batched (..., n, k)·(..., k, m) with broadcast batch dims.
Tensor matmul(const Tensor& a, const Tensor& b);
// 2-d only; a or b may be transposed views (no copy). out (PyTorch's out=): when defined, the
// product is written there and out is returned; it must be a contiguous (n, m) tensor of the
// product's dtype on the operands' device (autograd writes a leaf's gradient into its
// destination this way, Variable::set_grad_destination).
Tensor mm(const Tensor& a, const Tensor& b, const Tensor& out = Tensor());
// bias (m) + a (n, k) · b (k, m), the bias added to every row: torch.addmm(bias, a, b) for a 1-d
// bias (a linear layer's forward; on the CPU the bias goes in as the product is written).
Tensor addmm(const Tensor& bias, const Tensor& a, const Tensor& b);
// {a (n, k) · b (k, m), a's row sums (n)} = {mm(a, b), sum(a, {1})} from one pass over a (a linear
// layer's dW = dy^T x and db, with a = dy^T; on the CPU the sums come from the GEMM's own reads).
// out: where the product goes, as mm's.
std::pair<Tensor, Tensor> mm_and_row_sums(const Tensor& a, const Tensor& b, const Tensor& out = Tensor());
// round_to(mm(a, b), dtype): the float32 product of 16-bit operands rounded to dtype (bfloat16 or
// float16) and kept float32 (autocast's gradient of a float32 operand it cast); on the CPU the
// bfloat16 GEMM rounds as it stores, with no pass of its own.
Tensor mm_round_to(const Tensor& a, const Tensor& b, DType dtype);
Tensor addmm_round_to(const Tensor& bias, const Tensor& a, const Tensor& b, DType dtype);  // the same for addmm

// ---- softmax family (numerically stable: subtract the max) ----
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// backward: dx = y * (dy - sum(dy * y)) ; log: dx = dy - exp(y) * sum(dy)
Tensor softmax_backward(const Tensor& y, const Tensor& dy, int64_t dim);
Tensor log_softmax_backward(const Tensor& y, const Tensor& dy, int64_t dim);

// ---- joining and indexing ----
Tensor cat(const std::vector<Tensor>& ts, int64_t dim);
Tensor stack(const std::vector<Tensor>& ts, int64_t dim);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);  // index: int64 1-d
// out = zeros(shape); out.index_add_(dim, index, src) — the backward of index_select
Tensor index_add(const Shape& shape, int64_t dim, const Tensor& index, const Tensor& src);
// out[i] = x[i, target[i]] for 2-d x and int64 target — used by cross_entropy / accuracy
Tensor gather_rows(const Tensor& x, const Tensor& target);

}  // namespace minidl
