// examples/bench_deterministic.cpp — what deterministic mode costs: training images/s of the
// ordinary DDP step against the deterministic one (micro-shards of 16, the fixed tree, one
// all_gather; ghost batch norm for the CNN) at global batch 128, for each reference model, on
// 1 process x 2 threads and 2 processes x 1 thread (Gloo), on synthetic Fashion-MNIST-shaped
// data. Each process holds both variants (two model replicas, two DDP wrappers on one group) and
// alternates them round by round (ordinary first in even rounds, deterministic first in odd
// ones), so load changes hit both; the figures are medians over the rounds and the ratio is
// deterministic / ordinary step time.
//   ./build/examples/bench_deterministic [rounds = 7] [steps per round = 4] [models = mlp,cnn,vit]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "minidl/dist/ddp.h"
#include "minidl/dist/deterministic_ddp.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/spawn.h"
#include "minidl/dist/sync_batchnorm.h"
#include "minidl/nn/models.h"
#include "minidl/optim/adam.h"
#include "minidl/optim/sgd.h"
#include "minidl/tensor/tensor_all.h"

using namespace minidl;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kGlobalBatch = 128, kMicro = 16;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One training setup: a replica of `name`, its optimizer (the recipe's) and its DDP wrapper.
struct Variant {
  std::unique_ptr<nn::Module> model;
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<dist::DataParallel> ddp;  // DistributedDataParallel or DeterministicDDP
  bool deterministic;

  Variant(const std::string& name, bool det) : deterministic(det) {
    manual_seed(0);
    model = nn::make_model(name);
    if (det) dist::convert_sync_batchnorm(*model);  // ghost batch norm (no-op for mlp and vit)
    if (name == "cnn")
      opt = std::make_unique<optim::SGD>(model->parameters(),
                                         optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 5e-4});
    else if (name == "mlp")
      opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 1e-3});
    else
      opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions{.lr = 1e-3, .weight_decay = 0.05});
    if (det)
      ddp = std::make_unique<dist::DeterministicDDP>(*model);
    else
      ddp = std::make_unique<dist::DistributedDataParallel>(*model);
  }

  // One step on this rank's share x (local, 1, 28, 28), y (local).
  void step(const Tensor& x, const Tensor& y) {
    opt->zero_grad();
    if (!deterministic) {
      cross_entropy(ddp->forward(Variable(x)), y).backward();
    } else {
      for (int64_t j = 0; j < x.size(0) / kMicro; ++j)
        cross_entropy(ddp->forward(Variable(x.narrow(0, j * kMicro, kMicro))), y.narrow(0, j * kMicro, kMicro))
            .backward();
    }
    ddp->step(*opt);
  }
};

// On every rank: median images/s of the ordinary and the deterministic variant, "ord det".
std::string bench(const std::string& name, int rounds, int steps) {
  const int64_t local = kGlobalBatch / dist::world_size();
  const Tensor x = rand({local, 1, 28, 28}, RandomKey{1, static_cast<uint64_t>(dist::rank())});
  const Tensor y = randint(0, 10, {local}, RandomKey{2, static_cast<uint64_t>(dist::rank())});
  Variant ordinary(name, false), det(name, true);
  for (int w = 0; w < 2; ++w) {  // warm-up: allocator caches, first-touch pages
    ordinary.step(x, y);
    det.step(x, y);
  }
  std::vector<double> ips_ord, ips_det;
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < 2; ++k) {
      const bool run_det = (k == 0) == (r % 2 == 1);
      Variant& v = run_det ? det : ordinary;
      dist::barrier();  // every rank starts the round together
      const auto t0 = Clock::now();
      for (int s = 0; s < steps; ++s) v.step(x, y);
      const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      (run_det ? ips_det : ips_ord).push_back(static_cast<double>(steps * kGlobalBatch) / seconds);
    }
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f %.1f", median(ips_ord), median(ips_det));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 7;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 4;
  const std::string models = argc > 3 ? argv[3] : "mlp,cnn,vit";
  std::printf("global batch %lld, micro-shards of %lld, %d rounds x %d steps per variant, medians\n",
              static_cast<long long>(kGlobalBatch), static_cast<long long>(kMicro), rounds, steps);
  std::printf("%-5s %-22s %12s %16s %20s\n", "model", "processes x threads", "ordinary", "deterministic",
              "det / ordinary time");
  for (const char* name : {"mlp", "cnn", "vit"}) {
    if (models.find(name) == std::string::npos) continue;
    for (int world : {1, 2}) {
      const auto out = dist::spawn_with_results(world,
                                                [&](int) {
                                                  dist::init({.backend = "gloo"});
                                                  std::string r = bench(name, rounds, steps);
                                                  dist::shutdown();
                                                  return r;
                                                },
                                                {.omp_threads = world == 1 ? 2 : 1});
      double ord = 0, det = 0;
      std::sscanf(out[0].c_str(), "%lf %lf", &ord, &det);
      std::printf("%-5s %-22s %8.1f img/s %10.1f img/s %19.2fx\n", name, world == 1 ? "1 x 2" : "2 x 1", ord, det,
                  ord / det);
      std::fflush(stdout);
    }
  }
  return 0;
}
