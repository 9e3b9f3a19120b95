// examples/trainer/ordinary_mode.cpp — the ordinary data-parallel mode (see mode.h): each rank
// takes every R-th sample, DistributedDataParallel averages the gradients, each rank's sums stay
// on its device and are all-reduced at a check; validation sums are all-reduced the same way.
#include <optional>

#include "examples/trainer/mode.h"
#include "minidl/dist/ddp.h"
#include "minidl/dist/distributed.h"
#include "minidl/autograd/ops.h"
#include "minidl/tensor/random.h"

namespace trainer {

namespace {

// Validation on the test set: every rank evaluates its shard, then the sums are all-reduced.
// [tutorial:evaluate]
Totals evaluate(minidl::nn::Module& model, minidl::data::DataLoader& loader, int64_t max_batches,
                minidl::Device device) {
  model.eval();
  minidl::NoGradGuard no_grad;
  DeviceTotals local(device);  // the sums, kept on the device
  int64_t batches = 0;
  for (auto& batch : loader) {
    if (batches++ == max_batches) break;
    const minidl::Tensor input = batch.input.to(device), target = batch.target.to(device);  // no-op on the CPU
    minidl::Variable logits = model(minidl::Variable(input));  // (B, 10)
    local.add(logits.data(), target, minidl::cross_entropy(logits, target).data());  // no host read
  }
  loader.reset();
  return local.read().all_reduced();  // one host read; loss, top-1 and top-5 hits and counts summed over ranks
}
// [/tutorial:evaluate]

class OrdinaryMode : public Mode {
 public:
  OrdinaryMode(const TrainConfig& cfg, minidl::Device device, const ValSet& val)
      : cfg_(cfg),
        device_(device),
        rank_(minidl::dist::rank()),
        val_loader_(make_val_loader(val, cfg.global_batch_size / minidl::dist::world_size(), 1)),
        val_limit_(val.smoke_test ? kSmokeValBatches : -1) {}

  int64_t sampler_chunk() const override { return 1; }
  int64_t full_steps(int64_t, int64_t loader_batches) const override { return loader_batches; }

  void prepare(minidl::nn::Module&, Log&) const override {}
  std::unique_ptr<minidl::dist::DataParallel> wrap(minidl::nn::Module& model) const override {
    return std::make_unique<minidl::dist::DistributedDataParallel>(model);
  }

  // The resumed sums are all-reduced with the others: rank 0 alone carries them.
  void start_epoch(const Totals& resumed) override { sums_.emplace(device_, rank_ == 0 ? resumed : Totals{}); }
  void step(minidl::dist::DataParallel& dp, minidl::optim::Optimizer& optimizer, minidl::optim::GradScaler& scaler,
            int64_t epoch, int64_t step, int64_t global_step, const minidl::Tensor& input, const minidl::Tensor& target,
            NonFiniteWatch& watch) override {
    minidl::manual_seed(step_seed(cfg_.seed, epoch, step, rank_));
    train_step(dp, optimizer, scaler, input, target, global_step, *sums_, watch, autocast_dtype_of(cfg_.precision));
  }
  double running_loss() const override { return sums_->read().loss(); }
  Totals epoch_totals() override { return sums_->read().all_reduced(); }

  std::string rng_description() const override {
    return "init: manual_seed(seed); data order: DistributedSampler(seed).set_epoch(epoch), resumed mid-epoch at this "
           "rank's index step x batch per process; while training step s of epoch e on rank r: "
           "manual_seed(step_seed(seed, e, s, r))";
  }
  uint64_t next_step_seed(int64_t epoch, int64_t step) const override { return step_seed(cfg_.seed, epoch, step, 0); }
  bool bit_identical_on_any_world_size() const override { return false; }
  void after_epoch(const minidl::nn::Module&, int64_t) const override {}
  std::string final_note(const minidl::nn::Module&) const override { return ""; }

  Totals validate(minidl::nn::Module& model) override { return evaluate(model, *val_loader_, val_limit_, device_); }

 private:
  const TrainConfig cfg_;
  const minidl::Device device_;
  const int rank_;
  std::unique_ptr<minidl::data::DataLoader> val_loader_;
  const int64_t val_limit_;  // batches per rank; -1: all
  std::optional<DeviceTotals> sums_;  // this rank's, on the device
};

}  // namespace

std::unique_ptr<Mode> make_ordinary_mode(const TrainConfig& cfg, minidl::Device device, const ValSet& val) {
  return std::make_unique<OrdinaryMode>(cfg, device, val);
}

}  // namespace trainer
