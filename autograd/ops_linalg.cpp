// autograd/ops_linalg.cpp — matmul (torch.matmul semantics) and linear (one node), with their backward.
#include "minidl/autograd/ops.h"

#include <array>
#include <tuple>

#include "minidl/autograd/autocast.h"
#include "minidl/tensor/ops.h"

namespace minidl {

// C = A B: dA = dC B^T, dB = A^T dC (batch dims summed back to each input's shape).
// 1-d operands are promoted to matrices as torch.matmul does, and their gradients squeezed back.
// Under autocast the operands are rounded to its dtype inside this node (autograd/autocast.h,
// AutocastCast); 16-bit operands (autocast(BFloat16); autocast(Float16) on CUDA) are multiplied
// as such into a float32 result, and so are their gradients' products: dy rounded to that dtype
// once, each gradient rounded to its operand's dtype (kept float32 for a float32 operand the node
// cast).
Variable matmul(const Variable& a_in, const Variable& b_in) {
  const AutocastCast ca = autocast_gemm_cast(a_in), cb = autocast_gemm_cast(b_in);
  const Tensor& a = ca.data;
  const Tensor& b = cb.data;
  Tensor y = matmul(a, b);
  const bool ga = ca.input.requires_grad(), gb = cb.input.requires_grad();
  return Variable::make_result(
      y, {ca.input, cb.input},
      [ta = gb ? a : Tensor(), tb = ga ? b : Tensor(), sa = a.shape(), sb = b.shape(), low = a.dtype(),
       low_b = b.dtype(), cast_a = ca.cast, cast_b = cb.cast](const Tensor& dy) -> std::vector<Tensor> {
        // promote: a (k) -> (1, k); b (k) -> (k, 1); dy gets the matching unit dims back
        Tensor g = dy.to(low);
        if (sa.size() == 1) g = g.unsqueeze(-2);
        if (sb.size() == 1) g = g.unsqueeze(-1);
        Tensor da, db;
        if (tb.defined()) {  // a needs a gradient
          Tensor b2 = sb.size() == 1 ? tb.unsqueeze(-1) : tb;
          da = matmul(g, b2.transpose(-1, -2));
          if (sa.size() == 1) da = da.squeeze(-2);
          da = sum_to(da, sa);
        }
        if (ta.defined()) {  // b needs a gradient
          Tensor a2 = sa.size() == 1 ? ta.unsqueeze(-2) : ta;
          if (a2.dim() > 2 && sb.size() <= 2) {
            // (..., n, k)^T (..., n, m) summed over the batch = one GEMM on the flattened rows
            const int64_t k = a2.size(-1), m = g.size(-1);
            db = mm(a2.reshape({-1, k}).t(), g.reshape({-1, m}));
          } else {
            db = sum_to(matmul(a2.transpose(-1, -2), g), sb.size() == 1 ? Shape{sb[0], 1} : sb);
          }
          if (sb.size() == 1) db = db.reshape(sb);
        }
        return {AutocastCast::gradient(da, low, cast_a), AutocastCast::gradient(db, low_b, cast_b)};
      },
      "MatmulBackward");
}

// y = x W^T + b, one node: leading dims of x are flattened into rows so the layer is one GEMM,
// the bias is added into the GEMM's output in place; backward: dx = dy W, dW = dy^T x (one GEMM
// over all rows) and db = column sums of dy (summed by that GEMM as it reads dy). The same as matmul(x, transpose(w)) + b (tested).
// dW is written into the weight's gradient destination when it has one (Variable::set_grad_destination).
// Under autocast x, W and b are rounded to its dtype inside this node (autograd/autocast.h,
// AutocastCast); 16-bit x and W (autocast(BFloat16); autocast(Float16) on CUDA) are multiplied as
// such into a float32 result, the widened bias added; backward rounds dy to that dtype once for
// its products and each gradient to its operand's dtype (kept float32 for a float32 operand the
// node cast: the cast's backward would widen it again). round_output: autograd/ops.h.
Variable linear(const Variable& x_in, const Variable& w_in, const Variable& b_in, bool round_output) {
  const AutocastCast x = autocast_gemm_cast(x_in), w = autocast_gemm_cast(w_in), b = autocast_gemm_cast(b_in);
  if (w.data.dim() != 2 || x.data.dim() < 1 || x.data.size(-1) != w.data.size(1))
    throw std::invalid_argument("linear: input " + x.data.desc() + " does not match weight " + w.data.desc() +
                                " (expected input (..., " + std::to_string(w.data.dim() == 2 ? w.data.size(1) : -1) +
                                "))");
  if (b.data.defined() && (b.data.dim() != 1 || b.data.size(0) != w.data.size(0)))
    throw std::invalid_argument("linear: bias " + b.data.desc() + " does not match weight " + w.data.desc());
  Shape out_shape = x.data.shape();
  out_shape.back() = w.data.size(0);
  const Tensor x2 = x.data.dim() == 2 ? x.data : x.data.reshape({-1, x.data.size(-1)});  // (rows, in)
  // (rows, out); rounded to the autocast dtype where asked
  const bool round = round_output && is_autocast_enabled() && is_half(x.data.dtype());
  const DType low = x.data.dtype();
  const Tensor y = b.data.defined()
                       ? (round ? addmm_round_to(b.data, x2, w.data.t(), low) : addmm(b.data, x2, w.data.t()))
                       : (round ? mm_round_to(x2, w.data.t(), low) : mm(x2, w.data.t()));
  const bool gx = x.input.requires_grad(), gw = w.input.requires_grad(), gb = b.input.requires_grad();
  // A leaf weight whose dW keeps the product's dtype may take dW in its gradient destination.
  const bool dw_in_place = gw && w.input.is_leaf() && !w.cast && !is_half(w.data.dtype());
  return Variable::make_result(
      x.data.dim() == 2 ? y : y.view(out_shape), {x.input, w.input, b.input},
      [tx = gw ? x2 : Tensor(), tw = gx ? w.data : Tensor(), w_leaf = dw_in_place ? w.input : Variable(),
       x_shape = x.data.shape(), gb, low, cast = std::array<bool, 3>{x.cast, w.cast, b.cast},
       dtypes = std::array<DType, 3>{x.data.dtype(), w.data.dtype(),
                                     b.data.defined() ? b.data.dtype() : x.data.dtype()}](const Tensor& dy) {
        const Tensor g = dy.reshape({-1, dy.size(-1)}).to(low);  // (rows, out)
        std::vector<Tensor> grads(3);
        if (tw.defined())  // dx, rounded as the GEMM stores it where this node cast x
          grads[0] = (cast[0] ? mm_round_to(g, tw, dtypes[0]) : mm(g, tw).to(dtypes[0])).view(x_shape);
        const Tensor dw_out = w_leaf.defined() ? claim_grad_destination(w_leaf) : Tensor();  // or a new one
        if (tx.defined() && gb) {
          std::tie(grads[1], grads[2]) = mm_and_row_sums(g.t(), tx, dw_out);  // dW and db from one pass over dy
        } else {
          if (tx.defined()) grads[1] = mm(g.t(), tx, dw_out);
          if (gb) grads[2] = sum(g, {0});
        }
        for (size_t i = 1; i < 3; ++i) grads[i] = AutocastCast::gradient(grads[i], dtypes[i], cast[i]);
        return grads;
      },
      "LinearBackward");
}

}  // namespace minidl
