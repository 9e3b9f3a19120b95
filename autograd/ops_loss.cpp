// autograd/ops_loss.cpp — losses, as torch.nn.functional's. cross_entropy with the default
// options is one fused op (forward and backward below); every other loss, and cross_entropy with
// class weights / ignore_index / another reduction, is composed from differentiable primitives
// (log_softmax, mul, sum, softplus, abs, ...), so it needs no backward of its own.
#include <cmath>
#include <limits>

#include "minidl/autograd/ops.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/ops.h"

namespace minidl {

namespace {

Variable reduce(const Variable& loss, Reduction r) {
  switch (r) {
    case Reduction::None:
      return loss;
    case Reduction::Sum:
      return sum(loss);
    case Reduction::Mean:
      return mean(loss);
  }
  return loss;
}

// (N, C, d1, ...) -> (N d1 ..., C) with the class dim last, and target (N, d1, ...) -> (N d1 ...).
struct Flattened {
  Variable input;  // (M, C)
  Tensor target;  // (M) int64, on the CPU
  Shape rows;  // target's shape, for reduction None
};
Flattened flatten_classes(const Variable& input, const Tensor& target, const char* op) {
  bool ok = input.dim() >= 2 && target.dim() == input.dim() - 1 && target.dtype() == DType::Int64 &&
            target.size(0) == input.size(0);
  for (int64_t d = 2; ok && d < input.dim(); ++d) ok = target.size(d - 1) == input.size(d);
  if (!ok)
    throw std::invalid_argument(std::string(op) + ": expected input (N, C) or (N, C, d1, ...) and an int64 target " +
                                "(N) or (N, d1, ...), got " + input.data().desc() + " and " + target.desc());
  Flattened f{input, target.cpu().contiguous().reshape({-1}), target.shape()};
  if (input.dim() > 2) {
    Shape perm{0};
    for (int64_t d = 2; d < input.dim(); ++d) perm.push_back(d);
    perm.push_back(1);
    f.input = reshape(permute(input, perm), {-1, input.size(1)});
  }
  return f;
}

// Per-row weight of each target (0 where ignored) and one-hot rows scaled by it, checking ranges.
struct TargetWeights {
  Tensor scaled_one_hot;  // (M, C): w[t_i] at (i, t_i), on the input's device and dtype
  Tensor counted;  // (M, 1): 1 where the target is not ignored, else 0
  double total = 0;  // sum of row_weight, the Mean denominator
};
TargetWeights target_weights(const Variable& input, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                             const char* op) {
  const int64_t M = input.size(0), C = input.size(1);
  std::vector<double> w(static_cast<size_t>(C), 1.0);
  if (weight.defined()) {
    if (weight.dim() != 1 || weight.size(0) != C || !weight.is_floating_point())
      throw std::invalid_argument(std::string(op) + ": weight must be a floating (C) = (" + std::to_string(C) +
                                  ") tensor, got " + weight.desc());
    w = weight.cpu().to(DType::Float64).contiguous().to_vector<double>();
  }
  const auto t = target.to_vector<int64_t>();
  std::vector<double> one_hot(static_cast<size_t>(M * C), 0.0), counted(static_cast<size_t>(M), 0.0);
  TargetWeights out;
  for (int64_t i = 0; i < M; ++i) {
    if (t[i] == ignore_index) continue;
    if (t[i] < 0 || t[i] >= C)
      throw std::invalid_argument(std::string(op) + ": target " + std::to_string(t[i]) + " at position " +
                                  std::to_string(i) + " is out of range for " + std::to_string(C) + " classes");
    counted[i] = 1.0;
    one_hot[i * C + t[i]] = w[t[i]];
    out.total += w[t[i]];
  }
  out.scaled_one_hot = from_vector(one_hot, {M, C}).to(input.dtype()).to(input.device());
  out.counted = from_vector(counted, {M, 1}).to(input.dtype()).to(input.device());
  return out;
}

}  // namespace

// cross_entropy(logits (N, C), target (N)) with mean reduction:
// dlogits = (softmax - smoothed one-hot) * dloss / N
Variable cross_entropy(const Variable& logits, const Tensor& target, double label_smoothing) {
  Tensor loss = cross_entropy_forward(logits.data(), target, label_smoothing);
  return Variable::make_result(
      loss, {logits},
      [tl = logits.data(), target, label_smoothing](const Tensor& dy) -> std::vector<Tensor> {
        return {cross_entropy_backward(tl, target, label_smoothing, dy)};
      },
      "CrossEntropyBackward");
}

// PyTorch's definition: (1 - eps) nll(log_softmax(x)) + eps / C * smooth, where smooth_i =
// -sum_c w_c log_softmax(x)_ic (0 where ignored), reduced like nll (Mean: by the same weight sum).
Variable cross_entropy(const Variable& logits, const Tensor& target, const CrossEntropyOptions& o) {
  constexpr const char* op = "cross_entropy";
  if (!(o.label_smoothing >= 0.0 && o.label_smoothing <= 1.0))
    throw std::invalid_argument("cross_entropy: label_smoothing must be in [0, 1], got " +
                                std::to_string(o.label_smoothing));
  const Flattened f = flatten_classes(logits, target, op);
  const int64_t C = f.input.size(1);
  const TargetWeights tw = target_weights(f.input, f.target, o.weight, o.ignore_index, op);
  Variable lp = log_softmax(f.input, 1);
  Variable nll = neg(sum(mul(lp, Variable(tw.scaled_one_hot)), {1}));  // (M)
  if (o.label_smoothing > 0.0) {
    const Tensor class_w = o.weight.defined() ? o.weight.to(lp.dtype()).to(lp.device()).reshape({1, C})
                                              : ones({1, C}, lp.dtype(), lp.device());
    Variable smooth = neg(sum(mul(lp, Variable(mul(tw.counted, class_w))), {1}));  // (M)
    nll = add(mul(nll, 1.0 - o.label_smoothing), mul(smooth, o.label_smoothing / static_cast<double>(C)));
  }
  switch (o.reduction) {
    case Reduction::None:
      return reshape(nll, f.rows);
    case Reduction::Sum:
      return sum(nll);
    case Reduction::Mean:
      return mul(sum(nll), 1.0 / tw.total);
  }
  return nll;
}

// nll_loss_i = -w[t_i] log_probs[i, t_i] (0 where ignored) = -sum_c log_probs * (w-scaled one-hot)
Variable nll_loss(const Variable& log_probs, const Tensor& target, const NLLLossOptions& o) {
  constexpr const char* op = "nll_loss";
  const Flattened f = flatten_classes(log_probs, target, op);
  const TargetWeights tw = target_weights(f.input, f.target, o.weight, o.ignore_index, op);
  Variable loss = neg(sum(mul(f.input, Variable(tw.scaled_one_hot)), {1}));  // (M)
  switch (o.reduction) {
    case Reduction::None:
      return reshape(loss, f.rows);
    case Reduction::Sum:
      return sum(loss);
    case Reduction::Mean:
      return mul(sum(loss), 1.0 / tw.total);
  }
  return loss;
}

// (1 - t) x + (1 + (pos_weight - 1) t) softplus(-x), times weight; softplus without a threshold
// is log(1 + e^-x) evaluated stably for any x
Variable binary_cross_entropy_with_logits(const Variable& logits, const Variable& target,
                                          const BCEWithLogitsOptions& o) {
  if (logits.shape() != target.shape())
    throw std::invalid_argument("binary_cross_entropy_with_logits: input " + logits.data().desc() + " and target " +
                                target.data().desc() + " must have the same shape");
  const double inf = std::numeric_limits<double>::infinity();
  Variable sp = softplus(neg(logits), 1.0, inf);  // -log sigmoid(x)
  Variable log_weight = Variable(ones({}, logits.dtype(), logits.device()));
  if (o.pos_weight.defined()) {
    if (logits.dim() == 0 || o.pos_weight.dim() != 1 || o.pos_weight.size(0) != logits.size(-1 + logits.dim()))
      throw std::invalid_argument("binary_cross_entropy_with_logits: pos_weight must be (C) for input (..., C), got " +
                                  o.pos_weight.desc() + " for " + logits.data().desc());
    Variable pw_minus_1(add(o.pos_weight.to(logits.dtype()).to(logits.device()), -1.0));
    log_weight = add(mul(target, pw_minus_1), 1.0);
  }
  Variable loss = add(mul(add(neg(target), 1.0), logits), mul(log_weight, sp));
  if (o.weight.defined()) {
    broadcast_shapes(loss.shape(), o.weight.shape(), "binary_cross_entropy_with_logits weight");
    loss = mul(loss, Variable(o.weight.to(logits.dtype()).to(logits.device())));
  }
  return reduce(loss, o.reduction);
}

namespace {
void check_same_shape(const Variable& input, const Variable& target, const char* op) {
  if (input.shape() != target.shape())
    throw std::invalid_argument(std::string(op) + ": input " + input.data().desc() + " and target " +
                                target.data().desc() + " must have the same shape");
}
}  // namespace

// mean/sum/none of (input - target)^2
Variable mse_loss(const Variable& input, const Variable& target, Reduction reduction) {
  check_same_shape(input, target, "mse_loss");
  Variable d = sub(input, target);
  return reduce(mul(d, d), reduction);
}

// |input - target|
Variable l1_loss(const Variable& input, const Variable& target, Reduction reduction) {
  check_same_shape(input, target, "l1_loss");
  return reduce(abs(sub(input, target)), reduction);
}

// smooth L1 of d = input - target (forward and backward: the SmoothL1 functors)
Variable smooth_l1_loss(const Variable& input, const Variable& target, Reduction reduction, double beta) {
  check_same_shape(input, target, "smooth_l1_loss");
  if (!(beta >= 0.0)) throw std::invalid_argument("smooth_l1_loss: beta must be >= 0, got " + std::to_string(beta));
  if (beta == 0.0) return l1_loss(input, target, reduction);
  Variable d = sub(input, target);
  Variable loss = Variable::make_result(
      smooth_l1(d.data(), beta), {d},
      [t = d.data(), beta](const Tensor& dy) -> std::vector<Tensor> { return {smooth_l1_backward(t, dy, beta)}; },
      "SmoothL1Backward");
  return reduce(loss, reduction);
}

}  // namespace minidl
