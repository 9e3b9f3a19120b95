// examples/trainer/cli.h — the command line of `train` (run `train --help` for the list), and
// how it combines with the YAML recipe: flags override the config's values.
// Part of the `train` example (examples/train.cpp); not a library module.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "examples/trainer/config.h"

namespace trainer {

// What the user typed; unset optionals leave the config's value.
struct CliOptions {
  std::optional<std::string> model;
  std::optional<std::string> config_path;
  std::optional<int64_t> epochs;
  std::optional<int64_t> batch_size;  // per process
  std::optional<int64_t> global_batch_size;  // over all processes
  std::optional<double> lr;
  std::optional<uint64_t> seed;
  std::optional<std::string> data_dir;
  std::string device = "auto";  // cpu | cuda | auto
  std::optional<int> nproc;
  bool sync_bn = false;
  std::optional<std::string> out_dir;
  std::optional<int64_t> save_every;
  std::optional<int64_t> save_every_steps;
  std::optional<double> save_every_minutes;
  std::optional<std::string> resume;
  bool overwrite = false;  // replace the outputs of an earlier run in --out
  std::optional<int> max_restarts;  // restart the spawned processes after a failure
  std::optional<int> min_procs;  // with max_restarts: a failed process is not started again (restarts.h)
  std::optional<double> dist_timeout;  // seconds: rendezvous and every collective
  bool eval = false;
  std::optional<std::string> pretrained;
  bool deterministic = false;
  std::optional<int64_t> micro_batch;
  std::optional<std::string> precision;  // fp32 | bf16 | fp16
  bool smoke_test = false;
  std::optional<int> threads;
  std::optional<int> workers;
  std::optional<int64_t> train_subset;
  std::optional<int64_t> val_subset;
  std::optional<std::string> trace;  // --trace FILE: a Chrome trace of the --trace-steps window
  std::string trace_steps = "3:4";  // A:B, global steps (trace_window.h)
  std::string plot = "png";  // png | none: OUT/curves.png at the end of the run (plot.h)
};

// Parses argv. Returns nullopt after printing --help (exit 0); a bad flag or value prints the
// reason and the usage line to stderr and throws ConfigError (the trainer exits 2).
std::optional<CliOptions> parse_cli(int argc, char** argv);

// The recipe to run: the base config (the checkpoint's for --resume / --eval, else --config or
// configs/<model>.yaml), then the flags on top. `world_size` turns --batch-size into the global
// batch and checks that --global-batch-size splits evenly. Throws ConfigError.
TrainConfig resolve_config(const CliOptions& cli, int world_size);

// The YAML recipe used when --config is not given: configs/<model>.yaml in the source tree
// (compiled in) or, failing that, in a configs/ folder next to the binary.
std::string default_config_path(const std::string& model);

}  // namespace trainer
