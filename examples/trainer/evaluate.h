// examples/trainer/evaluate.h — `train --eval --pretrained FILE`: the test accuracy of a saved
// model, computed over every rank's exact shard of the test set (sums all-reduced), and whether it
// matches what the checkpoint recorded when it was saved.
// Part of the `train` example (examples/train.cpp); not a library module.
#pragma once
#include <string>

#include "examples/trainer/config.h"
#include "examples/trainer/mode.h"
#include "examples/trainer/progress.h"

namespace trainer {

// Every rank calls it (validation is a collective); rank 0's `log` prints. A checkpoint holding
// non-finite values is a std::runtime_error naming it.
void evaluate_checkpoint(const std::string& path, const TrainConfig& config, minidl::Device device, const ValSet& val,
                         Log& log);

}  // namespace trainer
