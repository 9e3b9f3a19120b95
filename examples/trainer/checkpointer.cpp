// examples/trainer/checkpointer.cpp — the trainer's save points and checkpoint metadata (see
// checkpointer.h).
#include "examples/trainer/checkpointer.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "examples/trainer/checkpoint.h"
#include "examples/trainer/checkpoint_policy.h"
#include "minidl/dist/distributed.h"
#include "minidl/tensor/creation.h"

namespace trainer {

namespace {

// A double as text that reads back to the same bits.
std::string exact_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

Checkpointer::Checkpointer(const Run& run) : run_(run), check_every_(std::max<int64_t>(1, run.steps_per_epoch / 10)) {}

bool Checkpointer::saves_after_epoch(int64_t epochs_done) const {
  return epochs_done % run_.config.save_every == 0 || epochs_done == run_.config.epochs;
}

// A collective when --save-every-minutes is set: every rank, at every check.
bool Checkpointer::minutes_passed() {
  if (run_.config.save_every_minutes <= 0) return false;
  const double minutes =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - last_checkpoint_).count() / 60;
  minidl::Tensor due = minidl::full({1}, run_.rank == 0 && minutes >= run_.config.save_every_minutes ? 1.0 : 0.0,
                                    minidl::DType::Float32, run_.device);
  minidl::dist::broadcast(due, 0);  // rank 0's decision
  return due.item() != 0.0;
}

bool Checkpointer::mid_epoch_due(int64_t epoch, int64_t step) {
  if (step >= run_.steps_per_epoch) return false;  // the epoch's last step gets the end-of-epoch checkpoint
  const TrainConfig& cfg = run_.config;
  const bool by_steps = cfg.save_every_steps > 0 && (epoch * run_.steps_per_epoch + step) % cfg.save_every_steps == 0;
  const bool by_time = step % check_every_ == 0 && minutes_passed();
  return by_steps || by_time;
}

// The step's check covers the loss; the saved state itself is checked in full here.
void Checkpointer::check_finite(const std::string& when) const {
  require_finite(run_.model.state_dict(), when + " the model", "not saving it; " + kept_checkpoint_note(run_.out_dir));
}

// step > 0: a mid-epoch checkpoint after `step` steps of epoch `epochs_done` (0-based), with the
// epoch's partial train sums.
minidl::Metadata Checkpointer::metadata(int64_t epochs_done, int64_t step, const Totals& val, const Totals* partial,
                                        double epoch_lr) const {
  const TrainConfig& cfg = run_.config;
  minidl::Metadata meta = {{"model", cfg.model},
                           {"epoch", std::to_string(epochs_done)},
                           {"step", std::to_string(step)},
                           {"global_step", std::to_string(epochs_done * run_.steps_per_epoch + step)},
                           {"samples_seen_in_epoch", std::to_string(step * cfg.global_batch_size)},
                           {"global_batch_size", std::to_string(cfg.global_batch_size)},
                           {"config", to_yaml(cfg)},
                           {"seed", std::to_string(cfg.seed)},
                           {"rng", run_.mode.rng_description()},
                           {"next_step_rng_seed", std::to_string(run_.mode.next_step_seed(epochs_done, step))},
                           {"world_size", std::to_string(run_.world_size)},
                           {"val_loss", format("%.6f", val.loss())},
                           {"val_acc1", format("%.2f", val.acc1())},
                           {"val_acc5", format("%.2f", val.acc5())},
                           {"val_correct1", std::to_string(static_cast<int64_t>(val.correct1))},
                           {"val_count", std::to_string(static_cast<int64_t>(val.count))}};
  if (partial) {
    meta["train_loss_sum"] = exact_text(partial->loss_sum);
    meta["train_correct1"] = exact_text(partial->correct1);
    meta["train_correct5"] = exact_text(partial->correct5);
    meta["train_count"] = exact_text(partial->count);
    meta["epoch_lr"] = exact_text(epoch_lr);
  }
  return meta;
}

// `name` and checkpoint_last, both atomic (a crash leaves the previous file intact).
void Checkpointer::save(const std::string& name, const minidl::Metadata& meta) const {
  save_checkpoint(run_.out_dir + name, run_.model, run_.optimizer, run_.scaler, run_.scheduler, meta);
  save_checkpoint(run_.out_dir + "/checkpoint_last.safetensors", run_.model, run_.optimizer, run_.scaler,
                  run_.scheduler, meta);
}

void Checkpointer::save_mid_epoch(int64_t epoch, int64_t step, double epoch_lr, const Totals& val) {
  const Totals partial = run_.mode.epoch_totals();  // a collective: every rank takes part
  if (run_.rank != 0) return;
  check_finite("after step " + std::to_string(step) + " of epoch " + std::to_string(epoch + 1));
  char name[64];
  std::snprintf(name, sizeof name, "/checkpoint_step_%07lld.safetensors",
                static_cast<long long>(epoch * run_.steps_per_epoch + step));
  save(name, metadata(epoch, step, val, &partial, epoch_lr));
  run_.log.line("saved " + run_.out_dir + name + " (epoch " + std::to_string(epoch + 1) + ", step " +
                std::to_string(step) + ")");
  prune_step_checkpoints(run_.out_dir);
  last_checkpoint_ = std::chrono::steady_clock::now();  // (only rank 0's clock counts)
}

void Checkpointer::save_epoch_end(int64_t epochs_done, const Totals& val) {
  if (!saves_after_epoch(epochs_done)) return;
  check_finite("after epoch " + std::to_string(epochs_done));
  char name[64];
  std::snprintf(name, sizeof name, "/checkpoint_epoch_%03lld.safetensors", static_cast<long long>(epochs_done));
  save(name, metadata(epochs_done, 0, val, nullptr, 0.0));
  run_.log.line("saved " + run_.out_dir + name);
}

void Checkpointer::epoch_done(int64_t epochs_done) {
  if (saves_after_epoch(epochs_done)) last_checkpoint_ = std::chrono::steady_clock::now();
}

void fail_non_finite(const NonFiniteWatch::Found& bad, int64_t now, const minidl::nn::Module& model,
                     const std::string& out_dir) {
  const auto counted = [](const std::string& what, int64_t k, int64_t n) {
    return what + " (" + std::to_string(k) + " of " + std::to_string(n) + " values are not finite)";
  };
  std::string first = bad.input_bad > 0    ? counted("the input batch", bad.input_bad, bad.input_numel)
                      : bad.logits_bad > 0 ? counted("the logits", bad.logits_bad, bad.logits_numel)
                                           : "none (the loss itself overflowed)";
  if (bad.step != now) first += "; found at the check of step " + std::to_string(now);
  if (const std::string m = first_non_finite(model.state_dict()); !m.empty())
    first += "; the model now holds non-finite values (model." + m + ")";
  throw std::runtime_error("non-finite loss (" + format("%g", bad.loss) + ") at step " + std::to_string(bad.step) +
                           "; first non-finite tensor: " + first + ". Stopped without saving: " +
                           kept_checkpoint_note(out_dir) + " (a learning rate too high? try a lower --lr)");
}

}  // namespace trainer
