// optim/sgd.h — stochastic gradient descent with momentum, dampening, Nesterov momentum and
// (L2) weight decay: exactly torch.optim.SGD. The update of one element (kernels/optim_functors.h):
//   d = g + weight_decay * p
//   buf = d on the first step, else buf = momentum * buf + (1 - dampening) * d
//   d = nesterov ? d + momentum * buf : buf          (when momentum != 0)
//   p = p - lr * d
//
//   optim::SGD sgd(model.parameters(), {.lr = 0.1, .momentum = 0.9, .weight_decay = 5e-4});
//   loss.backward(); sgd.step(); sgd.zero_grad();
// State (when momentum != 0): state.<i>.momentum_buffer.
#pragma once
#include "minidl/optim/optimizer.h"

namespace minidl::optim {

struct SGDOptions {
  double lr = 1e-3;  // PyTorch requires lr; minidl gives it a default like the other options
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;  // the default of groups that do not set their own
  bool nesterov = false;  // requires momentum > 0 and dampening == 0
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Variable> params, SGDOptions options);
  SGD(std::vector<ParamGroupSpec> groups, SGDOptions options);

  void step() override;
  const SGDOptions& options() const { return options_; }
  bool has_momentum() const override { return options_.momentum != 0.0; }

 protected:
  std::vector<std::string> state_names() const override;

 private:
  SGDOptions options_;
};

}  // namespace minidl::optim
