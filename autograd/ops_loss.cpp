// autograd/ops_loss.cpp — losses: cross_entropy (fused, with label smoothing), nll_loss and
// mse_loss (composed from primitives, so they need no backward of their own).
#include "autograd/ops.h"
#include "tensor/creation.h"
#include "tensor/ops.h"

namespace minidl {

// cross_entropy(logits (N, C), target (N)) with mean reduction:
// dlogits = (softmax - smoothed one-hot) * dloss / N
Variable cross_entropy(const Variable& logits, const Tensor& target, double label_smoothing) {
  Tensor loss = cross_entropy_forward(logits.data(), target, label_smoothing);
  return Variable::make_result(loss, {logits},
                               [tl = logits.data(), target, label_smoothing](const Tensor& dy) -> std::vector<Tensor> {
                                 return {cross_entropy_backward(tl, target, label_smoothing, dy)};
                               },
                               "CrossEntropyBackward");
}

// nll_loss = -mean_i log_probs[i, target[i]] = -sum(log_probs * one_hot) / N
Variable nll_loss(const Variable& log_probs, const Tensor& target) {
  if (log_probs.dim() != 2 || target.dim() != 1 || target.size(0) != log_probs.size(0) || target.dtype() != DType::Int64)
    throw std::invalid_argument("nll_loss: expected log_probs (N, C) and int64 target (N), got " +
                                log_probs.data().desc() + " and " + target.desc());
  const int64_t C = log_probs.size(1);
  const auto t = target.to_vector<int64_t>();
  for (size_t i = 0; i < t.size(); ++i)
    if (t[i] < 0 || t[i] >= C)
      throw std::invalid_argument("nll_loss: target " + std::to_string(t[i]) + " at position " + std::to_string(i) +
                                  " is out of range for " + std::to_string(C) + " classes");
  Tensor classes = arange(C).to(log_probs.device());  // on the input's device, like the one-hot below
  Tensor one_hot = eq(classes.reshape({1, C}).expand(log_probs.shape()), target.reshape({-1, 1}).expand(log_probs.shape()))
                       .to(log_probs.dtype());
  return mul(sum(mul(log_probs, Variable(one_hot))), -1.0 / static_cast<double>(log_probs.size(0)));
}

// mse_loss = mean((input - target)^2)
Variable mse_loss(const Variable& input, const Variable& target) {
  if (input.shape() != target.shape())
    throw std::invalid_argument("mse_loss: input " + input.data().desc() + " and target " + target.data().desc() +
                                " must have the same shape");
  Variable d = sub(input, target);
  return mean(mul(d, d));
}

}  // namespace minidl
