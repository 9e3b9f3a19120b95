// examples/trainer/launch.h — how `train` starts: whether it trains on GPUs or CPUs, how many
// processes this machine runs and whether train spawns them itself or a launcher (minidl-run,
// srun, mpirun) already did, and the checks that turn a bad request into exit status 2 before
// any process starts (data directory, GPU counts, conflicting flags).
// Part of the `train` example (examples/train.cpp); not a library module.
#pragma once
#include <stdexcept>
#include <string>

#include "examples/trainer/cli.h"

namespace trainer {

// Exit status 2 with a message: a problem with what the user asked for, not a crash.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// How many processes this machine runs, and whether they still have to be started.
struct Launch {
  int nproc = 1;
  bool spawn = false;
  int local_world_size = 1;
  bool leader = true;  // prepares --out: this process spawns the ranks, or it is rank 0
  int restart_count = 0;  // MINIDL_RESTART_COUNT from minidl-run
};

// Checks that `dir` holds Fashion-MNIST (the test split, and the training split when
// need_train) before any process starts; a UsageError naming the missing file otherwise.
void check_data_dir(const std::string& dir, bool need_train);

// The number of visible GPUs, asked in a short-lived child process: this process forks the ranks
// later, and a child forked after the parent initialised the CUDA driver cannot use CUDA.
int count_gpus_in_child();

// --device: cuda (a GPU must be usable, else a UsageError saying why), cpu, or auto (cuda when
// this build has CUDA and NCCL, a GPU is visible and there are at least as many GPUs as
// processes on this machine; else the CPU, as on a machine without GPUs).
bool decide_cuda(const CliOptions& cli, int gpus);

// Under a launcher (its environment names the world): this process is one of its ranks, and
// flags that contradict the launcher are UsageErrors. Alone: --nproc processes (one per GPU on
// GPUs, 2 on CPUs by default), spawned by train itself when more than one, or with --max-restarts.
Launch decide_launch(const CliOptions& cli, bool cuda, int gpus);

}  // namespace trainer
