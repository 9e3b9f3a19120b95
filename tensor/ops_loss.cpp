// tensor/ops_loss.cpp — cross_entropy forward/backward (mean reduction, label smoothing as
// torch.nn.functional.cross_entropy) and the dropout mask (declared in tensor/ops_nn.h).
// Shapes and targets are checked here; the loops live in kernels/cpu/cross_entropy.h and
// kernels/cpu/dropout.h.
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "minidl/kernels/cpu/cross_entropy.h"
#include "minidl/kernels/cpu/dropout.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/ops_nn.h"
#include "minidl/tensor/ops_cuda.h"
#include "minidl/tensor/ops_nn_checks.h"

namespace minidl {

// ---- dropout ----

Tensor dropout_mask(const Shape& shape, double p, RandomKey key, DType dtype, Device device) {
  if (device.is_cuda()) return cuda_ops::dropout_mask(shape, p, key, dtype, device);
  return dropout_mask(shape, p, key, dtype);
}

Tensor dropout_mask(const Shape& shape, double p, RandomKey key, DType dtype) {
  constexpr const char* op = "dropout_mask";
  if (!(p >= 0.0 && p < 1.0))
    throw std::invalid_argument(std::string(op) + ": p must be in [0, 1), got " + std::to_string(p) + " for shape " +
                                shape_str(shape));
  Tensor out(shape, dtype);
  dispatch_floating(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::dropout_mask(out.data<T>(), out.numel(), p, key.seed, key.stream);
  });
  return out;
}

// ---- cross entropy ----

namespace {

// logits (N, C) float on cpu, target int64 (N) with values in [0, C), 0 <= eps <= 1.
void check_cross_entropy(const Tensor& logits, const Tensor& target, double eps, const char* op) {
  nn_checks::require_float_cpu(logits, op, "logits");
  if (logits.dim() != 2)
    throw std::invalid_argument(std::string(op) + ": expected logits (N, C), got " + logits.desc());
  nn_checks::require_defined(target, op, "target");
  if (target.dtype() != DType::Int64 || target.dim() != 1 || target.size(0) != logits.size(0) ||
      !target.device().is_cpu())
    throw std::invalid_argument(std::string(op) + ": expected target int64[" + std::to_string(logits.size(0)) +
                                "] on cpu for logits " + logits.desc() + ", got " + target.desc());
  if (!(eps >= 0.0 && eps <= 1.0))
    throw std::invalid_argument(std::string(op) + ": label_smoothing must be in [0, 1], got " + std::to_string(eps));
}

// The targets as a contiguous int64 tensor, each checked against C.
Tensor checked_targets(const Tensor& target, int64_t C, const Tensor& logits, const char* op) {
  Tensor t = target.contiguous();
  const int64_t* p = t.data<int64_t>();
  for (int64_t n = 0; n < t.numel(); ++n)
    if (p[n] < 0 || p[n] >= C)
      throw std::invalid_argument(std::string(op) + ": target value " + std::to_string(p[n]) + " at index " +
                                  std::to_string(n) + " is out of range for C = " + std::to_string(C) +
                                  " classes (logits " + logits.desc() + ")");
  return t;
}

}  // namespace

Tensor cross_entropy_forward(const Tensor& logits_in, const Tensor& target_in, double label_smoothing) {
  constexpr const char* op = "cross_entropy";
  if (cuda_ops::on_cuda({&logits_in, &target_in}, op))
    return cuda_ops::cross_entropy_forward(logits_in, target_in, label_smoothing);
  check_cross_entropy(logits_in, target_in, label_smoothing, op);
  const Tensor logits = logits_in.contiguous();
  const int64_t N = logits.size(0), C = logits.size(1);
  const Tensor target = checked_targets(target_in, C, logits, op);
  std::vector<double> row_loss(static_cast<size_t>(N));
  dispatch_floating(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::cross_entropy_forward_rows(logits.data<T>(), target.data<int64_t>(), N, C, label_smoothing,
                                             row_loss.data());
  });
  double total = 0;  // rows summed in order: the same bits for any thread count
  for (double l : row_loss) total += l;
  return scalar_tensor(N > 0 ? total / static_cast<double>(N) : NAN, logits.dtype());
}

Tensor cross_entropy_backward(const Tensor& logits_in, const Tensor& target_in, double label_smoothing,
                              const Tensor& grad_loss) {
  constexpr const char* op = "cross_entropy_backward";
  if (cuda_ops::on_cuda({&logits_in, &target_in}, op))
    return cuda_ops::cross_entropy_backward(logits_in, target_in, label_smoothing, grad_loss);
  check_cross_entropy(logits_in, target_in, label_smoothing, op);
  nn_checks::require_float_cpu(grad_loss, op, "grad_loss");
  if (grad_loss.numel() != 1)
    throw std::invalid_argument(std::string(op) + ": expected a one-element grad_loss, got " + grad_loss.desc());
  const Tensor logits = logits_in.contiguous();
  const int64_t N = logits.size(0), C = logits.size(1);
  const Tensor target = checked_targets(target_in, C, logits, op);
  Tensor dlogits(logits.shape(), logits.dtype());
  if (N == 0) return dlogits;
  const double g = grad_loss.item();
  dispatch_floating(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::cross_entropy_backward(logits.data<T>(), target.data<int64_t>(), N, C, label_smoothing, g,
                                         dlogits.data<T>());
  });
  return dlogits;
}

}  // namespace minidl
