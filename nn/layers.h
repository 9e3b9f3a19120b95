// nn/layers.h — the small layers: LayerNorm, GroupNorm, Dropout, Dropout2d, Upsample,
// activations (ReLU, GELU, Tanh), pooling (MaxPool2d, AvgPool2d, AdaptiveAvgPool2d), Flatten and
// Embedding. Each is a thin Module over
// the functional op of autograd/ops.h.
#pragma once
#include "minidl/nn/module.h"

namespace minidl::nn {

struct LayerNormOptions {
  Shape normalized_shape;
  double eps = 1e-5;
  bool elementwise_affine = true;
};
class LayerNorm : public Module {
 public:
  explicit LayerNorm(const LayerNormOptions& o);
  std::string type_name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;
  Variable forward(const Variable& x) override;
  LayerNormOptions options;
  Variable weight, bias;  // normalized_shape, when elementwise_affine
};

struct DropoutOptions {
  double p = 0.5;
};
class Dropout : public Module {
 public:
  explicit Dropout(const DropoutOptions& o = {});
  std::string type_name() const override { return "Dropout"; }
  std::string extra_repr() const override;
  Variable forward(const Variable& x) override;
  DropoutOptions options;
};

// Dropout2d: zeroes whole (n, c) channels of x (N, C, H, W) with probability p in training.
class Dropout2d : public Module {
 public:
  explicit Dropout2d(const DropoutOptions& o = {});
  std::string type_name() const override { return "Dropout2d"; }
  std::string extra_repr() const override;
  Variable forward(const Variable& x) override { return dropout2d(x, options.p, training_); }
  DropoutOptions options;
};

struct GroupNormOptions {
  int64_t num_groups = 0;
  int64_t num_channels = 0;  // must be divisible by num_groups
  double eps = 1e-5;
  bool affine = true;  // per-channel weight (ones) and bias (zeros)
};
class GroupNorm : public Module {
 public:
  explicit GroupNorm(const GroupNormOptions& o);
  std::string type_name() const override { return "GroupNorm"; }
  std::string extra_repr() const override;
  Variable forward(const Variable& x) override { return group_norm(x, options.num_groups, weight, bias, options.eps); }
  // relu(forward(x)) as one node on the CPU (autograd's group_norm_relu): what Sequential runs for
  // a GroupNorm followed by a ReLU after nn::fuse_for_training.
  Variable forward_relu(const Variable& x) { return group_norm_relu(x, options.num_groups, weight, bias, options.eps); }
  GroupNormOptions options;
  Variable weight, bias;  // (num_channels), when affine
};

// Upsample: interpolate with fixed options (size or scale_factor, mode, align_corners,
// recompute_scale_factor).
struct UpsampleOptions {
  std::vector<int64_t> size = {};
  std::vector<double> scale_factor = {};
  InterpolateMode mode = InterpolateMode::Nearest;
  std::optional<bool> align_corners = std::nullopt;
  bool recompute_scale_factor = false;
};
class Upsample : public Module {
 public:
  explicit Upsample(const UpsampleOptions& o);
  std::string type_name() const override { return "Upsample"; }
  std::string extra_repr() const override;
  Variable forward(const Variable& x) override;
  UpsampleOptions options;
};

class ReLU : public Module {
 public:
  std::string type_name() const override { return "ReLU"; }
  Variable forward(const Variable& x) override { return relu(x); }
};

struct GELUOptions {
  bool tanh_approximation = false;
};
class GELU : public Module {
 public:
  explicit GELU(const GELUOptions& o = {}) : options(o) {}
  std::string type_name() const override { return "GELU"; }
  std::string extra_repr() const override { return options.tanh_approximation ? "approximate='tanh'" : ""; }
  Variable forward(const Variable& x) override { return gelu(x, options.tanh_approximation); }
  GELUOptions options;
};

class Tanh : public Module {
 public:
  std::string type_name() const override { return "Tanh"; }
  Variable forward(const Variable& x) override { return tanh(x); }
};

struct Pool2dOptions {
  int64_t kernel = 2;
  int64_t stride = 0;  // 0: same as kernel, as PyTorch's default
  int64_t padding = 0;
  bool ceil_mode = false;  // round the output size up, as PyTorch's ceil_mode=True
};
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(const Pool2dOptions& o);
  std::string type_name() const override { return "MaxPool2d"; }
  std::string extra_repr() const override;
  Variable forward(const Variable& x) override { return max_pool2d(x, params); }
  Pool2dParams params;
};
class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(const Pool2dOptions& o);
  std::string type_name() const override { return "AvgPool2d"; }
  std::string extra_repr() const override;
  Variable forward(const Variable& x) override { return avg_pool2d(x, params); }
  Pool2dParams params;
};

struct AdaptiveAvgPool2dOptions {
  int64_t out_h = 1, out_w = 1;
};
class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(const AdaptiveAvgPool2dOptions& o) : options(o) {}
  std::string type_name() const override { return "AdaptiveAvgPool2d"; }
  std::string extra_repr() const override;
  Variable forward(const Variable& x) override { return adaptive_avg_pool2d(x, options.out_h, options.out_w); }
  AdaptiveAvgPool2dOptions options;
};

struct FlattenOptions {
  int64_t start = 1, end = -1;
};
class Flatten : public Module {
 public:
  explicit Flatten(const FlattenOptions& o = {}) : options(o) {}
  std::string type_name() const override { return "Flatten"; }
  std::string extra_repr() const override;
  Variable forward(const Variable& x) override { return flatten(x, options.start, options.end); }
  FlattenOptions options;
};

struct EmbeddingOptions {
  int64_t num_embeddings = 0;
  int64_t embedding_dim = 0;
};
// Embedding: int64 indices (*) -> (*, dim); weight ~ N(0, 1) as in PyTorch.
class Embedding : public Module {
 public:
  explicit Embedding(const EmbeddingOptions& o);
  std::string type_name() const override { return "Embedding"; }
  std::string extra_repr() const override;
  Variable forward(const Tensor& indices) { return embedding(indices, weight); }
  // The same from a Variable holding the int64 indices (they never require grad), so that an
  // Embedding can be the first child of a Sequential.
  Variable forward(const Variable& indices) override { return embedding(indices.data(), weight); }
  EmbeddingOptions options;
  Variable weight;  // (num_embeddings, embedding_dim)
};

}  // namespace minidl::nn
