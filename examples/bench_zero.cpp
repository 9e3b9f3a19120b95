// examples/bench_zero.cpp — what ZeroRedundancyOptimizer saves and costs: a reference model with
// Adam under DDP on N processes (shared memory, 1 thread each, global batch 128, synthetic
// Fashion-MNIST-shaped data), with plain Adam against Adam sharded by ZeRO-1, their steps taken
// in turn in one process. Prints each one's throughput (its own steps' time) and the bytes of
// Adam state the largest rank holds: 1/N of plain Adam's, the slabs splitting parameters (the
// CNN's Linear(3136, 128) is 95% of it).
//   ./build/examples/bench_zero [steps = 20] [processes = 2] [model = vit | cnn | mlp] [--json FILE | --gather]
//                               [--bucket-cap-mb MB]
// --json FILE: what every rank holds, in bytes (parameters, gradients, optimizer state), under
// plain Adam and under ZeRO-1, for tools/draw_zero_memory.py (the tutorial's picture).
// --gather: instead, ZeRO-1 gathering the parameters at step() against gathering them before use
// (dist::ParameterGather), in blocks of 5 steps taken in turn, each block ending with
// wait_for_parameters() so that no all-gather is left for the other one's time; prints each one's
// time per step on rank 0.
// --bucket-cap-mb MB: DDP's bucket_cap_mb (and first_bucket_cap_mb, at most 1) instead of 25 (and
// 1), so that the gather before use has several buckets to wait for one by one.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

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

int64_t bytes_of(const std::vector<Tensor>& tensors) {
  int64_t n = 0;
  for (const Tensor& t : tensors) n += t.defined() ? t.numel() * static_cast<int64_t>(element_size(t.dtype())) : 0;
  return n;
}

// A fresh model (the same start for both) under DDP, with plain Adam or with ZeRO-1 around Adam.
struct Setup {
  std::unique_ptr<nn::Module> model;
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  std::unique_ptr<optim::Optimizer> opt;
  double seconds = 0;  // in the timed steps
};

Setup make_setup(const std::string& model_name, bool zero, const dist::DDPOptions& ddp_options = {},
                 dist::ParameterGather gather = dist::ParameterGather::AtStep) {
  Setup s;
  manual_seed(0);
  s.model = nn::make_model(model_name);
  s.ddp = std::make_unique<dist::DistributedDataParallel>(*s.model, ddp_options);
  auto make = [](std::vector<optim::ParamGroupSpec> groups) {
    return std::make_unique<optim::Adam>(std::move(groups), optim::AdamOptions{.lr = 1e-3});
  };
  if (zero) {
    s.opt = std::make_unique<dist::ZeroRedundancyOptimizer>(
        s.model->parameters(), make, dist::ZeroRedundancyOptimizerOptions{.ddp = s.ddp.get(), .gather = gather});
  } else {
    s.opt = make(optim::single_group(s.model->parameters()));
  }
  return s;
}

// "images_per_s state_bytes parameter_bytes gradient_bytes " for this rank (Adam's state it holds;
// every parameter and its gradient, which DDP keeps in its buckets).
std::string report(const Setup& s, int steps, int64_t local) {
  const auto* z = dynamic_cast<const dist::ZeroRedundancyOptimizer*>(s.opt.get());
  std::vector<Tensor> params, grads;
  for (const Variable& p : s.model->parameters()) {
    params.push_back(p.data());
    grads.push_back(p.grad());
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.1f %lld %lld %lld ",
                static_cast<double>(steps * local * dist::world_size()) / s.seconds,
                static_cast<long long>(state_bytes(z ? z->local_optimizer() : s.opt.get())),
                static_cast<long long>(bytes_of(params)), static_cast<long long>(bytes_of(grads)));
  return buf;
}

// Trains plain Adam and ZeRO-1 `steps` steps each (after 3 warm-up steps) on this rank's `local`
// images per step, in turn — plain then ZeRO, then ZeRO then plain, ... — so that a busy machine
// slows both alike; returns plain's report, then ZeRO's.
std::string run(const std::string& model_name, int steps, int64_t local, const dist::DDPOptions& ddp_options) {
  Setup plain = make_setup(model_name, false, ddp_options), zero = make_setup(model_name, true, ddp_options);
  const Tensor x = rand({local, 1, 28, 28}, RandomKey{1, 0});
  const Tensor y = randint(0, 10, {local}, RandomKey{1, 1});
  for (int s = -3; s < steps; ++s)
    for (Setup* one : s % 2 == 0 ? std::vector<Setup*>{&plain, &zero} : std::vector<Setup*>{&zero, &plain}) {
      const auto t0 = Clock::now();
      one->opt->zero_grad();
      cross_entropy(one->ddp->forward(Variable(x)), y).backward();
      one->ddp->step(*one->opt);
      if (s >= 0) one->seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    }
  return report(plain, steps, local) + report(zero, steps, local);
}

// --gather: ZeRO-1 gathering at step against gathering before use, `steps` steps each (rounded up
// to blocks of 5, after a block of warm-up), blocks in turn; "seconds_per_step_at_step
// seconds_per_step_before_use".
std::string run_gather(const std::string& model_name, int steps, int64_t local, const dist::DDPOptions& ddp_options) {
  constexpr int kBlock = 5;
  Setup at_step = make_setup(model_name, true, ddp_options, dist::ParameterGather::AtStep),
        before_use = make_setup(model_name, true, ddp_options, dist::ParameterGather::BeforeUse);
  const Tensor x = rand({local, 1, 28, 28}, RandomKey{1, 0});
  const Tensor y = randint(0, 10, {local}, RandomKey{1, 1});
  const int blocks = (steps + kBlock - 1) / kBlock;
  for (int b = -1; b < blocks; ++b)
    for (Setup* one : b % 2 == 0 ? std::vector<Setup*>{&at_step, &before_use} : std::vector<Setup*>{&before_use, &at_step}) {
      const auto t0 = Clock::now();
      for (int s = 0; s < kBlock; ++s) {
        one->opt->zero_grad();
        cross_entropy(one->ddp->forward(Variable(x)), y).backward();
        one->ddp->step(*one->opt);
      }
      static_cast<dist::ZeroRedundancyOptimizer&>(*one->opt).wait_for_parameters();
      if (b >= 0) one->seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    }
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.9f %.9f %zu", at_step.seconds / (blocks * kBlock),
                before_use.seconds / (blocks * kBlock), at_step.ddp->num_buckets());
  return buf;
}

// body() on `nproc` processes (shared memory, 1 thread each); every rank's result.
std::vector<std::string> on_ranks(int nproc, const std::function<std::string()>& body) {
  return dist::spawn_with_results(nproc,
                                  [&](int) {
                                    dist::init({.backend = "shm"});
                                    std::string r = body();
                                    dist::shutdown();
                                    return r;
                                  },
                                  {.omp_threads = 1});
}

}  // namespace

// One configuration's bytes per rank, as a JSON list.
std::string json_ranks(const std::vector<std::vector<long long>>& per_rank) {
  std::string out = "[";
  for (size_t r = 0; r < per_rank.size(); ++r) {
    const auto& b = per_rank[r];
    if (r > 0) out += ", ";
    out += "{\"rank\": " + std::to_string(r) + ", \"parameters\": " + std::to_string(b[0]) +
           ", \"gradients\": " + std::to_string(b[1]) + ", \"optimizer_state\": " + std::to_string(b[2]) + "}";
  }
  return out + "]";
}

int main(int argc, char** argv) {
  std::vector<std::string> positional;
  std::string json_path;
  bool gather = false;
  dist::DDPOptions ddp_options;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else if (a == "--gather") {
      gather = true;
    } else if (a == "--bucket-cap-mb" && i + 1 < argc) {
      ddp_options.bucket_cap_mb = std::atof(argv[++i]);
      ddp_options.first_bucket_cap_mb = std::min(1.0, ddp_options.bucket_cap_mb);
    } else if (a.rfind("--", 0) == 0) {
      std::fprintf(stderr, "bench_zero: unknown flag '%s'\n", a.c_str());
      return 2;
    } else {
      positional.push_back(a);
    }
  }
  const int steps = positional.size() > 0 ? std::atoi(positional[0].c_str()) : 20;
  const int nproc = positional.size() > 1 ? std::atoi(positional[1].c_str()) : 2;
  const std::string model = positional.size() > 2 ? positional[2] : "vit";
  if (steps < 1 || nproc < 1 || 128 % nproc != 0 || (model != "vit" && model != "cnn" && model != "mlp") ||
      positional.size() > 3 || (gather && !json_path.empty()) || !(ddp_options.bucket_cap_mb > 0)) {
    std::fprintf(stderr,
                 "usage: bench_zero [steps >= 1] [processes dividing 128] [vit | cnn | mlp] [--json FILE | --gather] "
                 "[--bucket-cap-mb MB > 0]\n");
    return 2;
  }
  if (gather) {
    const auto results = on_ranks(nproc, [&] { return run_gather(model, steps, 128 / nproc, ddp_options); });
    double at_step = 0, before_use = 0;  // rank 0's
    int buckets = 0;
    std::sscanf(results.front().c_str(), "%lf %lf %d", &at_step, &before_use, &buckets);
    std::printf("%s + Adam under ZeRO-1, %d processes x 1 thread (DDP, shm, %d buckets), global batch 128, %d steps each\n",
                model.c_str(), nproc, buckets, steps);
    std::printf("  gather at step   : %8.3f ms/step\n", 1e3 * at_step);
    std::printf("  gather before use: %8.3f ms/step (%.3f of at step)\n", 1e3 * before_use, before_use / at_step);
    return 0;
  }
  const auto results = on_ranks(nproc, [&] { return run(model, steps, 128 / nproc, ddp_options); });
  double ips_plain = 0, ips_zero = 0;  // rank 0's
  long long largest_plain = 0, largest_zero = 0;
  std::vector<std::vector<long long>> plain_bytes, zero_bytes;  // per rank: parameters, gradients, state
  for (const std::string& r : results) {
    double a = 0, c = 0;
    long long b = 0, pb = 0, gb = 0, d = 0, pz = 0, gz = 0;
    std::sscanf(r.c_str(), "%lf %lld %lld %lld %lf %lld %lld %lld", &a, &b, &pb, &gb, &c, &d, &pz, &gz);
    if (&r == &results.front()) ips_plain = a, ips_zero = c;
    largest_plain = std::max(largest_plain, b);
    largest_zero = std::max(largest_zero, d);
    plain_bytes.push_back({pb, gb, b});
    zero_bytes.push_back({pz, gz, d});
  }
  std::printf("%s + Adam, %d processes x 1 thread (DDP, shm), global batch 128, %d steps\n", model.c_str(), nproc,
              steps);
  std::printf("  plain Adam : %8.1f images/s  %9lld bytes of Adam state on the largest rank\n", ips_plain,
              largest_plain);
  std::printf("  ZeRO-1 Adam: %8.1f images/s  %9lld bytes (%.2f of plain)\n", ips_zero, largest_zero,
              largest_plain > 0 ? static_cast<double>(largest_zero) / static_cast<double>(largest_plain) : 0.0);
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << "{\"model\": \"" << model << "\", \"processes\": " << nproc << ", \"optimizer\": \"Adam\",\n"
        << " \"DDP\": " << json_ranks(plain_bytes) << ",\n"
        << " \"ZeRO-1\": " << json_ranks(zero_bytes) << "}\n";
    if (!out) {
      std::fprintf(stderr, "bench_zero: cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  return 0;
}
