// examples/bench_ddp.cpp — data-parallel training throughput of the reference CNN at global
// batch 128: one process with 2 threads against 2 processes with 1 thread each (DDP, batch 64
// each, Gloo), on synthetic Fashion-MNIST-shaped data; and the share of gradient communication
// hidden behind backward by DDP's bucketed overlap:
//   hidden = 1 - (time waiting for all-reduces after backward) / (time of the same all-reduces alone)
//   ./build/examples/bench_ddp [steps = 30]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "dist/ddp.h"
#include "dist/distributed.h"
#include "dist/spawn.h"
#include "nn/models.h"
#include "optim/sgd.h"
#include "tensor/tensor_all.h"

using namespace minidl;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Trains `steps` steps (after 3 warm-up steps) on this rank's `local` images per step;
// returns "images_per_s comm_wait_s comm_alone_s" (the last two are 0 without DDP).
std::string run(int steps, int64_t local, bool use_ddp) {
  manual_seed(0);
  nn::CNN model;
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  if (use_ddp) ddp = std::make_unique<dist::DistributedDataParallel>(model);
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
  double alone = 0;
  if (use_ddp) {  // the same gradient volume all-reduced with nothing to overlap
    Tensor flat = zeros({model.num_parameters()});
    dist::barrier();
    const auto a0 = Clock::now();
    for (int s = 0; s < steps; ++s) dist::all_reduce(flat);
    alone = seconds(a0);
  }
  const int world = use_ddp ? dist::world_size() : 1;
  char buf[128];
  std::snprintf(buf, sizeof buf, "%.1f %.4f %.4f", static_cast<double>(steps * local * world) / total, wait, alone);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 30;
  const int64_t global = 128;
  const auto one = dist::spawn_with_results(
      1, [&](int) { return run(steps, global, false); }, {.omp_threads = 2});
  const auto two = dist::spawn_with_results(
      2, [&](int) {
        dist::init({.backend = "gloo"});
        std::string r = run(steps, global / 2, true);
        dist::shutdown();
        return r;
      },
      {.omp_threads = 1});
  double ips1 = 0, ips2 = 0, wait = 0, alone = 0;
  std::sscanf(one[0].c_str(), "%lf", &ips1);
  std::sscanf(two[0].c_str(), "%lf %lf %lf", &ips2, &wait, &alone);
  std::printf("CNN, global batch 128, %d steps\n", steps);
  std::printf("  1 process  x 2 threads          : %8.1f images/s\n", ips1);
  std::printf("  2 processes x 1 thread (DDP)    : %8.1f images/s  (%.2fx the single process)\n", ips2, ips2 / ips1);
  std::printf("  all-reduce time alone (rank 0)  : %8.3f s over %d steps\n", alone, steps);
  std::printf("  waiting after backward (rank 0) : %8.3f s  -> %.0f%% of the communication hidden by overlap\n", wait,
              alone > 0 ? 100.0 * (1.0 - wait / alone) : 0.0);
  return 0;
}
