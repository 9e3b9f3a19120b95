// examples/trainer/recipe.cpp — optimizer and per-iteration LR schedule from a TrainConfig.
#include "examples/trainer/recipe.h"

#include <algorithm>

#include "minidl/optim/adam.h"
#include "minidl/optim/sgd.h"

namespace trainer {

namespace optim = minidl::optim;

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c, minidl::nn::Module& model) {
  if (c.optimizer == "sgd")
    return std::make_unique<optim::SGD>(
        model.parameters(), optim::SGDOptions{.lr = c.base_lr, .momentum = c.momentum, .weight_decay = c.weight_decay});
  if (c.optimizer == "adam")
    return std::make_unique<optim::Adam>(
        model.parameters(),
        optim::AdamOptions{
            .lr = c.base_lr, .beta1 = c.beta1, .beta2 = c.beta2, .eps = c.eps, .weight_decay = c.weight_decay});
  return std::make_unique<optim::AdamW>(
      model.parameters(),
      optim::AdamWOptions{
          .lr = c.base_lr, .beta1 = c.beta1, .beta2 = c.beta2, .eps = c.eps, .weight_decay = c.weight_decay});
}

std::unique_ptr<optim::LRScheduler> make_scheduler(const TrainConfig& c, optim::Optimizer& optimizer,
                                                   int64_t steps_per_epoch) {
  const int64_t total = c.epochs * steps_per_epoch;
  const int64_t warmup = c.warmup_epochs * steps_per_epoch;
  std::unique_ptr<optim::LRScheduler> after;
  if (c.lr_scheduler == "cosine")
    after = std::make_unique<optim::CosineAnnealingLR>(optimizer, /*T_max=*/std::max<int64_t>(1, total - warmup));
  if (warmup == 0 && after) return after;
  return std::make_unique<optim::LinearWarmup>(optimizer, /*warmup_steps=*/std::max<int64_t>(1, warmup),
                                               /*start_factor=*/warmup > 0 ? c.warmup_start_factor : 1.0,
                                               std::move(after));
}

}  // namespace trainer
