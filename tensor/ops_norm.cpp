// tensor/ops_norm.cpp — batch norm pieces (batch_norm_stats / _elemt / _backward_reduce /
// _backward_elemt, as PyTorch splits them), batch norm + ReLU + 2x2 max-pool and batch norm +
// residual + ReLU as one op each (CPU), and layer norm forward/backward on Tensors (declared in
// tensor/ops_nn.h). Shapes are checked here, once; then the loops run on the CPU (kernels/cpu/norm.h, kernels/cpu/layer_norm.h) or on CUDA
// (kernels/cuda/norm.cu, the same math in double).
// The batch norm pieces are pure per-rank computations: dist's SyncBatchNorm all-reduces their
// per-channel outputs between calls. Per-channel outputs have x's dtype; sums run in double.
#include <stdexcept>
#include <string>
#include <vector>

#include "minidl/kernels/cpu/batch_norm_add_relu.h"
#include "minidl/kernels/cpu/layer_norm.h"
#include "minidl/kernels/cpu/norm.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/ops.h"
#include "minidl/tensor/ops_nn.h"
#include "minidl/tensor/cuda_dispatch.h"
#include "minidl/tensor/ops_nn_checks.h"
#include "minidl/tensor/ops_util.h"

namespace minidl {

namespace {

using nn_checks::require_channel_vector;
using nn_checks::require_float;
namespace kc = kernels::cuda;

// x (N, C, *) seen as (N, C, S).
struct NCS {
  int64_t N, C, S;
};

NCS batch_norm_layout(const Tensor& x, const char* op) {
  require_float(x, op, "input");
  if (x.dim() < 2)
    throw std::invalid_argument(std::string(op) + ": expected input (N, C) or (N, C, *), got " + x.desc());
  const int64_t N = x.size(0), C = x.size(1);
  return {N, C, C * N == 0 ? 0 : x.numel() / (N * C)};
}

// The values of an optional per-channel tensor as doubles (empty when undefined).
std::vector<double> values_or_empty(const Tensor& t) {
  return t.defined() ? detail::cpu_values(t) : std::vector<double>{};
}
const double* ptr_or_null(const std::vector<double>& v) { return v.empty() ? nullptr : v.data(); }

Tensor from_doubles(const std::vector<double>& v, DType dtype) {
  return from_vector(v, {static_cast<int64_t>(v.size())}, dtype);
}

// CUDA: a checked per-channel (or affine) tensor in x's dtype, contiguous, for the kernel's
// pointer (undefined stays undefined); the CPU reads any floating dtype as doubles.
Tensor for_kernel(const Tensor& t, const Tensor& x) { return t.defined() ? t.to(x.dtype()).contiguous() : Tensor(); }
void* ptr_or_null(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

void require_like_input(const Tensor& dy, const Tensor& x, const char* op) {
  require_float(dy, op, "grad_output");
  if (dy.shape() != x.shape() || dy.dtype() != x.dtype())
    throw std::invalid_argument(std::string(op) + ": expected grad_output shaped and typed like input " + x.desc() +
                                ", got " + dy.desc());
}

}  // namespace

// ---- batch norm ----

BatchNormStats batch_norm_stats(const Tensor& x_in, double eps) {
  constexpr const char* op = "batch_norm_stats";
  const bool cuda = cuda_dispatch::on_cuda({&x_in}, op);
  const NCS d = batch_norm_layout(x_in, op);
  if (d.N * d.S == 0)
    throw std::invalid_argument(std::string(op) + ": expected at least one value per channel, got input " +
                                x_in.desc());
  const Tensor x = x_in.contiguous();
  Tensor mean({d.C}, x.dtype(), x.device()), invstd({d.C}, x.dtype(), x.device());
  if (cuda) {
    cuda_dispatch::use_device(x);
    kc::batch_norm_stats(cuda_dispatch::elem(x.dtype()), x.raw_data(), d.N, d.C, d.S, eps, mean.raw_data(),
                         invstd.raw_data());
    return {mean, invstd};
  }
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::batch_norm_stats(x.data<T>(), d.N, d.C, d.S, eps, mean.data<T>(), invstd.data<T>());
  });
  return {mean, invstd};
}

Tensor batch_norm_elemt(const Tensor& x_in, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                        const Tensor& bias, bool relu) {
  constexpr const char* op = "batch_norm_elemt";
  const bool cuda = cuda_dispatch::on_cuda({&x_in, &mean, &invstd, &weight, &bias}, op);
  const NCS d = batch_norm_layout(x_in, op);
  require_channel_vector(mean, d.C, op, "mean", false);
  require_channel_vector(invstd, d.C, op, "invstd", false);
  require_channel_vector(weight, d.C, op, "weight", true);
  require_channel_vector(bias, d.C, op, "bias", true);
  const Tensor x = x_in.contiguous();
  if (cuda) {
    const Tensor m = for_kernel(mean, x), is = for_kernel(invstd, x), w = for_kernel(weight, x),
                 b = for_kernel(bias, x);
    Tensor y(x.shape(), x.dtype(), x.device());
    cuda_dispatch::use_device(x);
    kc::batch_norm_elemt(cuda_dispatch::elem(x.dtype()), x.raw_data(), d.N, d.C, d.S, m.raw_data(), is.raw_data(),
                         ptr_or_null(w), ptr_or_null(b), y.raw_data());
    return relu ? minidl::relu(y) : y;  // CUDA: the ReLU as its own kernel
  }
  const auto m = detail::cpu_values(mean), is = detail::cpu_values(invstd);
  const auto w = values_or_empty(weight), b = values_or_empty(bias);
  Tensor y(x.shape(), x.dtype());
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::batch_norm_elemt(x.data<T>(), d.N, d.C, d.S, m.data(), is.data(), ptr_or_null(w), ptr_or_null(b),
                                   y.data<T>(), relu);
  });
  return y;
}

Tensor batch_norm_add_relu_elemt(const Tensor& x_in, const Tensor& residual_in, const Tensor& mean,
                                 const Tensor& invstd, const Tensor& weight, const Tensor& bias) {
  constexpr const char* op = "batch_norm_add_relu_elemt";
  const bool cuda = cuda_dispatch::on_cuda({&x_in, &residual_in, &mean, &invstd, &weight, &bias}, op);
  if (residual_in.shape() != x_in.shape() || residual_in.dtype() != x_in.dtype())
    throw std::invalid_argument(std::string(op) + ": expected a residual shaped and typed like input " + x_in.desc() +
                                ", got " + residual_in.desc());
  if (cuda) return minidl::relu(add(batch_norm_elemt(x_in, mean, invstd, weight, bias), residual_in));
  const NCS d = batch_norm_layout(x_in, op);
  require_channel_vector(mean, d.C, op, "mean", false);
  require_channel_vector(invstd, d.C, op, "invstd", false);
  require_channel_vector(weight, d.C, op, "weight", true);
  require_channel_vector(bias, d.C, op, "bias", true);
  const Tensor x = x_in.contiguous(), residual = residual_in.contiguous();
  const auto m = detail::cpu_values(mean), is = detail::cpu_values(invstd);
  const auto w = values_or_empty(weight), b = values_or_empty(bias);
  Tensor y(x.shape(), x.dtype());
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::batch_norm_add_relu_elemt(x.data<T>(), residual.data<T>(), d.N, d.C, d.S, m.data(), is.data(),
                                            ptr_or_null(w), ptr_or_null(b), y.data<T>());
  });
  return y;
}

namespace {
// The checks both backward halves make: dy shaped like x, mean, invstd, weight and bias (both
// optional) one value per channel; returns x's layout.
NCS check_backward(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                   const Tensor& bias, const char* op) {
  const NCS d = batch_norm_layout(x, op);
  require_like_input(dy, x, op);
  require_channel_vector(mean, d.C, op, "mean", false);
  require_channel_vector(invstd, d.C, op, "invstd", false);
  require_channel_vector(weight, d.C, op, "weight", true);
  require_channel_vector(bias, d.C, op, "bias", true);
  return d;
}

// CUDA's dy for the backward pieces: masked by the fused ReLU as its own kernels (the forward's
// output rebuilt by batch_norm_elemt, then relu_backward), or as given
Tensor cuda_masked_dy(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                      const Tensor& bias, bool relu) {
  return relu ? relu_backward(batch_norm_elemt(x, mean, invstd, weight, bias, true), dy) : dy.contiguous();
}
}  // namespace

BatchNormReduce batch_norm_backward_reduce(const Tensor& dy_in, const Tensor& x_in, const Tensor& mean,
                                           const Tensor& invstd, const Tensor& weight, const Tensor& bias, bool relu) {
  constexpr const char* op = "batch_norm_backward_reduce";
  const bool cuda = cuda_dispatch::on_cuda({&dy_in, &x_in, &mean, &invstd, &weight, &bias}, op);
  const NCS d = check_backward(dy_in, x_in, mean, invstd, weight, bias, op);
  const Tensor x = x_in.contiguous();
  const Tensor dy = cuda ? cuda_masked_dy(dy_in, x, mean, invstd, weight, bias, relu) : dy_in.contiguous();
  if (cuda) {
    const Tensor m = for_kernel(mean, x), is = for_kernel(invstd, x);
    BatchNormReduce r;
    r.sum_dy = Tensor({d.C}, x.dtype(), x.device());
    r.sum_dy_xmu = Tensor({d.C}, x.dtype(), x.device());
    if (weight.defined()) {
      r.grad_weight = Tensor({d.C}, x.dtype(), x.device());
      r.grad_bias = Tensor({d.C}, x.dtype(), x.device());
    }
    cuda_dispatch::use_device(x);
    kc::batch_norm_backward_reduce(cuda_dispatch::elem(x.dtype()), dy.raw_data(), x.raw_data(), d.N, d.C, d.S,
                                   m.raw_data(), is.raw_data(), r.sum_dy.raw_data(), r.sum_dy_xmu.raw_data(),
                                   ptr_or_null(r.grad_weight), ptr_or_null(r.grad_bias));
    return r;
  }
  const auto m = detail::cpu_values(mean), is = detail::cpu_values(invstd);
  const auto w = values_or_empty(weight), b = values_or_empty(bias);
  const kernels::cpu::BatchNormAffine affine{is.data(), ptr_or_null(w), ptr_or_null(b)};
  std::vector<double> sum_dy(static_cast<size_t>(d.C)), sum_dy_xmu(static_cast<size_t>(d.C));
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::batch_norm_backward_reduce(dy.data<T>(), x.data<T>(), d.N, d.C, d.S, m.data(), sum_dy.data(),
                                             sum_dy_xmu.data(), relu ? &affine : nullptr);
  });
  BatchNormReduce r;
  r.sum_dy = from_doubles(sum_dy, x.dtype());
  r.sum_dy_xmu = from_doubles(sum_dy_xmu, x.dtype());
  if (weight.defined()) {
    std::vector<double> gw(static_cast<size_t>(d.C));
    for (int64_t c = 0; c < d.C; ++c) gw[c] = sum_dy_xmu[c] * is[c];
    r.grad_weight = from_doubles(gw, x.dtype());
    r.grad_bias = from_doubles(sum_dy, x.dtype());
  }
  return r;
}

namespace {
// batch_norm_backward_elemt's checks (all but the count's); returns x's layout.
NCS check_backward_elemt(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                         const Tensor& weight, const Tensor& sum_dy, const Tensor& sum_dy_xmu, const Tensor& bias,
                         const char* op) {
  const NCS d = check_backward(dy, x, mean, invstd, weight, bias, op);
  require_channel_vector(sum_dy, d.C, op, "sum_dy", false);
  require_channel_vector(sum_dy_xmu, d.C, op, "sum_dy_xmu", false);
  return d;
}
}  // namespace

Tensor batch_norm_backward_elemt(const Tensor& dy_in, const Tensor& x_in, const Tensor& mean, const Tensor& invstd,
                                 const Tensor& weight, const Tensor& sum_dy, const Tensor& sum_dy_xmu, int64_t count,
                                 const Tensor& bias, bool relu) {
  constexpr const char* op = "batch_norm_backward_elemt";
  const bool cuda = cuda_dispatch::on_cuda({&dy_in, &x_in, &mean, &invstd, &weight, &sum_dy, &sum_dy_xmu, &bias}, op);
  const NCS d = check_backward_elemt(dy_in, x_in, mean, invstd, weight, sum_dy, sum_dy_xmu, bias, op);
  if (count <= 0)
    throw std::invalid_argument(std::string(op) + ": count must be positive, got " + std::to_string(count) +
                                " for input " + x_in.desc());
  const Tensor x = x_in.contiguous();
  if (cuda) {
    const Tensor dy = cuda_masked_dy(dy_in, x, mean, invstd, weight, bias, relu);
    const Tensor m = for_kernel(mean, x), is = for_kernel(invstd, x), w = for_kernel(weight, x);
    const Tensor sd = for_kernel(sum_dy, x), sdx = for_kernel(sum_dy_xmu, x);
    Tensor dx(x.shape(), x.dtype(), x.device());
    cuda_dispatch::use_device(x);
    kc::batch_norm_backward_elemt(cuda_dispatch::elem(x.dtype()), dy.raw_data(), x.raw_data(), d.N, d.C, d.S,
                                  m.raw_data(), is.raw_data(), ptr_or_null(w), sd.raw_data(), sdx.raw_data(), count,
                                  dx.raw_data());
    return dx;
  }
  const Tensor dy = dy_in.contiguous();
  const auto m = detail::cpu_values(mean), is = detail::cpu_values(invstd), w = values_or_empty(weight);
  const auto b = values_or_empty(bias);
  const auto sd = detail::cpu_values(sum_dy), sdx = detail::cpu_values(sum_dy_xmu);
  const kernels::cpu::BatchNormAffine affine{is.data(), ptr_or_null(w), ptr_or_null(b)};
  Tensor dx(x.shape(), x.dtype());
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::batch_norm_backward_elemt(dy.data<T>(), x.data<T>(), d.N, d.C, d.S, m.data(), is.data(),
                                            ptr_or_null(w), sd.data(), sdx.data(), count, dx.data<T>(),
                                            relu ? &affine : nullptr);
  });
  return dx;
}

Tensor batch_norm_backward_elemt(const Tensor& dy_in, const Tensor& x_in, const Tensor& mean, const Tensor& invstd,
                                 const Tensor& weight, const Tensor& sum_dy, const Tensor& sum_dy_xmu,
                                 const Tensor& count, const Tensor& bias, bool relu) {
  constexpr const char* op = "batch_norm_backward_elemt";
  if (!count.defined() || count.numel() != 1)
    throw std::invalid_argument(std::string(op) + ": expected a one-element count tensor, got " +
                                (count.defined() ? count.desc() : std::string("an undefined tensor")));
  const bool cuda =
      cuda_dispatch::on_cuda({&dy_in, &x_in, &mean, &invstd, &weight, &sum_dy, &sum_dy_xmu, &bias, &count}, op);
  if (!cuda)
    return batch_norm_backward_elemt(dy_in, x_in, mean, invstd, weight, sum_dy, sum_dy_xmu,
                                     static_cast<int64_t>(detail::cpu_values(count)[0]), bias, relu);
  const NCS d = check_backward_elemt(dy_in, x_in, mean, invstd, weight, sum_dy, sum_dy_xmu, bias, op);
  const Tensor x = x_in.contiguous();
  const Tensor dy = cuda_masked_dy(dy_in, x, mean, invstd, weight, bias, relu);
  const Tensor m = for_kernel(mean, x), is = for_kernel(invstd, x), w = for_kernel(weight, x);
  const Tensor sd = for_kernel(sum_dy, x), sdx = for_kernel(sum_dy_xmu, x);
  const Tensor n = count.to(DType::Float64).contiguous();
  Tensor dx(x.shape(), x.dtype(), x.device());
  cuda_dispatch::use_device(x);
  kc::batch_norm_backward_elemt(cuda_dispatch::elem(x.dtype()), dy.raw_data(), x.raw_data(), d.N, d.C, d.S,
                                m.raw_data(), is.raw_data(), ptr_or_null(w), sd.raw_data(), sdx.raw_data(),
                                static_cast<const double*>(n.raw_data()), dx.raw_data());
  return dx;
}

void batch_norm_update_running_stats_(Tensor& running_mean, Tensor& running_var, const Tensor& mean,
                                      const Tensor& unbiased_var, double momentum) {
  lerp_(running_mean, mean.to(running_mean.dtype()), momentum);
  lerp_(running_var, unbiased_var.to(running_var.dtype()), momentum);
}

BatchNormGatheredStats batch_norm_gather_stats_with_counts(const Tensor& rows_in, double eps) {
  constexpr const char* op = "batch_norm_gather_stats_with_counts";
  const bool cuda = cuda_dispatch::on_cuda({&rows_in}, op);
  if (rows_in.dim() != 2 || rows_in.size(1) % 2 != 1 || rows_in.dtype() != DType::Float64)
    throw std::invalid_argument(std::string(op) + ": expected float64 rows (R, 2C + 1), got " + rows_in.desc());
  const int64_t R = rows_in.size(0), C = (rows_in.size(1) - 1) / 2;
  const Tensor rows = rows_in.contiguous();
  const Device dev = rows.device();
  BatchNormGatheredStats g{Tensor({C}, DType::Float64, dev), Tensor({C}, DType::Float64, dev),
                           Tensor({C}, DType::Float64, dev), Tensor({1}, DType::Float64, dev)};
  const auto* in = static_cast<const double*>(rows.raw_data());
  auto* mean = static_cast<double*>(g.mean.raw_data());
  auto* invstd = static_cast<double*>(g.invstd.raw_data());
  auto* unbiased = static_cast<double*>(g.unbiased_var.raw_data());
  auto* total = static_cast<double*>(g.count.raw_data());
  if (cuda) {
    cuda_dispatch::use_device(rows);
    kc::batch_norm_gather_stats(in, R, C, eps, mean, invstd, unbiased, total);
  } else {
    kernels::cpu::batch_norm_gather_stats(in, R, C, eps, mean, invstd, unbiased, total);
  }
  return g;
}

// ---- batch norm + ReLU + 2x2 max-pool ----

namespace {
// x (N, C, H, W), H and W >= 2, on the CPU.
void require_pool_input(const Tensor& x, const char* op) {
  require_float(x, op, "input");
  if (x.device().is_cuda()) throw std::invalid_argument(std::string(op) + ": CPU only, got input " + x.desc());
  if (x.dim() != 4 || x.size(2) < 2 || x.size(3) < 2)
    throw std::invalid_argument(std::string(op) + ": expected input (N, C, H, W) with H, W >= 2, got " + x.desc());
}
}  // namespace

BatchNormReluPoolResult batch_norm_relu_max_pool2d_forward(const Tensor& x_in, const Tensor& mean, const Tensor& invstd,
                                                           const Tensor& weight, const Tensor& bias) {
  constexpr const char* op = "batch_norm_relu_max_pool2d_forward";
  require_pool_input(x_in, op);
  const int64_t N = x_in.size(0), C = x_in.size(1), H = x_in.size(2), W = x_in.size(3);
  require_channel_vector(mean, C, op, "mean", false);
  require_channel_vector(invstd, C, op, "invstd", false);
  require_channel_vector(weight, C, op, "weight", true);
  require_channel_vector(bias, C, op, "bias", true);
  const Tensor x = x_in.contiguous();
  const auto m = detail::cpu_values(mean), is = detail::cpu_values(invstd);
  const auto w = values_or_empty(weight), b = values_or_empty(bias);
  const Shape pooled{N, C, H / 2, W / 2};
  BatchNormReluPoolResult r{Tensor(pooled, x.dtype()), {Tensor(pooled, DType::UInt8), Tensor(pooled, x.dtype())}};
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::batch_norm_relu_max_pool2d_forward(x.data<T>(), N, C, H, W, m.data(), is.data(), ptr_or_null(w),
                                                     ptr_or_null(b), r.out.data<T>(),
                                                     r.saved.window_argmax.data<uint8_t>(), r.saved.x_at_max.data<T>());
  });
  return r;
}

BatchNormReluPoolGrads batch_norm_relu_max_pool2d_backward(const Tensor& dout_in, const Tensor& x_in,
                                                           const BatchNormReluPoolSaved& fwd, const Tensor& mean,
                                                           const Tensor& invstd, const Tensor& weight) {
  constexpr const char* op = "batch_norm_relu_max_pool2d_backward";
  require_pool_input(x_in, op);
  const int64_t N = x_in.size(0), C = x_in.size(1), H = x_in.size(2), W = x_in.size(3);
  const Shape pooled{N, C, H / 2, W / 2};
  if (!fwd.x_at_max.defined() || fwd.x_at_max.shape() != pooled || fwd.x_at_max.dtype() != x_in.dtype() ||
      !fwd.window_argmax.defined() || fwd.window_argmax.shape() != pooled || fwd.window_argmax.dtype() != DType::UInt8)
    throw std::invalid_argument(std::string(op) + ": the saved forward results do not belong to input " + x_in.desc());
  require_like_input(dout_in, fwd.x_at_max, op);
  require_channel_vector(mean, C, op, "mean", false);
  require_channel_vector(invstd, C, op, "invstd", false);
  require_channel_vector(weight, C, op, "weight", true);
  const Tensor x = x_in.contiguous(), dout = dout_in.contiguous();
  const Tensor arg = fwd.window_argmax.contiguous(), x_at = fwd.x_at_max.contiguous();
  const auto m = detail::cpu_values(mean), is = detail::cpu_values(invstd), w = values_or_empty(weight);
  std::vector<double> sum_dy(static_cast<size_t>(C)), sum_dy_xmu(static_cast<size_t>(C));
  BatchNormReluPoolGrads g{Tensor(x.shape(), x.dtype()), Tensor(), Tensor()};
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    // the sums over the input's gradient: dout at each window's winner (0 where the ReLU's out is
    // <= 0) and 0 elsewhere, so only the winners count: a reduce over the pooled planes, with
    // x_at (x at each winner) as x and the ReLU's bit of arg as its mask
    kernels::cpu::batch_norm_relu_max_pool2d_backward_reduce(dout.data<T>(), arg.data<uint8_t>(), x_at.data<T>(), N, C,
                                                             (H / 2) * (W / 2), m.data(), sum_dy.data(),
                                                             sum_dy_xmu.data());
    // the sums in x's dtype, as the separate pieces pass them (BatchNormReduce holds tensors)
    std::vector<double> sd(sum_dy.size()), sdx(sum_dy.size());
    for (int64_t c = 0; c < C; ++c) {
      sd[c] = static_cast<T>(sum_dy[c]);
      sdx[c] = static_cast<T>(sum_dy_xmu[c]);
    }
    kernels::cpu::batch_norm_relu_max_pool2d_backward_elemt(dout.data<T>(), arg.data<uint8_t>(), x.data<T>(), N, C, H,
                                                            W, m.data(), is.data(), ptr_or_null(w), sd.data(),
                                                            sdx.data(), N * H * W, g.dx.data<T>());
  });
  if (weight.defined()) {
    std::vector<double> gw(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) gw[c] = sum_dy_xmu[c] * is[c];
    g.grad_weight = from_doubles(gw, x.dtype());
    g.grad_bias = from_doubles(sum_dy, x.dtype());
  }
  return g;
}

// ---- layer norm ----

namespace {

// x (..., normalized_shape) -> {rows, M}; checks the trailing dims and the affine parameters.
std::pair<int64_t, int64_t> layer_norm_layout(const Tensor& x, const Shape& normalized, const Tensor& weight,
                                              const Tensor& bias, const char* op) {
  require_float(x, op, "input");
  const int64_t k = static_cast<int64_t>(normalized.size());
  if (k == 0 || x.dim() < k || !std::equal(normalized.begin(), normalized.end(), x.shape().end() - k))
    throw std::invalid_argument(std::string(op) + ": expected input whose trailing dims are normalized_shape " +
                                shape_str(normalized) + ", got " + x.desc());
  for (const auto* p : {&weight, &bias}) {
    if (!p->defined()) continue;
    const char* name = p == &weight ? "weight" : "bias";
    require_float(*p, op, name);
    if (p->shape() != normalized || p->dtype() != x.dtype())
      throw std::invalid_argument(std::string(op) + ": expected " + name + " " + dtype_name(x.dtype()) +
                                  shape_str(normalized) + " to match input " + x.desc() + ", got " + p->desc());
  }
  const int64_t M = shape_numel(normalized);
  return {M == 0 ? 0 : x.numel() / M, M};
}

}  // namespace

LayerNormResult layer_norm_forward(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight_in,
                                   const Tensor& bias_in, double eps) {
  constexpr const char* op = "layer_norm";
  const bool cuda = cuda_dispatch::on_cuda({&x_in, &weight_in, &bias_in}, op);
  const auto layout = layer_norm_layout(x_in, normalized_shape, weight_in, bias_in, op);
  const int64_t rows = layout.first, M = layout.second;  // plain locals: clang 14 cannot capture bindings
  const Tensor x = x_in.contiguous();
  const Tensor weight = weight_in.defined() ? weight_in.contiguous() : Tensor();
  const Tensor bias = bias_in.defined() ? bias_in.contiguous() : Tensor();
  LayerNormResult r{Tensor(x.shape(), x.dtype(), x.device()), Tensor({rows}, x.dtype(), x.device()),
                    Tensor({rows}, x.dtype(), x.device())};
  if (cuda) {
    cuda_dispatch::use_device(x);
    kc::layer_norm_forward(cuda_dispatch::elem(x.dtype()), x.raw_data(), rows, M, ptr_or_null(weight),
                           ptr_or_null(bias), eps, r.out.raw_data(), r.mean.raw_data(), r.invstd.raw_data());
    return r;
  }
  if (M == 0) return r;
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::layer_norm_forward(x.data<T>(), rows, M, weight.defined() ? weight.data<T>() : nullptr,
                                     bias.defined() ? bias.data<T>() : nullptr, eps, r.out.data<T>(), r.mean.data<T>(),
                                     r.invstd.data<T>());
  });
  return r;
}

LayerNormGrads layer_norm_backward(const Tensor& dy_in, const Tensor& x_in, const Tensor& mean_in,
                                   const Tensor& invstd_in, const Shape& normalized_shape, const Tensor& weight_in) {
  constexpr const char* op = "layer_norm_backward";
  const bool cuda = cuda_dispatch::on_cuda({&dy_in, &x_in, &mean_in, &invstd_in, &weight_in}, op);
  const auto layout = layer_norm_layout(x_in, normalized_shape, weight_in, Tensor(), op);
  const int64_t rows = layout.first, M = layout.second;  // plain locals: clang 14 cannot capture bindings
  require_like_input(dy_in, x_in, op);
  for (const auto* p : {&mean_in, &invstd_in}) {
    const char* name = p == &mean_in ? "mean" : "invstd";
    require_float(*p, op, name);
    if (p->numel() != rows || p->dtype() != x_in.dtype())
      throw std::invalid_argument(std::string(op) + ": expected " + name + " with " + std::to_string(rows) + " " +
                                  dtype_name(x_in.dtype()) + " values (one per row of " + x_in.desc() + "), got " +
                                  p->desc());
  }
  const Tensor x = x_in.contiguous(), dy = dy_in.contiguous();
  const Tensor mean = mean_in.contiguous(), invstd = invstd_in.contiguous();
  const Tensor weight = weight_in.defined() ? weight_in.contiguous() : Tensor();
  LayerNormGrads g;
  g.dx = Tensor(x.shape(), x.dtype(), x.device());
  if (cuda) {
    if (weight.defined()) {
      g.dweight = zeros(normalized_shape, x.dtype(), x.device());
      g.dbias = zeros(normalized_shape, x.dtype(), x.device());
    }
    cuda_dispatch::use_device(x);
    kc::layer_norm_backward(cuda_dispatch::elem(x.dtype()), dy.raw_data(), x.raw_data(), rows, M, mean.raw_data(),
                            invstd.raw_data(), ptr_or_null(weight), g.dx.raw_data(), ptr_or_null(g.dweight),
                            ptr_or_null(g.dbias));
    return g;
  }
  std::vector<double> dw, db;
  Tensor part;  // the kernel's per-chunk column sums (tensor storage: cached, no fresh pages)
  if (weight.defined()) {
    dw.assign(static_cast<size_t>(M), 0.0);
    db.assign(static_cast<size_t>(M), 0.0);
    part = Tensor({kernels::cpu::layer_norm_chunks(rows), 2, M}, x.dtype());
  }
  if (M > 0) {
    dispatch_floating(x.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      kernels::cpu::layer_norm_backward(dy.data<T>(), x.data<T>(), rows, M, mean.data<T>(), invstd.data<T>(),
                                        weight.defined() ? weight.data<T>() : nullptr, g.dx.data<T>(),
                                        weight.defined() ? part.data<T>() : nullptr, dw.data(), db.data());
    });
  }
  if (weight.defined()) {
    g.dweight = from_vector(dw, normalized_shape, x.dtype());
    g.dbias = from_vector(db, normalized_shape, x.dtype());
  }
  return g;
}

}  // namespace minidl
