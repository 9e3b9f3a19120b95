// nn/linear.h — Linear: y = x W^T + b, x (..., in) -> (..., out). PyTorch's default init:
// W, b ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform with a = sqrt(5)).
#pragma once
#include "minidl/nn/module.h"

namespace minidl::nn {

struct LinearOptions {
  int64_t in = 0;
  int64_t out = 0;
  bool bias = true;
};

class Linear : public Module {
 public:
  explicit Linear(const LinearOptions& o);
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override;
  Variable forward(const Variable& x) override;
  void reset_parameters();

  LinearOptions options;
  Variable weight;  // (out, in)
  Variable bias;  // (out) or undefined
};

}  // namespace minidl::nn
