// tensor/ops_loss.cpp — cross_entropy forward/backward (mean reduction, label smoothing as
// torch.nn.functional.cross_entropy) and the dropout mask (declared in tensor/ops_nn.h).
// Shapes are checked here, once; then the loops run on the CPU (kernels/cpu/cross_entropy.h,
// kernels/cpu/dropout.h) or on CUDA (kernels/cuda/softmax.cu, elementwise.cu: the same Philox
// stream, so a mask is the same on both).
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "minidl/kernels/cpu/cross_entropy.h"
#include "minidl/kernels/cpu/dropout.h"
#include "minidl/kernels/cuda_api.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/ops_nn.h"
#include "minidl/tensor/cuda_dispatch.h"
#include "minidl/tensor/ops_nn_checks.h"

namespace minidl {

// ---- dropout ----

Tensor dropout_mask(const Shape& shape, double p, RandomKey key, DType dtype) {
  return dropout_mask(shape, p, key, dtype, Device::cpu());
}

Tensor dropout_mask(const Shape& shape, double p, RandomKey key, DType dtype, Device device) {
  constexpr const char* op = "dropout_mask";
  if (!(p >= 0.0 && p < 1.0))
    throw std::invalid_argument(std::string(op) + ": p must be in [0, 1), got " + std::to_string(p) + " for shape " +
                                shape_str(shape));
  dispatch_floating(dtype, op, [](auto) {});  // float32 / float64 only
  Tensor out(shape, dtype, device);
  if (device.is_cuda()) {
    kernels::cuda::set_device(device.index);
    kernels::cuda::dropout_mask(cuda_dispatch::elem(dtype), out.raw_data(), out.numel(), p, key.seed, key.stream);
    return out;
  }
  dispatch_floating(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::dropout_mask(out.data<T>(), out.numel(), p, key.seed, key.stream);
  });
  return out;
}

// ---- cross entropy ----

namespace {

// logits (N, C) float, target int64 (N), 0 <= eps <= 1 (the target values: checked_targets on
// the CPU; on CUDA the kernel checks them on the device, kernels/cuda_ops.h).
void check_cross_entropy(const Tensor& logits, const Tensor& target, double eps, const char* op) {
  nn_checks::require_float(logits, op, "logits");
  if (logits.dim() != 2)
    throw std::invalid_argument(std::string(op) + ": expected logits (N, C), got " + logits.desc());
  nn_checks::require_defined(target, op, "target");
  if (target.dtype() != DType::Int64 || target.dim() != 1 || target.size(0) != logits.size(0))
    throw std::invalid_argument(std::string(op) + ": expected target int64[" + std::to_string(logits.size(0)) +
                                "] on " + logits.device().str() + " for logits " + logits.desc() + ", got " +
                                target.desc());
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
  const bool cuda = cuda_dispatch::on_cuda({&logits_in, &target_in}, op);
  check_cross_entropy(logits_in, target_in, label_smoothing, op);
  const Tensor logits = logits_in.contiguous();
  const int64_t N = logits.size(0), C = logits.size(1);
  if (cuda) {  // no host copy of the targets in the training step
    const Tensor target = target_in.contiguous();
    Tensor loss({}, logits.dtype(), logits.device());
    cuda_dispatch::use_device(logits);
    kernels::cuda::cross_entropy_forward(cuda_dispatch::elem(logits.dtype()), logits.raw_data(), target.data<int64_t>(),
                                         N, C, label_smoothing, loss.raw_data());
    return loss;
  }
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
  const bool cuda = cuda_dispatch::on_cuda({&logits_in, &target_in}, op);
  check_cross_entropy(logits_in, target_in, label_smoothing, op);
  nn_checks::require_float(grad_loss, op, "grad_loss");  // on any device: one value
  if (grad_loss.numel() != 1)
    throw std::invalid_argument(std::string(op) + ": expected a one-element grad_loss, got " + grad_loss.desc());
  const Tensor logits = logits_in.contiguous();
  const int64_t N = logits.size(0), C = logits.size(1);
  if (cuda) {
    const Tensor target = target_in.contiguous();
    // the upstream gradient stays on the device (a CPU scalar is copied there; no item() sync)
    const Tensor g = grad_loss.to(logits.device()).to(logits.dtype()).contiguous();
    Tensor d(logits.shape(), logits.dtype(), logits.device());
    cuda_dispatch::use_device(logits);
    kernels::cuda::cross_entropy_backward(cuda_dispatch::elem(logits.dtype()), logits.raw_data(),
                                          target.data<int64_t>(), N, C, label_smoothing, g.raw_data(), d.raw_data());
    return d;
  }
  const Tensor target = checked_targets(target_in, C, logits, op);
  Tensor dlogits(logits.shape(), logits.dtype());
  if (N == 0) return dlogits;
  const Tensor g_host = grad_loss.to(DType::Float64).cpu();  // a CPU scalar is read in place, not item()
  const double g = *g_host.data<double>();
  dispatch_floating(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::cross_entropy_backward(logits.data<T>(), target.data<int64_t>(), N, C, label_smoothing, g,
                                         dlogits.data<T>());
  });
  return dlogits;
}

}  // namespace minidl
