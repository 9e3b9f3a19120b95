// examples/bench_zero.cpp — what ZeroRedundancyOptimizer saves and costs: a reference model with
// Adam under DDP on N processes (shared memory, 1 thread each, global batch 128, synthetic
// Fashion-MNIST-shaped data), with plain Adam against Adam sharded by ZeRO-1. Prints each one's
// throughput and the bytes of Adam state the largest rank holds: about 1/N of plain Adam's for
// the ViT, whose parameters are many and alike; the CNN's Linear(3136, 128) is 95% of it, and
// whole parameters cannot be split finer than that.
//   ./build/examples/bench_zero [steps = 20] [processes = 2] [model = vit | cnn | mlp]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "minidl/dist/ddp.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/spawn.h"
#include "minidl/dist/zero_redundancy_optimizer.h"
#include "minidl/nn/models.h"
#include "minidl/nn/module.h"
#include "minidl/optim/adam.h"
#include "minidl/tensor/tensor_all.h"

using namespace minidl;
using Clock = std::chrono::steady_clock;

namespace {

int64_t state_bytes(const optim::Optimizer* opt) {
  int64_t n = 0;
  if (opt)
    for (int64_t i = 0; i < opt->num_params(); ++i)
      for (const auto& [name, t] : opt->state(i)) n += t.numel() * static_cast<int64_t>(element_size(t.dtype()));
  return n;
}

// Trains `steps` steps (after 3 warm-up steps) on this rank's `local` images per step; returns
// "images_per_s state_bytes" (the bytes of Adam state this rank holds).
std::string run(const std::string& model_name, int steps, int64_t local, bool zero) {
  manual_seed(0);
  std::unique_ptr<nn::Module> net = nn::make_model(model_name);
  nn::Module& model = *net;
  dist::DistributedDataParallel ddp(model);
  auto make = [](std::vector<optim::ParamGroupSpec> groups) {
    return std::make_unique<optim::Adam>(std::move(groups), optim::AdamOptions{.lr = 1e-3});
  };
  std::unique_ptr<optim::Optimizer> opt;
  if (zero) {
    opt = std::make_unique<dist::ZeroRedundancyOptimizer>(model.parameters(), make);
  } else {
    opt = make(optim::single_group(model.parameters()));
  }
  const Tensor x = rand({local, 1, 28, 28}, RandomKey{1, 0});
  const Tensor y = randint(0, 10, {local}, RandomKey{1, 1});
  Clock::time_point t0;
  for (int s = -3; s < steps; ++s) {
    if (s == 0) t0 = Clock::now();
    opt->zero_grad();
    cross_entropy(ddp.forward(Variable(x)), y).backward();
    ddp.step(*opt);
  }
  const double total = std::chrono::duration<double>(Clock::now() - t0).count();
  const auto* z = dynamic_cast<const dist::ZeroRedundancyOptimizer*>(opt.get());
  char buf[128];
  std::snprintf(buf, sizeof buf, "%.1f %lld ", static_cast<double>(steps * local * dist::world_size()) / total,
                static_cast<long long>(state_bytes(z ? z->local_optimizer() : opt.get())));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 20;
  const int nproc = argc > 2 ? std::atoi(argv[2]) : 2;
  const std::string model = argc > 3 ? argv[3] : "vit";
  if (steps < 1 || nproc < 1 || 128 % nproc != 0 || (model != "vit" && model != "cnn" && model != "mlp")) {
    std::fprintf(stderr, "usage: bench_zero [steps >= 1] [processes dividing 128] [vit | cnn | mlp]\n");
    return 2;
  }
  const auto results = dist::spawn_with_results(
      nproc,
      [&](int) {
        dist::init({.backend = "shm"});
        std::string r = run(model, steps, 128 / nproc, false) + run(model, steps, 128 / nproc, true);
        dist::shutdown();
        return r;
      },
      {.omp_threads = 1});
  double ips_plain = 0, ips_zero = 0;  // rank 0's
  long long largest_plain = 0, largest_zero = 0;
  for (const std::string& r : results) {
    double a = 0, c = 0;
    long long b = 0, d = 0;
    std::sscanf(r.c_str(), "%lf %lld %lf %lld", &a, &b, &c, &d);
    if (&r == &results.front()) ips_plain = a, ips_zero = c;
    largest_plain = std::max(largest_plain, b);
    largest_zero = std::max(largest_zero, d);
  }
  std::printf("%s + Adam, %d processes x 1 thread (DDP, shm), global batch 128, %d steps\n", model.c_str(), nproc, steps);
  std::printf("  plain Adam : %8.1f images/s  %9lld bytes of Adam state on the largest rank\n", ips_plain, largest_plain);
  std::printf("  ZeRO-1 Adam: %8.1f images/s  %9lld bytes (%.2f of plain)\n", ips_zero, largest_zero,
              largest_plain > 0 ? static_cast<double>(largest_zero) / static_cast<double>(largest_plain) : 0.0);
  return 0;
}
