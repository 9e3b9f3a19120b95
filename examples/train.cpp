// examples/train.cpp — `train`: an MLP, a CNN or a ViT on Fashion-MNIST, data-parallel over N
// processes (DistributedDataParallel over NCCL on GPUs, over Gloo on CPUs), with the recipes of
// configs/*.yaml.
//
//   ./run.sh train                                   the CNN recipe, 2 CPU processes (no GPU)
//   build/examples/train --device cuda --epochs 1    one process per visible GPU
//   build/examples/train --model vit --epochs 3 --nproc 4
//   build/tools/minidl-run --nproc-per-node 2 build/examples/train --model mlp
//   build/examples/train --resume runs/cnn/checkpoint_last.safetensors --epochs 10
//   build/examples/train --eval --pretrained runs/cnn/checkpoint_last.safetensors
//   build/examples/train --help
//
// main() reads the flags and the recipe, decides GPU or CPU and how many processes
// (examples/trainer/launch.h), loads the data set once, and starts one process per rank with
// dist::spawn (or, launched by minidl-run, is already one of them). Every rank then
// runs train_worker(), which is the workflow of docs/tutorial.md, step by step:
//   pick the device (cuda:LOCAL_RANK % GPUs, or the CPU) -> init the process group (NCCL on GPUs,
//   Gloo on CPUs) -> DistributedSampler + set_epoch -> DataLoader -> model (same seed
//   everywhere) -> optional SyncBatchNorm -> model.to(device) -> DDP -> optimizer + per-iteration LR schedule ->
//   train loop -> exact distributed validation (sums all-reduced) -> rank 0: log, metrics.jsonl,
//   checkpoints -> barrier -> shutdown.
// Output (rank 0) goes to stdout and OUT/train.log; one JSON line per epoch to OUT/metrics.jsonl,
// drawn at the end into OUT/curves.png (--plot none: not); checkpoints to OUT/checkpoint_epoch_NNN.safetensors and OUT/checkpoint_last.safetensors (with
// --save-every-steps K or --save-every-minutes M also OUT/checkpoint_step_NNNNNNN.safetensors,
// mid-epoch, the newest three kept).
// The loss, the metrics' sums and the non-finite check stay on the device (examples/trainer/step.h),
// read on the host only every tenth of an epoch, before each checkpoint and at the epoch's end.
// Exit status: 0 done, 1 a failure while training, 2 a bad flag, config or data directory, or
// --device cuda where no GPU can be used ("no CUDA device present" / "built without CUDA").
// Failures: a non-finite loss stops the run naming the step and the first non-finite tensor (the
// last good checkpoint stays); with --max-restarts N (or minidl-run --max-restarts N) a failed
// group of processes is started again and resumes from the newest complete checkpoint in --out.
// A second run into an --out that holds a run is refused unless --resume or --overwrite.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "minidl/data/data_all.h"
#include "minidl/dist/ddp.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/distributed_sampler.h"
#include "minidl/dist/env.h"
#include "minidl/dist/spawn.h"
#include "minidl/dist/step_record.h"
#include "minidl/dist/sync_batchnorm.h"
#include "examples/trainer/checkpoint.h"
#include "examples/trainer/checkpoint_policy.h"
#include "examples/trainer/checkpointer.h"
#include "examples/trainer/cli.h"
#include "examples/trainer/config.h"
#include "examples/trainer/evaluate.h"
#include "examples/trainer/launch.h"
#include "examples/trainer/metrics.h"
#include "examples/trainer/mode.h"
#include "examples/trainer/plot.h"
#include "examples/trainer/progress.h"
#include "examples/trainer/recipe.h"
#include "examples/trainer/restarts.h"
#include "examples/trainer/resume.h"
#include "examples/trainer/step.h"
#include "examples/trainer/trace_window.h"
#include "minidl/kernels/cuda_api.h"
#include "minidl/nn/nn_all.h"

namespace data = minidl::data;
namespace dist = minidl::dist;
namespace nn = minidl::nn;
namespace optim = minidl::optim;
using minidl::Tensor;
using minidl::Variable;
using trainer::Launch;
using trainer::TrainConfig;
using trainer::UsageError;

namespace {

// --smoke-test: training batches per rank (validation: trainer::kSmokeValBatches).
constexpr int64_t kSmokeTrainBatches = 4;

// Everything main() decided, handed to every rank.
struct Run {
  trainer::CliOptions cli;
  TrainConfig config;
  std::string out_dir;
  bool cuda = false;  // one GPU per process (cuda:LOCAL_RANK % visible GPUs), NCCL between them
  int threads = 1;  // OpenMP threads per process
  std::shared_ptr<const data::Dataset> train_set, val_set;
  std::optional<std::string> resume_from;  // --resume, or after a restart the newest checkpoint in out_dir
  int restart_count = 0;  // restarts so far (MINIDL_RESTART_COUNT, or train --max-restarts)
  std::chrono::milliseconds dist_timeout = std::chrono::seconds(300);
};

using trainer::format;
std::string percent(double v) { return format("%.2f", v) + "%"; }

// This rank's device: cuda:(LOCAL_RANK % visible GPUs), made current for this process, or the CPU.
minidl::Device select_device(const Run& run) {
  if (!run.cuda) return minidl::Device::cpu();
  return minidl::Device::cuda(minidl::kernels::cuda::select_device_from_env());
}

// The test set as validation reads it.
trainer::ValSet val_set(const Run& run) {
  return {.images = run.val_set,
          .num_workers = run.config.num_workers,
          .pin_memory = run.cuda,
          .smoke_test = run.cli.smoke_test};
}

// --eval --pretrained FILE: evaluates a checkpoint and compares with the accuracy it recorded.
void eval_worker(const Run& run) {
  const minidl::Device device = select_device(run);
  dist::init({.backend = run.cuda ? "nccl" : "auto", .timeout = run.dist_timeout});
  omp_set_num_threads(run.threads);
  trainer::Log log(dist::rank() == 0, "");
  trainer::evaluate_checkpoint(*run.cli.pretrained, run.config, device, val_set(run), log);
  dist::barrier();
  dist::shutdown();
}

// One rank's training run.
void train_worker(const Run& run) {
  const TrainConfig& cfg = run.config;
  // [tutorial:init]
  // 1. Pick this process's device (on GPUs: cuda:LOCAL_RANK, one GPU per process) and join the
  //    process group: rendezvous at MASTER_ADDR:MASTER_PORT (set by dist::spawn or minidl-run),
  //    then an NCCL group (GPUs) or a Gloo group (CPUs) over all ranks. From here on, rank() and
  //    world_size() work.
  const minidl::Device device = select_device(run);
  dist::init({.backend = run.cuda ? "nccl" : "auto", .timeout = run.dist_timeout});
  const int rank = dist::rank();
  const int world = dist::world_size();
  // [/tutorial:init]
  omp_set_num_threads(run.threads);
  trainer::Log log(rank == 0, run.out_dir + "/train.log");
  // Ordinary or --deterministic: everything that differs, chosen once (examples/trainer/mode.h).
  const std::unique_ptr<trainer::Mode> mode = trainer::make_mode(cfg, device, val_set(run));
  const int64_t batch_per_rank = cfg.global_batch_size / world;
  log.line("train: model " + cfg.model + " on " + (run.cuda ? "cuda (one GPU per process)" : "cpu") + ", " +
           std::to_string(world) + " process(es) x " + std::to_string(run.threads) + " thread(s), batch " +
           std::to_string(batch_per_rank) + " per process (global " + std::to_string(cfg.global_batch_size) + "), " +
           std::to_string(cfg.epochs) + " epochs, out " + run.out_dir);

  // [tutorial:sampler]
  // 2. Each rank takes its own share of a permutation keyed by (seed, epoch): the same
  //    permutation on every rank, different slices (--deterministic: one contiguous run of each
  //    global batch per rank: the mode's chunk). The DataLoader's worker threads prefetch this rank's batches
  //    (into pinned memory on GPUs, for fast host -> device copies).
  auto train_sampler = std::make_shared<dist::DistributedSampler>(
      run.train_set->size(),
      dist::DistributedSamplerOptions{.shuffle = true, .seed = cfg.seed, .chunk = mode->sampler_chunk()});
  data::DataLoader train_loader(
      run.train_set,
      data::DataLoaderOptions{
          .batch_size = batch_per_rank, .num_workers = cfg.num_workers, .seed = cfg.seed, .pin_memory = run.cuda},
      train_sampler);
  // [/tutorial:sampler]
  dist::StepFile step_file(rank);  // the step, for a launcher's restart log (minidl-run, --max-restarts)
  // (main() refused a training set smaller than one global batch: at least one step per epoch.)
  const int64_t full_steps = mode->full_steps(run.train_set->size(), train_loader.size());
  const int64_t steps_per_epoch = run.cli.smoke_test ? std::min(full_steps, kSmokeTrainBatches) : full_steps;

  // [tutorial:model]
  // 3. The same seed on every rank gives the same initial weights (DDP broadcasts rank 0's
  //    anyway). SyncBatchNorm replaces BatchNorm before DDP wraps the model.
  minidl::manual_seed(cfg.seed);
  std::unique_ptr<nn::Module> model = nn::make_model(cfg.model);
  if (cfg.sync_bn) {
    const int converted = dist::convert_sync_batchnorm(*model);
    log.line("sync-bn: " + std::to_string(converted) + " BatchNorm layer(s) now synchronise their statistics");
  }
  mode->prepare(*model, log);  // --deterministic: ghost batch norm
  model->to(device);  // parameters and buffers onto this rank's GPU (no-op on the CPU)
  // [/tutorial:model]
  std::unique_ptr<optim::Optimizer> optimizer = trainer::make_optimizer(cfg, *model);
  std::unique_ptr<optim::GradScaler> scaler = trainer::make_grad_scaler(cfg.precision);  // fp16's loss scaling
  std::unique_ptr<optim::LRScheduler> scheduler = trainer::make_scheduler(cfg, *optimizer, steps_per_epoch);

  // Resumed (--resume, or a restart): the state and the position in the epoch of the checkpoint.
  const trainer::ResumePoint start =
      trainer::resume({.checkpoint = run.resume_from,
                       .restart_count = run.restart_count,
                       .out_dir = run.out_dir,
                       .rank = rank,
                       .world_size = world,
                       .steps_per_epoch = steps_per_epoch,
                       .global_batch_size = cfg.global_batch_size,
                       .bit_identical_on_any_world_size = mode->bit_identical_on_any_world_size()},
                      *model, *optimizer, *scaler, *scheduler, log);

  // [tutorial:ddp]
  // 4. Wrap the model: DDP broadcasts rank 0's parameters and buffers, then averages gradients
  //    across ranks during backward (bucketed all-reduces overlapping the backward pass).
  //    --deterministic: DeterministicDDP, whose sums do not depend on the number of processes.
  const std::unique_ptr<dist::DataParallel> ddp = mode->wrap(*model);
  // [/tutorial:ddp]
  log.line(std::to_string(model->num_parameters()) + " parameters; optimizer " + optimizer->name() + ", lr " +
           format("%g", cfg.base_lr) + ", schedule " + cfg.lr_scheduler + " per iteration" +
           (cfg.warmup_epochs > 0 ? " after " + std::to_string(cfg.warmup_epochs) + " warm-up epoch(s)" : ""));

  trainer::Totals val;  // the last validation result
  // When to save and what (examples/trainer/checkpointer.h); the checks read the device every
  // check_every() steps (a tenth of an epoch), before each mid-epoch checkpoint and at the epoch's
  // last step: the only host reads of the training loop (one synchronisation each on a GPU).
  trainer::Checkpointer checkpointer({.config = cfg,
                                      .out_dir = run.out_dir,
                                      .rank = rank,
                                      .world_size = world,
                                      .steps_per_epoch = steps_per_epoch,
                                      .device = device,
                                      .model = *model,
                                      .optimizer = *optimizer,
                                      .scaler = *scaler,
                                      .scheduler = *scheduler,
                                      .mode = *mode,
                                      .log = log});
  trainer::TraceWindow trace_window(run.cli.trace, run.cli.trace_steps);  // --trace
  for (int64_t epoch = start.epoch; epoch < cfg.epochs; ++epoch) {
    const auto epoch_start = std::chrono::steady_clock::now();
    const int64_t first_step = epoch == start.epoch ? start.step : 0;
    // [tutorial:set-epoch]
    // 5. A new shuffle each epoch: without set_epoch every epoch would repeat one order.
    train_loader.set_epoch(epoch);  // calls train_sampler->set_epoch(epoch)
    // [/tutorial:set-epoch]
    // Resumed mid-epoch: skip what the first steps consumed (the same global position whatever
    // the process count: every global batch is a run of B entries of the epoch's order).
    train_sampler->set_start_index(first_step * batch_per_rank);
    const double epoch_lr = first_step > 0 ? start.epoch_lr : optimizer->param_groups()[0].lr;  // its first step's

    // [tutorial:train-step]
    // 6. The training step looks like single-process code: DDP's hooks all-reduce the
    //    gradients during backward, and ddp.step waits for the last ones and steps the optimizer.
    //    It reads nothing back: the loss, the hits and the non-finite watch stay on the device
    //    until a check reads them.
    ddp->train();
    mode->start_epoch(first_step > 0 ? start.train : trainer::Totals{});  // the epoch's sums, kept on the device
    trainer::NonFiniteWatch watch(device);  // the first step with a non-finite loss
    trainer::Progress progress(log, "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(cfg.epochs),
                               steps_per_epoch, cfg.global_batch_size);
    int64_t step = first_step;
    double images = 0;  // trained by this rank in this session (for images/s)
    for (auto& batch : train_loader) {
      if (step == steps_per_epoch) break;
      const int64_t global_step = epoch * steps_per_epoch + step + 1;  // 1-based, over the whole run
      step_file.set(global_step);
      const Tensor input = batch.input.to(device), target = batch.target.to(device);  // host -> GPU
      mode->step(*ddp, *optimizer, *scaler, epoch, step, global_step, input, target, watch);  // examples/trainer/step.h
      scheduler->step();  // per iteration
      images += static_cast<double>(input.size(0));
      ++step;
      const bool save = checkpointer.mid_epoch_due(epoch, step);
      if (save || step % checkpointer.check_every() == 0 || step == steps_per_epoch) {  // a check: one host read
        if (const auto bad = watch.first()) trainer::fail_non_finite(*bad, global_step, *model, run.out_dir);
      }
      progress.update(step, [&] { return mode->running_loss(); });
      if (save) checkpointer.save_mid_epoch(epoch, step, epoch_lr, val);
      trace_window.step_done(global_step);  // --trace
    }
    // [/tutorial:train-step]
    train_loader.reset();
    progress.finish();
    const double train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
    const double images_per_s = dist::world_size() * images / train_seconds;
    const trainer::Totals train = mode->epoch_totals();

    // [tutorial:validate]
    // 7. Validation. BatchNorm's running statistics are updated by each rank from its own
    //    batches, so they differ slightly between ranks: first give every rank rank 0's (the
    //    ones the checkpoint stores). Then each rank evaluates its exact shard; sums of loss,
    //    top-1 and top-5 hits and counts are all-reduced, so every rank holds the figures of the
    //    whole test set.
    for (auto& [name, buffer] : model->named_buffers()) dist::broadcast(*buffer, 0);
    val = mode->validate(*model);
    // [/tutorial:validate]
    mode->after_epoch(*model, epoch + 1);  // --deterministic: every replica holds the same bits
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();

    trainer::EpochRecord record{.epoch = epoch + 1,
                                .lr = epoch_lr,
                                .train = train,
                                .val = val,
                                .images_per_s = images_per_s,
                                .seconds = seconds,
                                .world_size = world};
    // [tutorial:checkpoint]
    // 8. Only rank 0 writes: the log, the metrics line and the checkpoint (the replicas are
    //    identical, so one copy is enough). save_checkpoint is atomic: temporary file + rename.
    if (rank == 0) {
      char line[256];
      std::snprintf(line, sizeof line,
                    "epoch %lld/%lld  lr %.3g  train loss %.4f acc %.2f%%  val loss %.4f acc %.2f%% top-5 %.2f%%  "
                    "%.0f img/s  %s",
                    static_cast<long long>(epoch + 1), static_cast<long long>(cfg.epochs), record.lr, train.loss(),
                    train.acc1(), val.loss(), val.acc1(), val.acc5(), record.images_per_s,
                    trainer::format_duration(seconds).c_str());
      log.line(line);
      trainer::append_metrics_line(run.out_dir + "/metrics.jsonl", record);
      checkpointer.save_epoch_end(epoch + 1, val);  // every --save-every epochs and the last
    }
    // [/tutorial:checkpoint]
    checkpointer.epoch_done(epoch + 1);
  }
  trace_window.finish();  // --trace
  if (start.epoch >= cfg.epochs) {  // resumed at the end of the last epoch (main() refused any later point)
    log.line("nothing left to train: the checkpoint ends epoch " + std::to_string(start.epoch) + ", the last of " +
             std::to_string(cfg.epochs) + " (give --epochs above " + std::to_string(start.epoch) +
             " to train further); evaluating it");
    val = mode->validate(*model);
  }
  log.line("test accuracy: top-1 " + percent(val.acc1()) + "  top-5 " + percent(val.acc5()) + "  (" +
           std::to_string(static_cast<int64_t>(val.count)) + " images)");
  if (const std::string note = mode->final_note(*model); !note.empty()) log.line(note);

  // [tutorial:shutdown]
  // 9. Wait until every rank is done (rank 0 may still be writing), then leave the group.
  dist::barrier();
  dist::shutdown();
  // [/tutorial:shutdown]
}

// The data set of `dir`, the first `subset` images of it when subset > 0.
std::shared_ptr<const data::Dataset> load_split(const std::string& dir, bool train, int64_t subset) {
  auto full = std::make_shared<const data::MnistDataset>(dir, train);
  if (subset <= 0 || subset >= full->size()) return full;
  std::vector<int64_t> first(static_cast<size_t>(subset));
  for (int64_t i = 0; i < subset; ++i) first[static_cast<size_t>(i)] = i;
  return std::make_shared<const data::Subset>(full, std::move(first));
}

// The end of a run that trained: rank 0 (or the parent of the ranks) draws OUT/curves.png (--plot).
int finish(const Run& run, const Launch& launch) {
  if (!run.cli.eval && launch.leader && run.cli.plot == "png") trainer::draw_curves(run.out_dir);
  return 0;
}

// train --max-restarts N [--min-procs M] (examples/trainer/restarts.h).
int spawn_with_restarts(Run& run, const Launch& launch, const std::function<void(int)>& worker) {
  const auto before = [&run](const trainer::Attempt& a) {
    run.restart_count = a.restarts;
    if (a.resume_from) run.resume_from = a.resume_from;
  };
  trainer::spawn_with_restarts({.nproc = launch.nproc,
                                .max_restarts = *run.cli.max_restarts,
                                .min_procs = run.cli.min_procs,
                                .threads = run.threads,
                                .out_dir = run.out_dir},
                               run.config, before, worker);
  return finish(run, launch);
}

int run_main(int argc, char** argv) {
  std::optional<trainer::CliOptions> cli = trainer::parse_cli(argc, argv);
  if (!cli) return 0;  // --help
  const int gpus = trainer::count_gpus_in_child();  // this process itself stays CUDA-free until it is a rank
  const bool cuda = trainer::decide_cuda(*cli, gpus);
  const Launch launch = trainer::decide_launch(*cli, cuda, gpus);

  Run run;
  run.cli = *cli;
  run.cuda = cuda;
  run.config = trainer::resolve_config(*cli, launch.nproc);
  run.out_dir = cli->out_dir.value_or("runs/" + run.config.model);
  run.restart_count = launch.restart_count;
  if (cli->dist_timeout) run.dist_timeout = std::chrono::milliseconds(static_cast<int64_t>(*cli->dist_timeout * 1000));
  // Default threads: share the cores among the processes of this machine (minidl-run sets
  // OMP_NUM_THREADS the same way; respect it when present).
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  run.threads = cli->threads.value_or(std::getenv("OMP_NUM_THREADS") ? omp_get_max_threads()
                                                                     : std::max(1, cores / launch.local_world_size));

  // The data set is read once, here, before the processes are forked: they share its pages, as
  // PaddleViT's main() hands its datasets to dist.spawn. (Nothing here may use OpenMP: GNU
  // libgomp's thread pool does not survive fork.)
  trainer::check_data_dir(run.config.data_dir, !cli->eval);
  try {
    if (!cli->eval) run.train_set = load_split(run.config.data_dir, true, run.config.train_subset);
    run.val_set = load_split(run.config.data_dir, false, run.config.val_subset);
  } catch (const std::exception& e) {
    throw UsageError(std::string("cannot read Fashion-MNIST: ") + e.what());
  }
  if (!cli->eval && run.train_set->size() == 0)
    throw UsageError("the training set in " + run.config.data_dir + " is empty (0 images): nothing to train on");
  if (!cli->eval && run.config.deterministic && run.train_set->size() < run.config.global_batch_size)
    throw UsageError("--deterministic trains on whole global batches only, and the training set (" +
                     std::to_string(run.train_set->size()) + " images) is smaller than one (" +
                     std::to_string(run.config.global_batch_size) +
                     "): use a larger --train-subset or a smaller batch size");
  if (!cli->eval && cli->resume) trainer::check_resume_position(*cli->resume, run.config.epochs);
  if (!cli->eval && launch.leader)
    trainer::prepare_out_dir(run.out_dir, run.restart_count > 0, cli->resume.has_value(), cli->overwrite);
  run.resume_from = cli->resume;
  if (run.restart_count > 0) {  // restarted by minidl-run: continue from what the failed group saved
    if (auto newest = trainer::newest_checkpoint(run.out_dir)) run.resume_from = newest;
  }

  const auto worker = [&run](int) { run.cli.eval ? eval_worker(run) : train_worker(run); };
  if (launch.spawn && run.cli.max_restarts.value_or(0) > 0) return spawn_with_restarts(run, launch, worker);
  // [tutorial:spawn]
  // 0. One process per device (a GPU, or a share of the CPU cores). spawn forks nproc children
  //    with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set, runs worker(rank) in each, and
  //    throws naming the first rank that failed.
  if (launch.spawn)
    dist::spawn(launch.nproc, worker, dist::SpawnOptions{.omp_threads = run.threads});
  else
    worker(0);  // one process, or launched by minidl-run: this process is a rank already
  // [/tutorial:spawn]
  return finish(run, launch);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run_main(argc, argv);
  } catch (const trainer::ConfigError& e) {
    std::cerr << "train: " << e.what() << "\n";
    return 2;
  } catch (const UsageError& e) {
    std::cerr << "train: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "train: " << e.what() << "\n";
    return 1;
  }
}
