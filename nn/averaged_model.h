// nn/averaged_model.h — AveragedModel: a running average of a model's weights, as PyTorch's
// torch.optim.swa_utils.AveragedModel. By default the equal average of every model passed to
// update_parameters (stochastic weight averaging); with avg_fn = ema_avg_fn(decay) an
// exponential moving average (PyTorch's get_ema_multi_avg_fn). The first update copies.
//
//   auto make = [] { return std::make_shared<Net>(); };
//   std::shared_ptr<Net> model = make();
//   nn::AveragedModel ema(*model, make, {.avg_fn = nn::ema_avg_fn(0.999)});
//   for (...) { ...; optimizer.step(); ema.update_parameters(*model); }
//   Variable y = ema(x);                       // or ema.module_as<Net>().forward(...)
//
// Modules cannot be copied (their children are members registered by address), so instead of
// PyTorch's deepcopy the constructor takes a factory that builds a second model of the same
// architecture — the code that built the first — and copies the model's parameters and buffers
// into it. (A Module::clone would need every layer and user model to implement it.)
#pragma once
#include <functional>
#include <memory>
#include <optional>

#include "minidl/nn/module.h"

namespace minidl::nn {

// Updates `averaged` in place from `current`, given how many models it already averages (>= 1).
using AvgFn = std::function<void(Tensor& averaged, const Tensor& current, int64_t num_averaged)>;

// averaged += (1 - decay) (current - averaged), i.e. decay averaged + (1 - decay) current
AvgFn ema_avg_fn(double decay = 0.999);

struct AveragedModelOptions {
  AvgFn avg_fn = nullptr;  // empty: the equal average, averaged += (current - averaged) / (num_averaged + 1)
  // Average the floating buffers too (non-floating ones are copied); otherwise buffers keep the
  // values copied at construction (PyTorch then recomputes BatchNorm statistics with update_bn).
  bool use_buffers = false;
  std::optional<Device> device = std::nullopt;  // where the average lives; unset: the model's device
};

class AveragedModel : public Module {
 public:
  AveragedModel(const Module& model, const std::function<std::shared_ptr<Module>()>& make_model,
                AveragedModelOptions options = {});
  std::string type_name() const override { return "AveragedModel"; }
  Variable forward(const Variable& x) override { return module_->forward(x); }

  // Folds `model`'s current parameters (and buffers, with use_buffers) into the average. The
  // model must have the averaged module's parameter names and shapes.
  void update_parameters(const Module& model);
  int64_t n_averaged() const { return n_averaged_.item<int64_t>(); }

  Module& module() { return *module_; }
  template <class M> M& module_as() {
    if (auto* m = dynamic_cast<M*>(module_.get())) return *m;
    throw std::invalid_argument("AveragedModel: the averaged module is a " + module_->type_name() +
                                ", not the requested type");
  }

  AveragedModelOptions options;

 private:
  std::shared_ptr<Module> module_;  // registered as "module", so state_dict keys are "module.<name>"
  Tensor n_averaged_;  // int64 0-d buffer "n_averaged"
};

}  // namespace minidl::nn
