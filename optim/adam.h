// optim/adam.h — Adam and AdamW, exactly torch.optim.Adam / torch.optim.AdamW (single-tensor
// path). At step t (from 1), for each element (kernels/optim_functors.h):
//   Adam:  g = g + weight_decay * p   (L2 penalty in the gradient)
//   AdamW: p = p * (1 - lr * weight_decay)   (decoupled weight decay)
//   m = beta1 * m + (1 - beta1) * g ;  v = beta2 * v + (1 - beta2) * g^2
//   amsgrad: v_max = max(v_max, v), used instead of v below
//   p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
//
//   optim::AdamW adamw(model.parameters(), {.lr = 1e-3, .weight_decay = 0.05});
// State: state.<i>.step (0-d), .exp_avg, .exp_avg_sq, and .max_exp_avg_sq with amsgrad.
#pragma once
#include "minidl/optim/optimizer.h"

namespace minidl::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // L2 penalty added to the gradient
  bool amsgrad = false;
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;  // decoupled: p *= 1 - lr * weight_decay before the Adam step
  bool amsgrad = false;
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Variable> params, AdamOptions options = {});
  Adam(std::vector<ParamGroupSpec> groups, AdamOptions options = {});

  void step() override;
  const AdamOptions& options() const { return options_; }
  bool has_momentum() const override { return true; }

 protected:
  Adam(std::string name, std::vector<ParamGroupSpec> groups, AdamOptions options, bool decoupled_weight_decay);
  std::vector<std::string> state_names() const override;

 private:
  AdamOptions options_;
  bool decoupled_weight_decay_;
};

class AdamW : public Adam {
 public:
  AdamW(std::vector<Variable> params, AdamWOptions options = {});
  AdamW(std::vector<ParamGroupSpec> groups, AdamWOptions options = {});
};

}  // namespace minidl::optim
