// nn/batchnorm.cpp — BatchNorm layers (see batchnorm.h); the math is autograd's batch_norm.
#include "minidl/nn/batchnorm.h"

#include <cstdio>

namespace minidl::nn {

BatchNormBase::BatchNormBase(const BatchNormOptions& o) : options(o) {
  if (o.num_features <= 0) throw std::invalid_argument("BatchNorm: num_features must be positive");
  if (o.affine) {
    weight = Variable(ones({o.num_features}), true);
    bias = Variable(zeros({o.num_features}), true);
    register_parameter("weight", weight);
    register_parameter("bias", bias);
  }
  if (o.track_running_stats) {
    running_mean = zeros({o.num_features});
    running_var = ones({o.num_features});
    num_batches_tracked = zeros({}, DType::Int64);
    register_buffer("running_mean", running_mean);
    register_buffer("running_var", running_var);
    register_buffer("num_batches_tracked", num_batches_tracked);
  }
}

void BatchNormBase::reset_running_stats() {
  if (!running_mean.defined()) return;
  running_mean.fill_(0.0);
  running_var.fill_(1.0);
  num_batches_tracked.fill_(0.0);
}

std::string BatchNormBase::extra_repr() const {
  char buf[160];
  std::string m = "None";
  if (options.momentum) {
    std::snprintf(buf, sizeof buf, "%g", *options.momentum);
    m = buf;
  }
  std::snprintf(buf, sizeof buf, "%lld, eps=%g, momentum=%s, affine=%s, track_running_stats=%s",
                static_cast<long long>(options.num_features), options.eps, m.c_str(), options.affine ? "True" : "False",
                options.track_running_stats ? "True" : "False");
  return buf;
}

double BatchNormBase::next_momentum() {
  if (!training_ || !running_mean.defined()) return 0.0;
  if (num_batches_tracked.device().is_cuda()) {  // the counter lives on the GPU
    if (options.momentum) {  // counted there; the count is not needed, so nothing is read back
      add_(num_batches_tracked, ones({}, DType::Int64, num_batches_tracked.device()));
      return *options.momentum;
    }
    const double n = num_batches_tracked.item() + 1.0;  // momentum None: 1/n, one small round trip
    num_batches_tracked.fill_(n);
    return 1.0 / n;
  }
  int64_t* n = num_batches_tracked.data<int64_t>();
  *n += 1;
  return options.momentum ? *options.momentum : 1.0 / static_cast<double>(*n);
}

void BatchNormBase::set_forward_override(ForwardOverride fn, std::string type_name, bool communicates) {
  override_ = std::move(fn);
  override_name_ = std::move(type_name);
  override_communicates_ = communicates;
}

Variable BatchNormBase::forward(const Variable& x) { return override_ ? override_(*this, x) : local_forward(x); }

Variable BatchNormBase::forward_relu(const Variable& x) {
  return override_ ? relu(override_(*this, x)) : local_forward(x, true);
}

Variable BatchNormBase::forward_add_relu(const Variable& x, const Variable& residual) {
  if (override_) return relu(override_(*this, x) + residual);
  check_input(x);
  const bool batch_stats = uses_batch_stats();
  const double momentum = next_momentum();
  if (batch_stats)  // as local_forward
    return batch_norm_add_relu(x, residual, training_ ? running_mean : Tensor(), training_ ? running_var : Tensor(),
                               weight, bias, /*training=*/true, momentum, options.eps);
  return batch_norm_add_relu(x, residual, running_mean, running_var, weight, bias, /*training=*/false, 0.0,
                             options.eps);
}

Variable BatchNormBase::forward_relu_max_pool2d(const Variable& x, const Pool2dParams& p) {
  if (override_ || !uses_batch_stats()) return max_pool2d(forward_relu(x), p);
  check_input(x);
  const double momentum = next_momentum();
  return batch_norm_relu_max_pool2d(x, training_ ? running_mean : Tensor(), training_ ? running_var : Tensor(), weight,
                                    bias, /*training=*/true, momentum, options.eps, p);
}

void BatchNormBase::check_input(const Variable& x) const {
  check_input_dim(x);
  if (x.size(1) != options.num_features)
    throw std::invalid_argument(type_name() + ": expected " + std::to_string(options.num_features) +
                                " channels in dim 1, got input " + x.data().desc());
}

Variable BatchNormBase::local_forward(const Variable& x, bool relu) {
  check_input(x);
  const bool batch_stats = uses_batch_stats();
  const double momentum = next_momentum();
  if (batch_stats)  // training (running stats updated when tracked), or eval without running stats
    return batch_norm(x, training_ ? running_mean : Tensor(), training_ ? running_var : Tensor(), weight, bias,
                      /*training=*/true, momentum, options.eps, relu);
  return batch_norm(x, running_mean, running_var, weight, bias, /*training=*/false, 0.0, options.eps, relu);
}

void BatchNorm1d::check_input_dim(const Variable& x) const {
  if (x.dim() != 2 && x.dim() != 3)
    throw std::invalid_argument("BatchNorm1d: expected 2D or 3D input (N, C) / (N, C, L), got " + x.data().desc());
}

void BatchNorm2d::check_input_dim(const Variable& x) const {
  if (x.dim() != 4) throw std::invalid_argument("BatchNorm2d: expected 4D input (N, C, H, W), got " + x.data().desc());
}

}  // namespace minidl::nn
