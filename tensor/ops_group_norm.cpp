// tensor/ops_group_norm.cpp — group norm forward / backward on Tensors (declared in
// tensor/ops_nn.h), CPU only: the fused kernels of kernels/cpu/group_norm.h over x (N, C, *) seen
// as (N, C, S). On CUDA autograd's group_norm composes layer_norm and the per-channel affine.
#include <stdexcept>
#include <string>
#include <vector>

#include "minidl/kernels/cpu/group_norm.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/ops_nn.h"
#include "minidl/tensor/ops_nn_checks.h"
#include "minidl/tensor/ops_util.h"

namespace minidl {

namespace {

using nn_checks::require_channel_vector;
using nn_checks::require_float;

// x (N, C, *) on the CPU with num_groups dividing C, weight / bias (C) of x's dtype or undefined;
// returns S = prod(*).
int64_t group_norm_layout(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias,
                          const char* op) {
  require_float(x, op, "input");
  if (x.dim() < 2) throw std::invalid_argument(std::string(op) + ": expected input (N, C, *), got " + x.desc());
  const int64_t C = x.size(1);
  if (num_groups <= 0 || C % num_groups != 0)
    throw std::invalid_argument(std::string(op) + ": num_groups = " + std::to_string(num_groups) +
                                " must be positive and divide the number of channels C = " + std::to_string(C) +
                                " of input " + x.desc());
  for (const auto* p : {&x, &weight, &bias})
    if (p->defined() && !p->device().is_cpu())
      throw std::invalid_argument(std::string(op) + ": CPU tensors only, got " + p->desc());
  require_channel_vector(weight, C, op, "weight", true);
  require_channel_vector(bias, C, op, "bias", true);
  for (const auto* p : {&weight, &bias})
    if (p->defined() && p->dtype() != x.dtype())
      throw std::invalid_argument(std::string(op) + ": expected weight and bias of input " + x.desc() +
                                  "'s dtype, got " + p->desc());
  int64_t S = 1;
  for (int64_t d = 2; d < x.dim(); ++d) S *= x.size(d);
  return S;
}

template <class T> const T* data_or_null(const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }

}  // namespace

GroupNormResult group_norm_forward(const Tensor& x_in, int64_t num_groups, const Tensor& weight_in,
                                   const Tensor& bias_in, double eps, bool relu) {
  constexpr const char* op = "group_norm";
  const int64_t S = group_norm_layout(x_in, num_groups, weight_in, bias_in, op);
  const Tensor x = x_in.contiguous();
  const Tensor weight = weight_in.defined() ? weight_in.contiguous() : Tensor();
  const Tensor bias = bias_in.defined() ? bias_in.contiguous() : Tensor();
  const int64_t N = x.size(0), C = x.size(1), G = num_groups;
  GroupNormResult r{Tensor(x.shape(), x.dtype()), Tensor({N, G}, x.dtype()), Tensor({N, G}, x.dtype())};
  if (x.numel() == 0) return r;
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::group_norm_forward(x.data<T>(), N, C, S, G, data_or_null<T>(weight), data_or_null<T>(bias), eps,
                                     r.out.data<T>(), r.mean.data<T>(), r.rstd.data<T>(), relu);
  });
  return r;
}

GroupNormGrads group_norm_backward(const Tensor& dy_in, const Tensor& x_in, const Tensor& mean_in,
                                   const Tensor& rstd_in, int64_t num_groups, const Tensor& weight_in,
                                   const Tensor& bias_in, bool relu) {
  constexpr const char* op = "group_norm_backward";
  const int64_t S = group_norm_layout(x_in, num_groups, weight_in, bias_in, op);
  const int64_t N = x_in.size(0), C = x_in.size(1), G = num_groups;
  require_float(dy_in, op, "grad_output");
  if (dy_in.shape() != x_in.shape() || dy_in.dtype() != x_in.dtype() || !dy_in.device().is_cpu())
    throw std::invalid_argument(std::string(op) + ": expected grad_output shaped and typed like input " + x_in.desc() +
                                ", got " + dy_in.desc());
  for (const auto* p : {&mean_in, &rstd_in})
    if (!p->defined() || p->shape() != Shape{N, G} || p->dtype() != x_in.dtype() || !p->device().is_cpu())
      throw std::invalid_argument(std::string(op) + ": expected mean and rstd (N, G) = (" + std::to_string(N) + ", " +
                                  std::to_string(G) + ") of input " + x_in.desc() + "'s dtype, got " +
                                  nn_checks::desc_or_undefined(*p));
  const Tensor x = x_in.contiguous(), dy = dy_in.contiguous(), mean = mean_in.contiguous(), rstd = rstd_in.contiguous();
  const Tensor weight = weight_in.defined() ? weight_in.contiguous() : Tensor();
  const Tensor bias = bias_in.defined() ? bias_in.contiguous() : Tensor();
  GroupNormGrads g{Tensor(x.shape(), x.dtype()), Tensor(), Tensor()};
  std::vector<double> dw(static_cast<size_t>(C), 0.0), db(static_cast<size_t>(C), 0.0);
  if (x.numel() > 0) {
    Tensor part = Tensor({N, C, 2}, DType::Float64);  // the kernel's per-(n, c) terms (tensor storage: cached)
    dispatch_floating(x.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      kernels::cpu::group_norm_backward(dy.data<T>(), x.data<T>(), N, C, S, G, mean.data<T>(), rstd.data<T>(),
                                        data_or_null<T>(weight), g.dx.data<T>(), part.data<double>(), dw.data(),
                                        db.data(), data_or_null<T>(bias), relu);
    });
  }
  g.dweight = from_vector(dw, {C}, x.dtype());
  g.dbias = from_vector(db, {C}, x.dtype());
  return g;
}

}  // namespace minidl
