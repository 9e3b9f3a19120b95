// examples/trainer/restarts.h — train --max-restarts N [--min-procs M]: the spawning train starts
// the ranks again when one fails, from the newest checkpoint in --out, up to N times.
//   plain:        every restart starts the same number of processes (a fresh port, a fresh group).
//   --min-procs:  a failed process is treated as a lost device and is not started again; the run
//                 goes on with the survivors — the largest count, at least M, that the global batch
//                 (and, with --deterministic, its micro-shards) splits over evenly. The global batch
//                 stays, so in deterministic mode the final bits are those of a run that never
//                 shrank (per-rank batch = global / world). torchrun's elastic agent shrinks the same
//                 way across nodes; minidl-run --nnodes MIN:MAX does it across launchers.
// A second failure at the same step, or one beyond N, ends the run with the cause.
// Part of the `train` example (examples/train.cpp); not a library module.
#pragma once
#include <functional>
#include <optional>
#include <string>

#include "examples/trainer/config.h"

namespace trainer {

struct RestartOptions {
  int nproc = 1;  // processes of the first attempt
  int max_restarts = 0;
  std::optional<int> min_procs;  // --min-procs
  int threads = 1;  // OpenMP threads per process
  std::string out_dir;  // where the checkpoints are
};

// What changes from one attempt to the next: restarts so far, the processes, the checkpoint to resume.
struct Attempt {
  int restarts = 0;
  int nproc = 1;
  std::optional<std::string> resume_from;  // empty: as the first attempt
};

// Runs `worker(rank)` in opt.nproc processes; `before(attempt)` is called before each start.
// Throws std::runtime_error with the cause when the run cannot go on.
void spawn_with_restarts(const RestartOptions& opt, const TrainConfig& config,
                         const std::function<void(const Attempt&)>& before, const std::function<void(int)>& worker);

// The largest process count in [min_procs, survivors] that config's global batch splits over
// (deterministic: whole micro-shards on every rank); nullopt when none does.
std::optional<int> shrink_to(int survivors, int min_procs, const TrainConfig& config);

}  // namespace trainer
