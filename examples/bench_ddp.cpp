// examples/bench_ddp.cpp — data-parallel training throughput of the reference CNN at global
// batch 128: one process with 2 threads against 2 processes with 1 thread each (DDP, batch 64
// each, Gloo), on synthetic Fashion-MNIST-shaped data; and the share of gradient communication
// hidden behind backward by DDP's bucketed overlap, from the time rank 0 waits after backward
// with the default buckets against one bucket holding every gradient (launched when backward
// ends, so nothing overlaps; rank skew is in both):
//   hidden = 1 - wait(default buckets) / wait(one bucket)
//   ./build/examples/bench_ddp [steps = 30]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "minidl/dist/ddp.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/spawn.h"
#include "minidl/nn/models.h"
#include "minidl/optim/sgd.h"
#include "minidl/tensor/tensor_all.h"

using namespace minidl;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Trains `steps` steps (after 3 warm-up steps) on this rank's `local` images per step;
// returns "images_per_s comm_wait_s" (the wait is 0 without DDP). bucket_mb 0: DDP's defaults.
std::string run(int steps, int64_t local, bool use_ddp, double bucket_mb = 0) {
  manual_seed(0);
  nn::CNN model;
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  dist::DDPOptions options;
  if (bucket_mb > 0) options.bucket_cap_mb = options.first_bucket_cap_mb = bucket_mb;
  if (use_ddp) ddp = std::make_unique<dist::DistributedDataParallel>(model, options);
  optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9, .weight_decay = 5e-4});
  Tensor x = rand({local, 1, 28, 28}, RandomKey{1, 0});
  Tensor y = randint(0, 10, {local}, RandomKey{1, 1});
  double wait = 0;
  Clock::time_point t0;
  for (int s = -3; s < steps; ++s) {
    if (s == 0) t0 = Clock::now();
    opt.zero_grad();
    Variable out = use_ddp ? ddp->forward(Variable(x)) : model.forward(Variable(x));
    cross_entropy(out, y).backward();
    if (use_ddp) {
      ddp->step(opt);
      if (s >= 0) wait += ddp->last_step_times().comm_wait;
    } else {
      opt.step();
    }
  }
  const double total = seconds(t0);
  const int world = use_ddp ? dist::world_size() : 1;
  char buf[128];
  std::snprintf(buf, sizeof buf, "%.1f %.4f ", static_cast<double>(steps * local * world) / total, wait);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 30;
  const int64_t global = 128;
  const auto one = dist::spawn_with_results(1, [&](int) { return run(steps, global, false); }, {.omp_threads = 2});
  const auto two = dist::spawn_with_results(2,
                                            [&](int) {
                                              dist::init({.backend = "gloo"});
                                              std::string r = run(steps, global / 2, true) +
                                                              run(steps, global / 2, true, /*one bucket*/ 1000.0);
                                              dist::shutdown();
                                              return r;
                                            },
                                            {.omp_threads = 1});
  double ips1 = 0, ips2 = 0, wait = 0, ips_one_bucket = 0, wait_one_bucket = 0;
  std::sscanf(one[0].c_str(), "%lf", &ips1);
  std::sscanf(two[0].c_str(), "%lf %lf %lf %lf", &ips2, &wait, &ips_one_bucket, &wait_one_bucket);
  std::printf("CNN, global batch 128, %d steps\n", steps);
  std::printf("  1 process  x 2 threads             : %8.1f images/s\n", ips1);
  std::printf("  2 processes x 1 thread (DDP)       : %8.1f images/s  (%.2fx the single process)\n", ips2, ips2 / ips1);
  std::printf("  same, one bucket (no overlap)      : %8.1f images/s\n", ips_one_bucket);
  std::printf("  wait after backward, default/one   : %6.2f / %6.2f ms per step -> %.0f%% of it hidden by overlap\n",
              1e3 * wait / steps, 1e3 * wait_one_bucket / steps,
              wait_one_bucket > 0 ? 100.0 * (1.0 - wait / wait_one_bucket) : 0.0);
  return 0;
}
