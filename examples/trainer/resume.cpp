// examples/trainer/resume.cpp — loading a checkpoint to continue a run (see resume.h).
#include "examples/trainer/resume.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "examples/trainer/checkpoint.h"
#include "examples/trainer/launch.h"

namespace trainer {

ResumePoint resume(const ResumeFrom& from, minidl::nn::Module& model, minidl::optim::Optimizer& optimizer,
                   minidl::optim::GradScaler& scaler, minidl::optim::LRScheduler& scheduler, Log& log) {
  const std::string metrics_path = from.out_dir + "/metrics.jsonl";
  ResumePoint at;
  if (!from.checkpoint) {
    if (from.restart_count > 0) {
      log.line("restart " + std::to_string(from.restart_count) + ": no checkpoint in " + from.out_dir +
               " yet; training from the start");
      if (from.rank == 0) keep_metrics_up_to(metrics_path, 0);
    }
    return at;
  }
  const std::string& path = *from.checkpoint;
  const auto load_start = std::chrono::steady_clock::now();
  Checkpoint ck = load_checkpoint(path);
  require_finite(ck.model, path, "refusing to resume from it");
  model.load_state_dict(ck.model);
  optimizer.load_state_dict(ck.optim);
  if (!ck.scaler.empty()) scaler.load_state_dict(ck.scaler);  // an fp16 run's scale and growth tracker
  scheduler.load_state_dict(ck.sched);
  at.epoch = ck.epoch;
  at.step = ck.step;
  if (const auto saved = ck.metadata.find("global_batch_size");
      saved != ck.metadata.end() && ck.metadata["world_size"] != std::to_string(from.world_size) &&
      saved->second != std::to_string(from.global_batch_size))
    throw UsageError(
        path + " was trained with a global batch of " + saved->second + " on " + ck.metadata["world_size"] +
        " process(es); this run's is " + std::to_string(from.global_batch_size) + " on " +
        std::to_string(from.world_size) +
        " (--batch-size is per process): resuming would change the optimisation; give --global-batch-size " +
        saved->second + " instead, a size every number of processes the run may have divides");
  if (at.step >= from.steps_per_epoch)
    throw UsageError(path + " was saved after step " + std::to_string(at.step) + " of an epoch, but this run has " +
                     std::to_string(from.steps_per_epoch) +
                     " steps per epoch (the data set or the batch size changed)");
  char loaded[64];
  std::snprintf(loaded, sizeof loaded, " (loaded in %.0f ms)",
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - load_start).count());
  const std::string resumed =
      (from.restart_count > 0 ? "restart " + std::to_string(from.restart_count) + ": " : std::string()) +
      "resumed from " + path;
  if (at.step > 0) {
    const auto value = [&](const char* key) {
      if (!ck.metadata.count(key))
        throw std::runtime_error(path + ": a mid-epoch checkpoint without its '" + key + "' metadata");
      return std::stod(ck.metadata.at(key));
    };
    at.train = {.loss_sum = value("train_loss_sum"),
                .correct1 = value("train_correct1"),
                .correct5 = value("train_correct5"),
                .count = value("train_count")};
    at.epoch_lr = value("epoch_lr");
    log.line(resumed + " after step " + std::to_string(at.step) + " of epoch " + std::to_string(at.epoch + 1) + " (" +
             ck.metadata["samples_seen_in_epoch"] + " samples of it done)" + loaded);
  } else {
    log.line(resumed + " after epoch " + std::to_string(at.epoch) + loaded);
  }
  // Into the directory of the run it continues: the lines of epochs trained again go.
  std::error_code ec;
  if (from.rank == 0 && std::filesystem::equivalent(std::filesystem::path(path).parent_path(), from.out_dir, ec))
    keep_metrics_up_to(metrics_path, at.epoch);
  if (ck.metadata["world_size"] != std::to_string(from.world_size) && !from.bit_identical_on_any_world_size)
    log.line("note: the checkpoint was trained with " + ck.metadata["world_size"] + " process(es); with " +
             std::to_string(from.world_size) + " the result will not be bit-identical to an uninterrupted run");
  return at;
}

}  // namespace trainer
