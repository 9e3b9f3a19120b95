// examples/trainer/restarts.cpp — train --max-restarts [--min-procs] (restarts.h).
#include "examples/trainer/restarts.h"

#include <unistd.h>

#include <iostream>
#include <stdexcept>
#include <string>

#include "examples/trainer/checkpoint_policy.h"
#include "minidl/dist/spawn.h"
#include "minidl/dist/step_record.h"

namespace trainer {

std::optional<int> shrink_to(int survivors, int min_procs, const TrainConfig& config) {
  for (int n = survivors; n >= min_procs && n >= 1; --n) {
    const int64_t unit = config.deterministic ? config.micro_batch * n : n;
    if (config.global_batch_size % unit == 0) return n;
  }
  return std::nullopt;
}

void spawn_with_restarts(const RestartOptions& opt, const TrainConfig& config,
                         const std::function<void(const Attempt&)>& before, const std::function<void(int)>& worker) {
  namespace dist = minidl::dist;
  const dist::StepDir dir;  // the ranks' step files
  ::setenv("MINIDL_STEP_DIR", dir.path().c_str(), 1);  // for the spawned ranks' StepFile
  int64_t last_failure_step = -1;
  Attempt attempt{.restarts = 0, .nproc = opt.nproc, .resume_from = std::nullopt};
  for (;; ++attempt.restarts) {
    if (attempt.restarts > 0) {
      remove_interrupted_saves(opt.out_dir);  // a rank killed while saving left its temporary file
      if (auto newest = newest_checkpoint(opt.out_dir)) attempt.resume_from = newest;
    }
    before(attempt);
    for (int r = 0; r < opt.nproc; ++r) ::unlink((dir.path() + "/step." + std::to_string(r)).c_str());
    try {
      dist::spawn(attempt.nproc, worker, dist::SpawnOptions{.omp_threads = opt.threads});
      return;
    } catch (const dist::SpawnError& e) {
      const int64_t step = dist::read_step(dir.path(), e.rank);
      const std::string cause = std::string(e.what()) + (step >= 0 ? " (at step " + std::to_string(step) + ")" : "");
      if (attempt.restarts >= opt.max_restarts)
        throw std::runtime_error(cause + "; no restarts left (--max-restarts " + std::to_string(opt.max_restarts) +
                                 " used up)");
      if (step >= 0 && step == last_failure_step)
        throw std::runtime_error(cause + "; the previous failure was at the same step " + std::to_string(step) +
                                 ": a deterministic crash that a restart would repeat, not restarting");
      last_failure_step = step;
      std::string how = "starting " + std::to_string(attempt.nproc) + " process(es) again";
      if (opt.min_procs && attempt.nproc > *opt.min_procs) {  // the failed rank's device is lost
        const int survivors = attempt.nproc - 1;
        const std::optional<int> next = shrink_to(survivors, *opt.min_procs, config);
        if (!next)
          throw std::runtime_error(cause + "; --min-procs " + std::to_string(*opt.min_procs) + ": the global batch " +
                                   std::to_string(config.global_batch_size) + " splits over none of " +
                                   std::to_string(*opt.min_procs) + ".." + std::to_string(survivors) +
                                   " processes, not restarting");
        how = "rank " + std::to_string(e.rank) + " is not started again (--min-procs " +
              std::to_string(*opt.min_procs) + "): continuing on " + std::to_string(*next) + " process(es)" +
              (*next < survivors ? " (the global batch " + std::to_string(config.global_batch_size) +
                                       " does not split over " + std::to_string(survivors) + ")"
                                 : std::string());
        attempt.nproc = *next;
      }
      std::cerr << "train: restart " << attempt.restarts + 1 << "/" << opt.max_restarts << " (cause: " << cause
                << "): " << how << " from the newest checkpoint in " << opt.out_dir << "\n";
    }
  }
}

}  // namespace trainer
