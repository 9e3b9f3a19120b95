// examples/trainer/mode.h — how `train` trains: the ordinary data-parallel way, or --deterministic
// (the same bits on any number of processes). Everything that differs between the two — how the
// data is dealt to the ranks, the model's batch norm, the DataParallel algorithm, the step, how
// the epoch's sums are added, validation, what a checkpoint says about the random streams — is
// behind this one interface, chosen once (make_mode): examples/train.cpp is the same code for
// both.
//   ordinary_mode.cpp       DistributedDataParallel; each rank's sums all-reduced
//   deterministic_mode.cpp  DeterministicDDP over micro-shards; every sum folded in one fixed order
// Part of the `train` example (examples/train.cpp); not a library module.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "examples/trainer/config.h"
#include "examples/trainer/metrics.h"
#include "examples/trainer/progress.h"
#include "examples/trainer/step.h"
#include "minidl/data/data_all.h"
#include "minidl/dist/data_parallel.h"

namespace trainer {

// --smoke-test: validation batches per rank.
constexpr int64_t kSmokeValBatches = 2;

// What validation reads: the test set and how to load it.
struct ValSet {
  std::shared_ptr<const minidl::data::Dataset> images;
  int num_workers = 0;
  bool pin_memory = false;  // CUDA runs: pinned host batches
  bool smoke_test = false;  // the first kSmokeValBatches batches per rank only
};

class Mode {
 public:
  virtual ~Mode() = default;

  // ---- data ----
  // The train sampler's chunk: each rank takes contiguous runs of this many samples.
  virtual int64_t sampler_chunk() const = 0;
  // Training steps in a full epoch of `images` images, whose loader yields `loader_batches`.
  virtual int64_t full_steps(int64_t images, int64_t loader_batches) const = 0;

  // ---- model ----
  // Readies the model before it is wrapped (deterministic: every BatchNorm a SyncBatchNorm).
  virtual void prepare(minidl::nn::Module& model, Log& log) const = 0;
  virtual std::unique_ptr<minidl::dist::DataParallel> wrap(minidl::nn::Module& model) const = 0;

  // ---- one epoch of training ----
  // Starts the epoch's sums; `resumed`: those of the epoch's first steps, from a mid-epoch
  // checkpoint (zeros otherwise).
  virtual void start_epoch(const Totals& resumed) = 0;
  // One training step (it queues work only: no host read but fp16's scaler flag; see step.h).
  virtual void step(minidl::dist::DataParallel& dp, minidl::optim::Optimizer& optimizer,
                    minidl::optim::GradScaler& scaler, int64_t epoch, int64_t step, int64_t global_step,
                    const minidl::Tensor& input, const minidl::Tensor& target, NonFiniteWatch& watch) = 0;
  // This rank's mean training loss in the epoch so far (for the progress line; a host read).
  virtual double running_loss() const = 0;
  // The epoch's sums so far over all ranks (a collective: every rank calls it).
  virtual Totals epoch_totals() = 0;

  // ---- checkpoints and checks ----
  // How every random stream is keyed (a checkpoint's "rng" metadata), and the seed of the step
  // after `step` steps of epoch `epoch`.
  virtual std::string rng_description() const = 0;
  virtual uint64_t next_step_seed(int64_t epoch, int64_t step) const = 0;
  // Whether a run resumed on another number of processes still ends with the same bits.
  virtual bool bit_identical_on_any_world_size() const = 0;
  // After each epoch (a collective in deterministic mode: the replicas must be identical).
  virtual void after_epoch(const minidl::nn::Module& model, int64_t epoch) const = 0;
  // At the end of the run: what the log should say besides the accuracy ("" for nothing).
  virtual std::string final_note(const minidl::nn::Module& model) const = 0;

  // ---- validation ----
  // The test set's loss and hits over all ranks (a collective), in eval mode without gradients.
  virtual Totals validate(minidl::nn::Module& model) = 0;
};

// The mode of `cfg` (cfg.deterministic), for this rank (dist::init() done) on `device`.
std::unique_ptr<Mode> make_mode(const TrainConfig& cfg, minidl::Device device, const ValSet& val);

// A loader over this rank's share of the test set (the exact sampler: no padded duplicates, so
// the all-reduced sums are those of one process evaluating every image once).
std::unique_ptr<minidl::data::DataLoader> make_val_loader(const ValSet& val, int64_t batch_per_rank, int64_t chunk);

}  // namespace trainer
