// examples/trainer/cli.cpp — `train`'s flags (CLI11) and how they override the YAML recipe.
#include "examples/trainer/cli.h"

#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "examples/trainer/checkpoint.h"
#include "examples/trainer/trace_window.h"

#ifndef MINIDL_CONFIG_DIR
#define MINIDL_CONFIG_DIR "configs"
#endif

namespace trainer {

namespace {

// CLI11 validators with short messages: "--epochs: must be a positive integer, got '-3'".
CLI::Validator integer_at_least(int64_t low, const std::string& what) {
  return CLI::Validator(
      [low, what](std::string& text) -> std::string {
        int64_t v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec != std::errc() || end != text.data() + text.size() || v < low)
          return "must be " + what + ", got '" + text + "'";
        return "";
      },
      what == "a positive integer" ? "POSITIVE" : "N>=0");
}
const CLI::Validator kPositiveInteger = integer_at_least(1, "a positive integer");
const CLI::Validator kNonNegativeInteger = integer_at_least(0, "an integer >= 0");
const CLI::Validator kPositiveNumber(
    [](std::string& text) -> std::string {
      char* end = nullptr;
      const double v = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || !(v > 0)) return "must be a positive number, got '" + text + "'";
      return "";
    },
    "POSITIVE");

}  // namespace

std::optional<CliOptions> parse_cli(int argc, char** argv) {
  CliOptions o;
  CLI::App app{
      "train — trains an MLP, a CNN or a ViT on Fashion-MNIST, data-parallel over N processes.\n"
      "  train                                  the CNN recipe, 2 CPU processes\n"
      "  train --model vit --epochs 3           another model, fewer epochs\n"
      "  minidl-run --nproc-per-node 4 train    launched from outside: no spawning\n"
      "  train --eval --pretrained runs/cnn/checkpoint_last.safetensors",
      "train"};
  app.add_option("--model", o.model, "mlp | cnn | vit (default: the config's MODEL.NAME, cnn)")
      ->check(CLI::IsMember({"mlp", "cnn", "vit"}));
  app.add_option("--config", o.config_path, "YAML recipe (default: configs/<model>.yaml)")->check(CLI::ExistingFile);
  app.add_option("--epochs", o.epochs, "epochs to train (TRAIN.EPOCHS)")->check(kPositiveInteger);
  auto* batch = app.add_option("--batch-size", o.batch_size, "batch per process; global = this x processes")
                    ->check(kPositiveInteger);
  app.add_option("--global-batch-size", o.global_batch_size, "batch over all processes (DATA.BATCH_SIZE), split evenly")
      ->check(kPositiveInteger)
      ->excludes(batch);
  app.add_option("--lr", o.lr, "base learning rate (TRAIN.BASE_LR)")->check(kPositiveNumber);
  app.add_option("--seed", o.seed, "seed of the initial weights and the data order (SEED)");
  app.add_option("--data", o.data_dir, "Fashion-MNIST directory (DATA.DATA_PATH)");
  app.add_option("--device", o.device, "cpu | cuda | auto (default auto: cuda when usable, else cpu)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  app.add_option("--nproc", o.nproc, "processes to spawn (default: one per GPU on cuda, 2 on cpu); not with minidl-run")
      ->check(kPositiveInteger);
  app.add_flag("--sync-bn", o.sync_bn, "convert BatchNorm to SyncBatchNorm (MODEL.SYNC_BN)");
  app.add_option("--out", o.out_dir, "output directory: log, metrics.jsonl, checkpoints (default runs/<model>)");
  app.add_option("--save-every", o.save_every, "checkpoint every K epochs, and at the end (SAVE_FREQ)")
      ->check(kPositiveInteger);
  app.add_option("--save-every-steps", o.save_every_steps,
                 "also checkpoint every K optimizer steps, mid-epoch, with the data position (SAVE_FREQ_STEPS)")
      ->check(kPositiveInteger);
  app.add_option("--save-every-minutes", o.save_every_minutes,
                 "also checkpoint mid-epoch once M minutes (fractions allowed) have passed since the last "
                 "checkpoint, at the next check (every tenth of an epoch); rank 0's clock decides for all ranks "
                 "(SAVE_FREQ_MINUTES)")
      ->check(kPositiveNumber);
  auto* resume = app.add_option("--resume", o.resume, "continue training from a checkpoint (epoch end or mid-epoch)")
                     ->check(CLI::ExistingFile);
  app.add_flag("--overwrite", o.overwrite, "replace the outputs of an earlier run in --out (default: refuse)")
      ->excludes(resume);
  app.add_option("--max-restarts", o.max_restarts,
                 "restart the spawned processes up to N times after a failure, resuming from the newest "
                 "checkpoint in --out (with minidl-run: use its --max-restarts)")
      ->check(kNonNegativeInteger);
  app.add_option("--min-procs", o.min_procs,
                 "with --max-restarts: treat a failed process as a lost device, not started again; go on with "
                 "the survivors (at least M, a count the global batch splits over), as an elastic run would")
      ->check(kPositiveInteger);
  app.add_option("--dist-timeout", o.dist_timeout,
                 "seconds a rank waits in the rendezvous or a collective before failing (default 300); "
                 "a hung rank is detected after this long")
      ->check(kPositiveNumber);
  auto* eval = app.add_flag("--eval", o.eval, "only evaluate --pretrained on the test set")->excludes(resume);
  app.add_option("--pretrained", o.pretrained, "checkpoint to evaluate (with --eval)")
      ->check(CLI::ExistingFile)
      ->needs(eval);
  app.add_flag("--deterministic", o.deterministic,
               "the same final bits on any number of processes and threads: micro-shards summed in a fixed tree, "
               "ghost batch norm, randomness keyed by sample (TRAIN.DETERMINISTIC); also checks every epoch that "
               "all replicas are bit-identical and prints the weights' hash");
  app.add_option("--micro-batch", o.micro_batch, "samples per micro-shard with --deterministic (TRAIN.MICRO_BATCH, 16)")
      ->check(kPositiveInteger);
  app.add_option("--precision", o.precision,
                 "fp32 | bf16 | fp16: the forward and the loss under autocast of that dtype; parameters, "
                 "gradients and optimizer state stay float32; fp16 adds dynamic loss scaling (TRAIN.PRECISION, fp32)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_flag("--smoke-test", o.smoke_test, "a few batches of each phase (1 epoch unless --epochs), for CI");
  app.add_option("--threads", o.threads, "OpenMP threads per process (default: cores / local processes)")
      ->check(kPositiveInteger);
  app.add_option("--workers", o.workers, "data-loading threads per process (DATA.NUM_WORKERS)")
      ->check(kNonNegativeInteger);
  app.add_option("--train-subset", o.train_subset, "train on the first N images only (DATA.TRAIN_SUBSET)")
      ->check(kPositiveInteger);
  app.add_option("--val-subset", o.val_subset, "evaluate on the first N test images only (DATA.VAL_SUBSET)")
      ->check(kPositiveInteger);
  app.add_option("--trace", o.trace,
                 "write a Chrome trace of the --trace-steps steps, every rank in one file (open it in "
                 "ui.perfetto.dev, or draw it with tools/draw_trace.py)");
  app.add_option("--trace-steps", o.trace_steps, "A:B, the global steps --trace records (default 3:4)")
      ->check(CLI::Validator([](std::string& t) { return step_window_error(t); }, "A:B"));
  app.add_option("--plot", o.plot,
                 "png | none: end the run by drawing loss, accuracy and learning rate per epoch into "
                 "OUT/curves.png (default png; needs python3-matplotlib)")
      ->check(CLI::IsMember({"png", "none"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    throw ConfigError(std::string(e.what()) + "\n(run `train --help` for the list of flags)");
  }
  if (o.eval && !o.pretrained) throw ConfigError("--eval needs --pretrained FILE");
  if (o.min_procs && !o.max_restarts.value_or(0))
    throw ConfigError("--min-procs sets how far restarts may shrink the run: give --max-restarts N (N > 0) too");
  if (o.resume && o.lr)
    throw ConfigError(
        "--lr cannot be combined with --resume: a resumed run continues the checkpoint's "
        "learning-rate schedule (its optimizer and scheduler state) exactly; to train with "
        "another --lr, start a new run");
  if ((o.eval || o.resume) && o.config_path)
    throw ConfigError(
        "--config cannot be combined with --resume or --eval: the checkpoint holds its recipe "
        "(override single values with flags)");
  return o;
}

std::string default_config_path(const std::string& model) {
  const std::string name = model + ".yaml";
  const std::filesystem::path source = std::filesystem::path(MINIDL_CONFIG_DIR) / name;
  if (std::filesystem::exists(source)) return source.string();
  // an installed train (PREFIX/bin/train) finds PREFIX/share/minidl/configs
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::filesystem::path beside = exe.parent_path() / "configs" / name;
  const std::filesystem::path installed = exe.parent_path().parent_path() / "share" / "minidl" / "configs" / name;
  if (!ec && std::filesystem::exists(beside)) return beside.string();
  if (!ec && std::filesystem::exists(installed)) return installed.string();
  throw ConfigError("no recipe for model '" + model + "': none of " + source.string() + ", " + beside.string() + ", " +
                    installed.string() + " exists (give one with --config)");
}

TrainConfig resolve_config(const CliOptions& cli, int world_size) {
  TrainConfig c;
  const std::optional<std::string> checkpoint = cli.eval ? cli.pretrained : cli.resume;
  if (checkpoint) {
    c = parse_config(read_checkpoint_config(*checkpoint), *checkpoint + " (its config)");
    if (cli.model && *cli.model != c.model)
      throw ConfigError("--model " + *cli.model + " does not match the checkpoint's model " + c.model);
  } else {
    c = load_config(cli.config_path ? *cli.config_path : default_config_path(cli.model.value_or("cnn")));
    if (cli.model && !cli.config_path) c.model = *cli.model;
    if (cli.model && *cli.model != c.model)
      throw ConfigError("--model " + *cli.model + " does not match MODEL.NAME " + c.model + " of " + *cli.config_path);
  }
  if (cli.epochs)
    c.epochs = *cli.epochs;
  else if (cli.smoke_test && !cli.resume)
    c.epochs = 1;
  if (cli.lr) c.base_lr = *cli.lr;
  if (cli.seed) c.seed = *cli.seed;
  if (cli.data_dir) c.data_dir = *cli.data_dir;
  if (cli.sync_bn) c.sync_bn = true;
  if (cli.deterministic) c.deterministic = true;
  if (cli.micro_batch) {
    if (!c.deterministic)
      throw ConfigError(
          "--micro-batch sets the micro-shards of --deterministic, and this run is not deterministic: "
          "add --deterministic (or TRAIN.DETERMINISTIC: true), or drop --micro-batch");
    c.micro_batch = *cli.micro_batch;
  }
  if (cli.precision) c.precision = *cli.precision;
  if (cli.save_every) c.save_every = *cli.save_every;
  if (cli.save_every_steps) c.save_every_steps = *cli.save_every_steps;
  if (cli.save_every_minutes) c.save_every_minutes = *cli.save_every_minutes;
  if (cli.workers) c.num_workers = *cli.workers;
  if (cli.train_subset) c.train_subset = *cli.train_subset;
  if (cli.val_subset) c.val_subset = *cli.val_subset;
  if (cli.batch_size) c.global_batch_size = *cli.batch_size * world_size;
  if (cli.global_batch_size) c.global_batch_size = *cli.global_batch_size;
  if (c.global_batch_size % world_size != 0) {
    // the sizes that would: the nearest global batches on this many processes, and the process
    // counts (up to 64) that this global batch splits over (an elastic run may need several)
    const int64_t below = c.global_batch_size / world_size * world_size, above = below + world_size;
    std::string counts;
    for (int n = 1; n <= 64; ++n)
      if (c.global_batch_size % n == 0) counts.append(counts.empty() ? "" : ", ").append(std::to_string(n));
    throw ConfigError("the global batch size " + std::to_string(c.global_batch_size) + " does not split evenly over " +
                      std::to_string(world_size) + " processes: on " + std::to_string(world_size) + " give " +
                      (below > 0 ? std::to_string(below) + " or " : std::string()) + std::to_string(above) +
                      " (--global-batch-size), or run " + std::to_string(c.global_batch_size) + " on " + counts +
                      " process(es); --batch-size sets a per-process batch instead");
  }
  if (c.deterministic && c.global_batch_size % (c.micro_batch * world_size) != 0)
    throw ConfigError("--deterministic: the global batch size " + std::to_string(c.global_batch_size) +
                      " must be a multiple of the micro-batch " + std::to_string(c.micro_batch) + " x " +
                      std::to_string(world_size) +
                      " processes (every process runs whole micro-shards; change "
                      "--micro-batch or the batch size)");
  validate(c);
  return c;
}

}  // namespace trainer
