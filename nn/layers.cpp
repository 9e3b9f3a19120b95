// nn/layers.cpp — constructors, checks and printing of the small layers (see layers.h).
#include "minidl/nn/layers.h"

#include <cstdio>

#include "minidl/nn/init.h"

namespace minidl::nn {

LayerNorm::LayerNorm(const LayerNormOptions& o) : options(o) {
  if (o.normalized_shape.empty()) throw std::invalid_argument("LayerNorm: normalized_shape must not be empty");
  if (o.elementwise_affine) {
    weight = Variable(ones(o.normalized_shape), true);
    bias = Variable(zeros(o.normalized_shape), true);
    register_parameter("weight", weight);
    register_parameter("bias", bias);
  }
}
std::string LayerNorm::extra_repr() const {
  std::string s = "(";
  for (size_t i = 0; i < options.normalized_shape.size(); ++i) s += std::to_string(options.normalized_shape[i]) + ",";
  char buf[64];
  std::snprintf(buf, sizeof buf, "), eps=%g, elementwise_affine=%s", options.eps,
                options.elementwise_affine ? "True" : "False");
  return s + buf;
}
Variable LayerNorm::forward(const Variable& x) {
  return layer_norm(x, options.normalized_shape, weight, bias, options.eps);
}

Dropout::Dropout(const DropoutOptions& o) : options(o) {
  if (o.p < 0 || o.p >= 1) throw std::invalid_argument("Dropout: p must be in [0, 1), got " + std::to_string(o.p));
}
std::string Dropout::extra_repr() const {
  char buf[48];
  std::snprintf(buf, sizeof buf, "p=%g, inplace=False", options.p);
  return buf;
}
Variable Dropout::forward(const Variable& x) { return dropout(x, options.p, training_); }

Dropout2d::Dropout2d(const DropoutOptions& o) : options(o) {
  if (o.p < 0 || o.p >= 1) throw std::invalid_argument("Dropout2d: p must be in [0, 1), got " + std::to_string(o.p));
}
std::string Dropout2d::extra_repr() const {
  char buf[48];
  std::snprintf(buf, sizeof buf, "p=%g, inplace=False", options.p);
  return buf;
}

GroupNorm::GroupNorm(const GroupNormOptions& o) : options(o) {
  if (o.num_groups <= 0 || o.num_channels <= 0 || o.num_channels % o.num_groups != 0)
    throw std::invalid_argument("GroupNorm: num_channels (" + std::to_string(o.num_channels) +
                                ") must be positive and divisible by num_groups (" + std::to_string(o.num_groups) +
                                ")");
  if (o.affine) {
    weight = Variable(ones({o.num_channels}), true);
    bias = Variable(zeros({o.num_channels}), true);
    register_parameter("weight", weight);
    register_parameter("bias", bias);
  }
}
std::string GroupNorm::extra_repr() const {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%lld, %lld, eps=%g, affine=%s", static_cast<long long>(options.num_groups),
                static_cast<long long>(options.num_channels), options.eps, options.affine ? "True" : "False");
  return buf;
}

Upsample::Upsample(const UpsampleOptions& o) : options(o) {
  if (o.size.empty() == o.scale_factor.empty())
    throw std::invalid_argument("Upsample: give exactly one of size and scale_factor");
  if (o.mode == InterpolateMode::Nearest && o.align_corners.has_value())
    throw std::invalid_argument("Upsample: align_corners can only be set with mode bilinear, not nearest");
}
std::string Upsample::extra_repr() const {
  // as Python prints them: scale_factor=2.0, size=(4, 6), mode='nearest'
  auto list = [](const auto& v, auto str) {
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + str(v[i]);
    return v.size() == 1 ? out : "(" + out + ")";
  };
  auto number = [](double f) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", f);
    std::string s = buf;
    return s.find_first_of(".e") == std::string::npos ? s + ".0" : s;
  };
  std::string s = options.scale_factor.empty()
                      ? "size=" + list(options.size, [](int64_t n) { return std::to_string(n); })
                      : "scale_factor=" + list(options.scale_factor, number);
  return s + ", mode='" + (options.mode == InterpolateMode::Nearest ? "nearest" : "bilinear") + "'";
}
Variable Upsample::forward(const Variable& x) {
  return interpolate(x, {.size = options.size,
                         .scale_factor = options.scale_factor,
                         .mode = options.mode,
                         .align_corners = options.align_corners,
                         .recompute_scale_factor = options.recompute_scale_factor});
}

namespace {
Pool2dParams pool_params(const Pool2dOptions& o, const char* who) {
  const int64_t stride = o.stride > 0 ? o.stride : o.kernel;
  if (o.kernel <= 0 || o.stride < 0 || o.padding < 0 || 2 * o.padding > o.kernel)
    throw std::invalid_argument(std::string(who) + ": kernel must be positive, stride >= 0 (0: the kernel's) and " +
                                "padding at most half the kernel (kernel=" + std::to_string(o.kernel) + ", stride=" +
                                std::to_string(o.stride) + ", padding=" + std::to_string(o.padding) + ")");
  return {.kernel_h = o.kernel,
          .kernel_w = o.kernel,
          .stride_h = stride,
          .stride_w = stride,
          .pad_h = o.padding,
          .pad_w = o.padding,
          .ceil_mode = o.ceil_mode};
}
std::string pool_repr(const Pool2dParams& p) {
  return "kernel_size=" + std::to_string(p.kernel_h) + ", stride=" + std::to_string(p.stride_h) +
         ", padding=" + std::to_string(p.pad_h);
}
}  // namespace

MaxPool2d::MaxPool2d(const Pool2dOptions& o) : params(pool_params(o, "MaxPool2d")) {}
std::string MaxPool2d::extra_repr() const {
  return pool_repr(params) + ", dilation=1, ceil_mode=" + (params.ceil_mode ? "True" : "False");
}
AvgPool2d::AvgPool2d(const Pool2dOptions& o) : params(pool_params(o, "AvgPool2d")) {}
std::string AvgPool2d::extra_repr() const { return pool_repr(params) + (params.ceil_mode ? ", ceil_mode=True" : ""); }

std::string AdaptiveAvgPool2d::extra_repr() const {
  return "output_size=(" + std::to_string(options.out_h) + ", " + std::to_string(options.out_w) + ")";
}
std::string Flatten::extra_repr() const {
  return "start_dim=" + std::to_string(options.start) + ", end_dim=" + std::to_string(options.end);
}

Embedding::Embedding(const EmbeddingOptions& o) : options(o) {
  if (o.num_embeddings <= 0 || o.embedding_dim <= 0)
    throw std::invalid_argument("Embedding: num_embeddings and embedding_dim must be positive");
  weight = Variable(empty({o.num_embeddings, o.embedding_dim}), true);
  init::normal_(weight.data());
  register_parameter("weight", weight);
}
std::string Embedding::extra_repr() const {
  return std::to_string(options.num_embeddings) + ", " + std::to_string(options.embedding_dim);
}

}  // namespace minidl::nn
