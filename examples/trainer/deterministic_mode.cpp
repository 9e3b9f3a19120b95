// examples/trainer/deterministic_mode.cpp — --deterministic (see mode.h): the same bits on any
// number of processes and threads. Each global batch is cut into micro-shards of m samples, rank
// r takes one contiguous run of them; DeterministicDDP sums the shard gradients in one fixed tree
// (ghost batch norm for every SyncBatchNorm); every loss and hit sum, in training and in
// validation, is recorded under its shard's global index and folded in index order
// (OrderedTotals); after each epoch every replica must hold the same bits.
#include <cstdio>

#include "examples/trainer/mode.h"
#include "minidl/autograd/ops.h"
#include "minidl/dist/deterministic_ddp.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/sync_batchnorm.h"

namespace trainer {

namespace {

// FNV-1a over every tensor of the state dict (names and bytes, in name order).
std::string weights_hash(const minidl::nn::Module& model) {
  uint64_t h = 0xcbf29ce484222325ULL;
  auto mix = [&h](const unsigned char* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  };
  for (const auto& [name, tensor] : model.state_dict()) {
    const minidl::Tensor c = tensor.cpu().contiguous();  // hashed on the host (a no-op for CPU tensors)
    mix(reinterpret_cast<const unsigned char*>(name.data()), name.size());
    mix(static_cast<const unsigned char*>(c.raw_data()),
        static_cast<size_t>(c.numel()) * minidl::element_size(c.dtype()));
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// Validation in micro-shards of m test images dealt to the ranks in turn (shard s on rank s % R:
// the loader's batch = its sampler's chunk = m), each shard's sums recorded under its index and
// folded in index order — the same figures, to the bit, on any number of processes.
// max_shards: the first shards only (-1: all).
Totals evaluate_deterministic(minidl::nn::Module& model, minidl::data::DataLoader& loader, int64_t max_shards,
                              minidl::Device device) {
  model.eval();
  minidl::NoGradGuard no_grad;
  OrderedTotals totals;
  int64_t j = 0;
  for (auto& batch : loader) {
    const int64_t shard = minidl::dist::rank() + j++ * minidl::dist::world_size();
    if (max_shards >= 0 && shard >= max_shards) break;
    const minidl::Tensor input = batch.input.to(device), target = batch.target.to(device);
    minidl::Variable logits = model(minidl::Variable(input));  // (m, 10)
    totals.add(shard, logits.data(), target, minidl::cross_entropy(logits, target).data());
  }
  loader.reset();
  return totals.fold();
}

class DeterministicMode : public Mode {
 public:
  DeterministicMode(const TrainConfig& cfg, minidl::Device device, const ValSet& val)
      : cfg_(cfg),
        device_(device),
        val_loader_(make_val_loader(val, cfg.micro_batch, cfg.micro_batch)),
        val_limit_(val.smoke_test ? kSmokeValBatches * cfg.global_batch_size / cfg.micro_batch : -1) {}

  // One contiguous run of each global batch per rank.
  int64_t sampler_chunk() const override { return cfg_.global_batch_size / minidl::dist::world_size(); }
  // Whole global batches only: the last, smaller one would not cut into whole micro-shards on
  // every process count.
  int64_t full_steps(int64_t images, int64_t) const override { return images / cfg_.global_batch_size; }

  void prepare(minidl::nn::Module& model, Log& log) const override {
    const int converted = minidl::dist::convert_sync_batchnorm(model);  // the ones --sync-bn left, if any
    log.line("deterministic: batch norm over each micro-shard of " + std::to_string(cfg_.micro_batch) +
             " images (ghost batch norm)" +
             (converted > 0 ? ", " + std::to_string(converted) + " layer(s) converted" : ""));
  }
  std::unique_ptr<minidl::dist::DataParallel> wrap(minidl::nn::Module& model) const override {
    return std::make_unique<minidl::dist::DeterministicDDP>(model);
  }

  // The folded totals are the same on every rank: each starts from them.
  void start_epoch(const Totals& resumed) override {
    sums_ = OrderedTotals();
    sums_.folded = resumed;
  }
  void step(minidl::dist::DataParallel& dp, minidl::optim::Optimizer& optimizer, minidl::optim::GradScaler& scaler,
            int64_t epoch, int64_t step, int64_t global_step, const minidl::Tensor& input, const minidl::Tensor& target,
            NonFiniteWatch& watch) override {
    deterministic_step(dp, optimizer, scaler, cfg_, epoch, step, global_step, input, target, sums_, watch);
  }
  double running_loss() const override { return sums_.local().loss(); }
  Totals epoch_totals() override { return sums_.fold(); }

  std::string rng_description() const override {
    return "init: manual_seed(seed); data order: DistributedSampler(seed).set_epoch(epoch), resumed mid-epoch at this "
           "rank's index step x batch per process; the micro-shard starting at sample i of epoch e's order: "
           "manual_seed(shard_seed(seed, e, i))";
  }
  uint64_t next_step_seed(int64_t epoch, int64_t step) const override {
    return shard_seed(cfg_.seed, epoch, step * cfg_.global_batch_size);
  }
  bool bit_identical_on_any_world_size() const override { return true; }
  // Every replica must hold the same bits after each epoch.
  void after_epoch(const minidl::nn::Module& model, int64_t epoch) const override {
    const std::vector<std::string> hashes = minidl::dist::all_gather_object(weights_hash(model));
    for (size_t r = 1; r < hashes.size(); ++r)
      if (hashes[r] != hashes[0])
        throw std::runtime_error("--deterministic: after epoch " + std::to_string(epoch) + " rank " +
                                 std::to_string(r) + "'s weights (hash " + hashes[r] + ") differ from rank 0's (" +
                                 hashes[0] + ")");
  }
  std::string final_note(const minidl::nn::Module& model) const override {
    return "final weights hash (fnv1a64): " + weights_hash(model);
  }

  Totals validate(minidl::nn::Module& model) override {
    return evaluate_deterministic(model, *val_loader_, val_limit_, device_);
  }

 private:
  const TrainConfig cfg_;
  const minidl::Device device_;
  std::unique_ptr<minidl::data::DataLoader> val_loader_;
  const int64_t val_limit_;  // shards in all; -1: all
  OrderedTotals sums_;  // this epoch's, folded in shard order
};

}  // namespace

std::unique_ptr<Mode> make_deterministic_mode(const TrainConfig& cfg, minidl::Device device, const ValSet& val) {
  return std::make_unique<DeterministicMode>(cfg, device, val);
}

}  // namespace trainer
