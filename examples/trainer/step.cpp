// examples/trainer/step.cpp — the training steps and the non-finite watch (see step.h).
#include "examples/trainer/step.h"

#include <stdexcept>

#include "minidl/autograd/autocast.h"
#include "minidl/autograd/ops.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/grad_scaler_sync.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/ops.h"
#include "minidl/tensor/random.h"

namespace trainer {

namespace {

// splitmix64's finaliser: a well-mixed 64-bit function of z.
uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t step_seed(uint64_t seed, int64_t epoch, int64_t step, int rank) {
  return mix64(mix64(mix64(seed ^ static_cast<uint64_t>(epoch)) ^ static_cast<uint64_t>(step)) ^
               static_cast<uint64_t>(rank));
}

uint64_t shard_seed(uint64_t seed, int64_t epoch, int64_t sample) {
  return mix64(mix64(mix64(seed ^ static_cast<uint64_t>(epoch)) ^ 0x6d6963726f736864ULL) ^
               static_cast<uint64_t>(sample));
}

NonFiniteWatch::NonFiniteWatch(minidl::Device device)
    : state_(minidl::from_vector<double>({-1, 0, 0, 0, 0, 0}, {6}).to(device)) {}

namespace {

// (1) float64: how many values of t are not finite.
minidl::Tensor count_non_finite(const minidl::Tensor& t) {
  const double n = static_cast<double>(t.numel());
  return minidl::add(minidl::neg(minidl::sum(minidl::isfinite(t)).to(minidl::DType::Float64)), n).reshape({1});
}

}  // namespace

void NonFiniteWatch::add(const minidl::Tensor& loss, const minidl::Tensor& input, const minidl::Tensor& logits,
                         int64_t step) {
  constexpr minidl::DType f64 = minidl::DType::Float64;
  const minidl::Device dev = state_.device();
  const minidl::Tensor value = loss.to(f64).reshape({1});  // (1)
  const auto number = [&](double v) { return minidl::full({1}, v, f64, dev); };  // a fill: no host copy
  const minidl::Tensor now = minidl::cat({number(static_cast<double>(step)), value, count_non_finite(input),
                                          number(static_cast<double>(input.numel())), count_non_finite(logits),
                                          number(static_cast<double>(logits.numel()))},
                                         0);  // (6): this step's record
  const minidl::Tensor none_yet = minidl::lt(state_.narrow(0, 0, 1), number(0.0));
  // keep the state unless no loss was bad so far and this one is: where(none yet, finite, 1)
  const minidl::Tensor keep = minidl::where(none_yet, minidl::isfinite(value), number(1.0));
  state_ = minidl::where(keep, state_, now);
}

std::optional<NonFiniteWatch::Found> NonFiniteWatch::first() const {
  const std::vector<double> s = state_.to_vector<double>();
  if (s[0] < 0) return std::nullopt;
  const auto n = [&](size_t i) { return static_cast<int64_t>(s[i]); };
  return Found{.step = n(0), .loss = s[1], .input_bad = n(2), .input_numel = n(3), .logits_bad = n(4), .logits_numel = n(5)};
}

minidl::DType autocast_dtype_of(const std::string& precision) {
  if (precision == "fp32") return minidl::DType::Float32;
  if (precision == "bf16") return minidl::DType::BFloat16;
  if (precision == "fp16") return minidl::DType::Float16;
  throw std::invalid_argument("TRAIN.PRECISION must be fp32, bf16 or fp16, got '" + precision + "'");
}

std::unique_ptr<minidl::optim::GradScaler> make_grad_scaler(const std::string& precision) {
  auto scaler = std::make_unique<minidl::optim::GradScaler>(
      minidl::optim::GradScalerOptions{.enabled = autocast_dtype_of(precision) == minidl::DType::Float16});
  minidl::dist::sync_grad_scaler(*scaler);
  return scaler;
}

namespace {

// The end of a step: the gradients combined over the ranks, the optimizer stepped unless a
// gradient is inf or NaN (on any rank), the scale updated. A disabled scaler steps the
// optimizer through ddp.step (timed).
void finish_step(minidl::dist::DataParallel& ddp, minidl::optim::Optimizer& optimizer,
                 minidl::optim::GradScaler& scaler) {
  if (!scaler.is_enabled()) return ddp.step(optimizer);
  ddp.finish();
  scaler.step(optimizer);
  scaler.update();
}

}  // namespace

void train_step(minidl::dist::DataParallel& ddp, minidl::optim::Optimizer& optimizer,
                minidl::optim::GradScaler& scaler, const minidl::Tensor& input, const minidl::Tensor& target,
                int64_t global_step, DeviceTotals& totals, NonFiniteWatch& watch, minidl::DType precision) {
  optimizer.zero_grad();
  minidl::Variable logits, loss;
  {
    minidl::autocast guard(precision);
    logits = ddp.forward(minidl::Variable(input));  // (B, 10) float32
    loss = minidl::cross_entropy(logits, target);  // mean over this rank's batch, in float32
  }
  watch.add(loss.data(), input, logits.data(), global_step);  // NaN or Inf: recorded on the device, read at a check
  scaler.scale(loss).backward();  // the loss itself unless fp16
  finish_step(ddp, optimizer, scaler);
  totals.add(logits.data(), target, loss.data());  // counted on the device
}

// [tutorial:deterministic-step]
void deterministic_step(minidl::dist::DataParallel& ddp, minidl::optim::Optimizer& optimizer,
                        minidl::optim::GradScaler& scaler, const TrainConfig& cfg, int64_t epoch, int64_t step,
                        int64_t global_step, const minidl::Tensor& input, const minidl::Tensor& target,
                        OrderedTotals& totals, NonFiniteWatch& watch) {
  const int64_t m = cfg.micro_batch, n = input.size(0) / m;  // shards on this rank
  const int64_t first = minidl::dist::rank() * n, K = n * minidl::dist::world_size();
  optimizer.zero_grad();
  for (int64_t j = 0; j < n; ++j) {
    const int64_t shard = first + j;  // global shard index
    minidl::manual_seed(shard_seed(cfg.seed, epoch, step * cfg.global_batch_size + shard * m));
    const minidl::Tensor x = input.narrow(0, j * m, m), y = target.narrow(0, j * m, m);
    minidl::Variable logits, loss;
    {
      minidl::autocast guard(autocast_dtype_of(cfg.precision));
      logits = ddp.forward(minidl::Variable(x));  // (m, 10)
      loss = minidl::cross_entropy(logits, y);  // mean over the shard
    }
    watch.add(loss.data(), x, logits.data(), global_step);
    scaler.scale(loss).backward();  // DDP keeps the shard's gradient
    totals.add(step * K + shard, logits.data(), y, loss.data());
  }
  finish_step(ddp, optimizer, scaler);
}
// [/tutorial:deterministic-step]

}  // namespace trainer
