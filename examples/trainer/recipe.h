// examples/trainer/recipe.h — the optimizer and LR schedule of a TrainConfig (the recipes of
// docs/reference-models.md live in configs/*.yaml):
//   mlp  Adam  lr 1e-3                      cosine
//   cnn  SGD   lr 0.05 momentum 0.9 wd 5e-4 cosine
//   vit  AdamW lr 1e-3 wd 0.05              1 epoch linear warm-up, then cosine
// The schedule is stepped once per iteration (not per epoch), so the warm-up ramps smoothly and
// the lr at any point depends only on the iterations done — which the global batch of the
// recipe fixes whatever the number of processes. Cosine decays to 0 at the last iteration.
// Part of the `train` example (examples/train.cpp); not a library module.
#pragma once
#include <cstdint>
#include <memory>

#include "examples/trainer/config.h"
#include "minidl/nn/module.h"
#include "minidl/optim/lr_scheduler.h"
#include "minidl/optim/optimizer.h"

namespace trainer {

std::unique_ptr<minidl::optim::Optimizer> make_optimizer(const TrainConfig& config, minidl::nn::Module& model);
// steps_per_epoch: optimizer steps in one epoch (batches per rank).
std::unique_ptr<minidl::optim::LRScheduler> make_scheduler(const TrainConfig& config,
                                                           minidl::optim::Optimizer& optimizer,
                                                           int64_t steps_per_epoch);

}  // namespace trainer
