// nn/averaged_model.cpp — AveragedModel (see averaged_model.h): the copy at construction and the
// per-tensor average of update_parameters, in place, without recording gradients.
#include "minidl/nn/averaged_model.h"

namespace minidl::nn {

namespace {

// The tensors update_parameters averages, in registration order, by name.
std::vector<std::pair<std::string, Tensor>> averaged_tensors(const Module& m, bool use_buffers) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, p] : m.named_parameters()) out.emplace_back(name, p.data());
  if (use_buffers)
    for (const auto& [name, b] : m.named_buffers())
      if (b->defined()) out.emplace_back(name, *b);
  return out;
}

}  // namespace

AvgFn ema_avg_fn(double decay) {
  if (!(decay >= 0 && decay <= 1))
    throw std::invalid_argument("ema_avg_fn: decay must be in [0, 1], got " + std::to_string(decay));
  return [decay](Tensor& averaged, const Tensor& current, int64_t) { lerp_(averaged, current, 1.0 - decay); };
}

AveragedModel::AveragedModel(const Module& model, const std::function<std::shared_ptr<Module>()>& make_model,
                             AveragedModelOptions o)
    : options(std::move(o)) {
  if (!make_model) throw std::invalid_argument("AveragedModel: make_model is empty");
  module_ = make_model();
  if (!module_) throw std::invalid_argument("AveragedModel: make_model returned a null module");
  if (module_.get() == &model)
    throw std::invalid_argument("AveragedModel: make_model must build a new model, not return the one to average");
  module_->to(options.device.value_or(model.device()));
  {  // PyTorch deep-copies the model: the same values, every parameter and buffer
    NoGradGuard no_grad;
    module_->load_state_dict(model.state_dict());
  }
  register_module("module", *module_);
  n_averaged_ = zeros({}, DType::Int64, module_->device());
  register_buffer("n_averaged", n_averaged_);
}

void AveragedModel::update_parameters(const Module& model) {
  NoGradGuard no_grad;
  auto mine = averaged_tensors(*module_, options.use_buffers);
  const auto theirs = averaged_tensors(model, options.use_buffers);
  if (mine.size() != theirs.size())
    throw std::invalid_argument("AveragedModel::update_parameters: the model has " + std::to_string(theirs.size()) +
                                " tensors to average, the averaged module " + std::to_string(mine.size()));
  const int64_t n = n_averaged();
  for (size_t i = 0; i < mine.size(); ++i) {
    Tensor& avg = mine[i].second;
    if (mine[i].first != theirs[i].first || avg.shape() != theirs[i].second.shape())
      throw std::invalid_argument("AveragedModel::update_parameters: model tensor '" + theirs[i].first + "' " +
                                  theirs[i].second.desc() + " does not match the averaged '" + mine[i].first + "' " +
                                  avg.desc());
    const Tensor current = theirs[i].second.to(avg.device()).to(avg.dtype());
    if (n == 0 || !is_floating(avg.dtype()))
      avg.copy_(current);
    else if (options.avg_fn)
      options.avg_fn(avg, current, n);
    else
      lerp_(avg, current, 1.0 / static_cast<double>(n + 1));
  }
  n_averaged_.fill_(static_cast<double>(n + 1));
}

}  // namespace minidl::nn
