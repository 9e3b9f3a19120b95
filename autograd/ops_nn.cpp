// autograd/ops_nn.cpp — differentiable neural-network ops: softmax family, convolution and
// transposed convolution, pooling, batch norm (alone, with a ReLU, with a ReLU and a 2x2
// max-pool), layer norm, group norm, dropout (element-wise and per channel), embedding.
// Each forward calls the tensor/ops_nn.h kernel and its backward (right below it) calls the
// matching backward kernel; group norm and dropout2d are composed from other ops.
#include "minidl/autograd/autocast.h"
#include "minidl/autograd/ops.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/ops.h"

namespace minidl {

// softmax: dx = y * (dy - sum(dy * y))
Variable softmax(const Variable& x, int64_t dim) {
  Tensor y = softmax(x.data(), dim);
  return Variable::make_result(
      y, {x}, [y, dim](const Tensor& dy) -> std::vector<Tensor> { return {softmax_backward(y, dy, dim)}; },
      "SoftmaxBackward");
}

// log_softmax: dx = dy - exp(y) * sum(dy)
Variable log_softmax(const Variable& x, int64_t dim) {
  Tensor y = log_softmax(x.data(), dim);
  return Variable::make_result(
      y, {x}, [y, dim](const Tensor& dy) -> std::vector<Tensor> { return {log_softmax_backward(y, dy, dim)}; },
      "LogSoftmaxBackward");
}

// conv2d: dx by col2im, dw and db by GEMM/reduction (tensor/ops_conv.cpp); under autocast x and
// w are rounded to its dtype inside this node (autograd/autocast.h, AutocastCast) and stay in it
// between forward and backward (half the bytes a float32 copy would keep). The tensor op
// multiplies them as bfloat16 where that pays (kernels/cpu/conv2d_bf16.h: the CPU has AMX, one
// group, not the direct kernel's few-channel 3x3 layers), and otherwise widens them for the
// float32 kernels. y, dx and dw come back float32; dx and dw are rounded to the operands' dtype,
// as the round trip's cast would.
Variable conv2d(const Variable& x_in, const Variable& w_in, const Variable& b_in, const Conv2dParams& p) {
  const AutocastCast x = autocast_low_cast(x_in), w = autocast_low_cast(w_in);
  const Variable b = autocast_operand(b_in);
  Tensor y = conv2d_forward(x.data, w.data, b.defined() ? b.data() : Tensor(), p);
  return Variable::make_result(
      y, {x.input, w.input, b},
      [tx = x.data, tw = w.data, cast_x = x.cast, cast_w = w.cast, has_bias = b.defined(),
       need_dx = x.input.requires_grad(), p](const Tensor& dy) -> std::vector<Tensor> {
        // dx rounded as the tensor op stores it where this node cast x (AutocastCast::gradient's bits)
        Conv2dGrads g = conv2d_backward(tx, tw, dy, has_bias, p, need_dx, cast_x ? tx.dtype() : DType::Float32);
        return {cast_x ? g.dx : AutocastCast::gradient(g.dx, tx.dtype(), false),
                AutocastCast::gradient(g.dw, tw.dtype(), cast_w), g.db};
      },
      "Conv2dBackward");
}

// conv_transpose2d: the adjoint of conv2d's input; its gradients are conv2d forward (dx) and
// conv2d's weight gradient with input and output swapped (dw) (tensor/ops_conv_transpose.cpp)
Variable conv_transpose2d(const Variable& x, const Variable& w, const Variable& b, const ConvTranspose2dParams& p) {
  Tensor y = conv_transpose2d_forward(x.data(), w.data(), b.defined() ? b.data() : Tensor(), p);
  return Variable::make_result(
      y, {x, w, b},
      [tx = x.data(), tw = w.data(), has_bias = b.defined(), need_dx = x.requires_grad(),
       p](const Tensor& dy) -> std::vector<Tensor> {
        Conv2dGrads g = conv_transpose2d_backward(tx, tw, dy, has_bias, p, need_dx);
        return {g.dx, g.dw, g.db};
      },
      "ConvTranspose2dBackward");
}

// max_pool2d: the gradient goes to each window's argmax
Variable max_pool2d(const Variable& x, const Pool2dParams& p) {
  MaxPool2dResult r = max_pool2d_forward(x.data(), p);
  return Variable::make_result(
      r.out, {x},
      [idx = r.indices, in = x.shape(), p](const Tensor& dy) -> std::vector<Tensor> {
        return {max_pool2d_backward(dy, idx, in, p)};
      },
      "MaxPool2dBackward");
}

// avg_pool2d: each window's gradient is spread evenly over it
Variable avg_pool2d(const Variable& x, const Pool2dParams& p) {
  return Variable::make_result(
      avg_pool2d_forward(x.data(), p), {x},
      [in = x.shape(), p](const Tensor& dy) -> std::vector<Tensor> { return {avg_pool2d_backward(dy, in, p)}; },
      "AvgPool2dBackward");
}

Variable adaptive_avg_pool2d(const Variable& x, int64_t out_h, int64_t out_w) {
  return Variable::make_result(
      adaptive_avg_pool2d_forward(x.data(), out_h, out_w), {x},
      [in = x.shape()](const Tensor& dy) -> std::vector<Tensor> { return {adaptive_avg_pool2d_backward(dy, in)}; },
      "AdaptiveAvgPool2dBackward");
}

namespace {
// The batch's mean and invstd over (N, *) of x (N, C, *); running_mean / running_var, when
// defined, move towards the batch's mean and unbiased variance by `momentum`.
BatchNormStats batch_stats_updating_running(const Variable& x, Tensor& running_mean, Tensor& running_var,
                                            double momentum, double eps) {
  const int64_t count = x.numel() / std::max<int64_t>(x.size(1), 1);
  if (count <= 1)
    throw std::invalid_argument("batch_norm: expected more than 1 value per channel when training, got input " +
                                x.data().desc());
  BatchNormStats s = batch_norm_stats(x.data(), eps);
  if (running_mean.defined()) {
    NoGradGuard no_grad;
    // biased var = 1/invstd^2 - eps; running stats use the unbiased one
    Tensor var_b = sub(div(ones_like(s.invstd), mul(s.invstd, s.invstd)), full_like(s.invstd, eps));
    Tensor var_u = mul(var_b, static_cast<double>(count) / static_cast<double>(count - 1));
    batch_norm_update_running_stats_(running_mean, running_var, s.mean, var_u, momentum);
  }
  return s;
}

// The mean and invstd batch_norm normalises with: the batch's (running stats updated), or in eval
// the running ones
BatchNormStats normalising_stats(const Variable& x, Tensor& running_mean, Tensor& running_var, bool training,
                                 double momentum, double eps, const char* op) {
  if (x.dim() < 2) throw std::invalid_argument(std::string(op) + ": expected input (N, C, *), got " + x.data().desc());
  if (training) return batch_stats_updating_running(x, running_mean, running_var, momentum, eps);
  if (!running_mean.defined() || !running_var.defined())
    throw std::invalid_argument(std::string(op) + ": eval mode needs running_mean and running_var");
  return {running_mean, rsqrt(add(running_var, eps))};
}

// dy -> {dx, grad_weight, grad_bias} of batch_norm (relu: of batch_norm followed by a ReLU, whose
// mask the backward pieces rebuild from x, w and b: the node keeps no output)
std::vector<Tensor> batch_norm_grads(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                                     const Tensor& w, const Tensor& b, bool training, bool relu) {
  BatchNormReduce r = batch_norm_backward_reduce(dy, x, mean, invstd, w, b, relu);
  Tensor dx;
  if (training) {
    const int64_t count = x.numel() / std::max<int64_t>(x.size(1), 1);
    dx = batch_norm_backward_elemt(dy, x, mean, invstd, w, r.sum_dy, r.sum_dy_xmu, count, b, relu);
  } else {  // dx = dy * weight * invstd, per channel
    Tensor scale = w.defined() ? mul(w, invstd) : invstd;
    Shape bshape(x.dim(), 1);
    bshape[1] = x.size(1);
    const Tensor g = relu ? relu_backward(batch_norm_elemt(x, mean, invstd, w, b, true), dy) : dy;
    dx = mul(g, scale.reshape(bshape));
  }
  return {dx, r.grad_weight, r.grad_bias};
}
}  // namespace

// batch_norm, training: normalise with the batch's mean and biased variance; backward through
// the statistics (PyTorch's formula). Eval: normalise with running stats, which are constants.
Variable batch_norm(const Variable& x, Tensor running_mean, Tensor running_var, const Variable& weight,
                    const Variable& bias, bool training, double momentum, double eps, bool relu) {
  const BatchNormStats s = normalising_stats(x, running_mean, running_var, training, momentum, eps, "batch_norm");
  const Tensor w = weight.defined() ? weight.data() : Tensor();
  const Tensor b = bias.defined() ? bias.data() : Tensor();
  Tensor y = batch_norm_elemt(x.data(), s.mean, s.invstd, w, b, relu);
  return Variable::make_result(
      y, {x, weight, bias},
      [tx = x.data(), s, w, b, training, relu](const Tensor& dy) {
        return batch_norm_grads(dy, tx, s.mean, s.invstd, w, b, training, relu);
      },
      relu ? "BatchNormReluBackward" : "BatchNormBackward");
}

// relu(batch_norm(x) + residual): one forward pass; backward, the ReLU's mask gives the residual's
// gradient dz, and batch_norm's backward takes dz (the passes of the three ops, less the add's)
Variable batch_norm_add_relu(const Variable& x, const Variable& residual, Tensor running_mean, Tensor running_var,
                             const Variable& weight, const Variable& bias, bool training, double momentum, double eps) {
  const BatchNormStats s =
      normalising_stats(x, running_mean, running_var, training, momentum, eps, "batch_norm_add_relu");
  const Tensor w = weight.defined() ? weight.data() : Tensor();
  const Tensor b = bias.defined() ? bias.data() : Tensor();
  Tensor y = batch_norm_add_relu_elemt(x.data(), residual.data(), s.mean, s.invstd, w, b);
  return Variable::make_result(
      y, {x, weight, bias, residual},
      [tx = x.data(), s, w, training, y](const Tensor& dy) {
        const Tensor dz = relu_backward(y, dy);
        std::vector<Tensor> g = batch_norm_grads(dz, tx, s.mean, s.invstd, w, Tensor(), training, false);
        g.push_back(dz);
        return g;
      },
      "BatchNormAddReluBackward");
}

// max_pool2d(relu(batch_norm(x)), 2) in training: one node, one pass each way at full resolution
// (tensor/ops_nn.h); other pools, eval mode and CUDA run the composed ops. The node keeps x, the
// winners' places (with the ReLU's mask) and x at them, not its output: under autocast the next
// layer keeps a 16-bit copy of that output, and the float32 one is freed.
Variable batch_norm_relu_max_pool2d(const Variable& x, Tensor running_mean, Tensor running_var, const Variable& weight,
                                    const Variable& bias, bool training, double momentum, double eps,
                                    const Pool2dParams& p) {
  const auto two = [](int64_t stride) { return stride == 2 || stride == 0; };  // 0: the kernel's 2
  const bool fusable = training && x.defined() && x.dim() == 4 && x.device().is_cpu() && x.size(2) >= 2 &&
                       x.size(3) >= 2 && p.kernel_h == 2 && p.kernel_w == 2 && two(p.stride_h) && two(p.stride_w) &&
                       p.pad_h == 0 && p.pad_w == 0 && !p.ceil_mode;
  if (!fusable)
    return max_pool2d(batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps, true), p);
  const Tensor w = weight.defined() ? weight.data() : Tensor();
  const Tensor b = bias.defined() ? bias.data() : Tensor();
  const BatchNormStats s = batch_stats_updating_running(x, running_mean, running_var, momentum, eps);
  const BatchNormReluPoolResult r = batch_norm_relu_max_pool2d_forward(x.data(), s.mean, s.invstd, w, b);
  return Variable::make_result(
      r.out, {x, weight, bias},
      [tx = x.data(), saved = r.saved, s, w](const Tensor& dy) -> std::vector<Tensor> {
        BatchNormReluPoolGrads g = batch_norm_relu_max_pool2d_backward(dy, tx, saved, s.mean, s.invstd, w);
        return {g.dx, g.grad_weight, g.grad_bias};
      },
      "BatchNormReluMaxPool2dBackward");
}

// layer_norm over the trailing normalized_shape dims
Variable layer_norm(const Variable& x, const Shape& normalized_shape, const Variable& weight, const Variable& bias,
                    double eps) {
  const Tensor w = weight.defined() ? weight.data() : Tensor();
  LayerNormResult r = layer_norm_forward(x.data(), normalized_shape, w, bias.defined() ? bias.data() : Tensor(), eps);
  return Variable::make_result(
      r.out, {x, weight, bias},
      [tx = x.data(), mean = r.mean, invstd = r.invstd, normalized_shape, w](const Tensor& dy) -> std::vector<Tensor> {
        LayerNormGrads g = layer_norm_backward(dy, tx, mean, invstd, normalized_shape, w);
        return {g.dx, g.dweight, g.dbias};
      },
      "LayerNormBackward");
}

// group_norm: on the CPU one node over the fused kernels (tensor/ops_nn.h's group_norm_forward /
// _backward); on CUDA layer_norm of x viewed as (N, G, C / G * prod(*)) (its fused kernel and
// backward), then the per-channel affine by broadcasting ops, whose backward gives dweight and dbias
namespace {
// group_norm's checks of its arguments (the CPU op checks them again, the CUDA composition not)
void check_group_norm(const Variable& x, int64_t num_groups, const Variable& weight, const Variable& bias) {
  if (x.dim() < 2) throw std::invalid_argument("group_norm: expected input (N, C, *), got " + x.data().desc());
  const int64_t C = x.size(1);
  if (num_groups <= 0 || C % num_groups != 0)
    throw std::invalid_argument("group_norm: num_groups = " + std::to_string(num_groups) +
                                " must be positive and divide the number of channels C = " + std::to_string(C) +
                                " of input " + x.data().desc());
  for (const auto& [t, name] : {std::pair{&weight, "weight"}, std::pair{&bias, "bias"}})
    if (t->defined() && (t->dim() != 1 || t->size(0) != C))
      throw std::invalid_argument(std::string("group_norm: expected ") + name + " of shape [" + std::to_string(C) +
                                  "] for input " + x.data().desc() + ", got " + t->data().desc());
}

// The CPU node of group_norm (relu: of group_norm_relu, whose backward masks dy where the output
// is <= 0, as relu's backward does: the two ops' bits; the mask is rebuilt from x, w and b, so the
// node keeps no output)
Variable group_norm_cpu(const Variable& x, int64_t num_groups, const Variable& weight, const Variable& bias, double eps,
                        bool relu) {
  const Tensor w = weight.defined() ? weight.data() : Tensor();
  const Tensor b = bias.defined() ? bias.data() : Tensor();
  GroupNormResult r = group_norm_forward(x.data(), num_groups, w, b, eps, relu);
  return Variable::make_result(
      r.out, {x, weight, bias},
      [tx = x.data(), mean = r.mean, rstd = r.rstd, num_groups, w, b, relu](const Tensor& dy) -> std::vector<Tensor> {
        GroupNormGrads g = group_norm_backward(dy, tx, mean, rstd, num_groups, w, b, relu);
        return {g.dx, g.dweight, g.dbias};
      },
      relu ? "GroupNormReluBackward" : "GroupNormBackward");
}
}  // namespace

Variable group_norm(const Variable& x, int64_t num_groups, const Variable& weight, const Variable& bias, double eps) {
  check_group_norm(x, num_groups, weight, bias);
  if (x.device().is_cpu()) return group_norm_cpu(x, num_groups, weight, bias, eps, false);
  const int64_t N = x.size(0), C = x.size(1);
  int64_t group_size = C / num_groups;
  for (int64_t d = 2; d < x.dim(); ++d) group_size *= x.size(d);
  Variable y = reshape(layer_norm(reshape(x, {N, num_groups, group_size}), {group_size}, {}, {}, eps), x.shape());
  Shape channel_shape(x.dim(), 1);
  channel_shape[1] = C;
  if (weight.defined()) y = mul(y, reshape(weight, channel_shape));
  if (bias.defined()) y = add(y, reshape(bias, channel_shape));
  return y;
}

Variable group_norm_relu(const Variable& x, int64_t num_groups, const Variable& weight, const Variable& bias,
                         double eps) {
  check_group_norm(x, num_groups, weight, bias);
  if (x.device().is_cpu()) return group_norm_cpu(x, num_groups, weight, bias, eps, true);
  return relu(group_norm(x, num_groups, weight, bias, eps));
}

// dropout: y = x * mask, dx = dy * mask (mask holds 0 or 1/(1-p))
Variable dropout(const Variable& x, double p, bool training, RandomKey key) {
  if (p < 0 || p >= 1) throw std::invalid_argument("dropout: p must be in [0, 1), got " + std::to_string(p));
  if (!training || p == 0) return x;
  Tensor mask = dropout_mask(x.shape(), p, key, x.dtype(), x.device());
  return Variable::make_result(
      mul(x.data(), mask), {x}, [mask](const Tensor& dy) -> std::vector<Tensor> { return {mul(dy, mask)}; },
      "DropoutBackward");
}

Variable dropout(const Variable& x, double p, bool training) {
  if (!training || p == 0) return dropout(x, p, training, RandomKey{});
  return dropout(x, p, training, next_random_key());
}

// dropout2d: one mask value per (n, c) plane, (N, C, 1, 1), broadcast by mul (whose backward is
// dy * mask)
Variable dropout2d(const Variable& x, double p, bool training, RandomKey key) {
  if (p < 0 || p >= 1) throw std::invalid_argument("dropout2d: p must be in [0, 1), got " + std::to_string(p));
  if (x.dim() != 4) throw std::invalid_argument("dropout2d: expected input (N, C, H, W), got " + x.data().desc());
  if (!training || p == 0) return x;
  return mul(x, Variable(dropout_mask({x.size(0), x.size(1), 1, 1}, p, key, x.dtype(), x.device())));
}

Variable dropout2d(const Variable& x, double p, bool training) {
  if (!training || p == 0) return dropout2d(x, p, training, RandomKey{});
  return dropout2d(x, p, training, next_random_key());
}

// embedding: rows of weight gathered by index; composed from index_select and reshape
Variable embedding(const Tensor& indices, const Variable& weight) {
  if (indices.dtype() != DType::Int64)
    throw std::invalid_argument("embedding: indices must be int64, got " + indices.desc());
  Shape out = indices.shape();
  out.push_back(weight.size(1));
  return reshape(index_select(weight, 0, indices.reshape({-1})), out);
}

}  // namespace minidl
