// optim/grad_scaler.h — GradScaler: dynamic loss scaling for mixed-precision training, as
// torch.amp.GradScaler. The loss is multiplied by a large scale before backward, so that small
// gradients do not underflow in a 16-bit dtype; the gradients are divided by it again before the
// optimizer steps, and a step whose gradients hold an inf or NaN is skipped:
//
//   optim::GradScaler scaler;                       // init_scale 2^16, growth_interval 2000
//   for (auto& batch : loader) {
//     opt.zero_grad();
//     scaler.scale(loss_fn(model, batch)).backward();
//     scaler.unscale_(opt);                         // optional: only to read or clip true gradients
//     optim::clip_grad_norm(model.parameters(), 1.0);
//     scaler.step(opt);                             // unscale_ if not done; opt.step() unless inf/NaN
//     scaler.update();                              // back off after an inf/NaN, grow after a clean run
//   }
//
// update(): any inf/NaN since the last update -> scale *= backoff_factor, growth tracker = 0;
// otherwise the tracker counts one more clean step, and at growth_interval the scale is
// multiplied by growth_factor (unless that would overflow float32) and the tracker restarts.
// The scale is a float32, as PyTorch keeps it; gradients of every floating dtype are unscaled
// (multiplied by the float32 reciprocal of the scale) and checked by tensor ops on their own
// device, with one host read per unscale_.
// Every parameter of the optimizer with a gradient is unscaled, frozen ones too (as PyTorch).
// unscale_ and step are once per optimizer between two update() calls (several optimizers may
// share one scaler); a second call is a std::logic_error, as is update() without a step since
// the last one (unless it is given new_scale).
// A disabled scaler (enabled = false) is a pass-through: scale() returns the loss, step() is
// opt.step(), get_scale() is 1, state_dict() is empty.
//
// Data parallelism: whether a step is skipped must be the same decision on every rank, or the
// replicas diverge. set_found_inf_reducer() installs a function that turns this rank's flag into
// the flag of all ranks; unscale_ calls it once per optimizer on every rank (a collective).
// dist::sync_grad_scaler (dist/grad_scaler_sync.h) installs a MAX all-reduce.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>

#include "minidl/optim/optimizer.h"

namespace minidl::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16; > 0
  double growth_factor = 2.0;  // > 1
  double backoff_factor = 0.5;  // in (0, 1)
  int64_t growth_interval = 2000;  // clean steps before the scale grows; >= 1
  bool enabled = true;
};

class GradScaler {
 public:
  // Throws std::invalid_argument naming the first bad option.
  explicit GradScaler(const GradScalerOptions& options = {});

  // loss * scale (the loss itself when disabled); backward from it gives scaled gradients.
  Variable scale(const Variable& loss) const;
  // Divides every gradient of `optimizer`'s parameters by the scale in place and records
  // whether any of them held an inf or NaN (after the reducer, when one is set).
  void unscale_(Optimizer& optimizer);
  // unscale_(optimizer) unless done since the last update(), then optimizer.step() unless an
  // inf or NaN was found. Returns whether the optimizer stepped.
  bool step(Optimizer& optimizer);
  // Adjusts the scale from this iteration's steps (see above), or sets it to new_scale, and
  // forgets the per-optimizer records.
  void update(std::optional<double> new_scale = std::nullopt);

  double get_scale() const;  // 1 when disabled
  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }

  // fn(found_inf on this rank) -> found_inf as every rank must see it. Empty: the local flag.
  void set_found_inf_reducer(std::function<bool(bool)> fn) { reducer_ = std::move(fn); }

  // 0-d float64 tensors named as PyTorch's: scale, growth_factor, backoff_factor,
  // growth_interval, _growth_tracker. Empty when disabled.
  TensorMap state_dict() const;
  // Restores all five (a resumed run continues the identical sequence). A no-op when disabled;
  // an empty, incomplete or invalid dict is a std::invalid_argument naming the key, and the
  // scaler is unchanged then.
  void load_state_dict(const TensorMap& dict);

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct OptimizerRecord {
    Stage stage = Stage::Ready;
    bool found_inf = false;
  };

  GradScalerOptions options_;
  float scale_;  // float32, as torch keeps it
  int64_t growth_tracker_ = 0;
  std::map<const Optimizer*, OptimizerRecord> records_;  // since the last update()
  std::function<bool(bool)> reducer_;
};

}  // namespace minidl::optim
