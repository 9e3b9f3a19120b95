// tests/dist/test_grad_scaler_sync.cpp — GradScaler under DDP on two Gloo ranks forked by
// dist::spawn: with sync_grad_scaler, an overflow on one rank only (written into its gradient
// after DDP's all-reduce) makes both ranks skip the step and back off, and the parameters and
// momentum buffers stay bit-identical; without it the same run diverges; an overflow in one rank's
// input reaches both ranks through the gradient average. A failed requirement in a child is an
// exception, which makes spawn() throw with that rank's message.
#include <chrono>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "minidl/autograd/ops.h"
#include "minidl/dist/ddp.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/grad_scaler_sync.h"
#include "minidl/dist/spawn.h"
#include "minidl/nn/nn_all.h"
#include "minidl/optim/optim_all.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/random.h"
#include "tests/common/testing.h"

using namespace minidl;

namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("rank " + std::to_string(dist::rank()) + ": " + what);
}

template <class T> std::string str(const std::vector<T>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "}";
}

enum class Overflow {
  AfterAllReduce,  // rank 1 writes an inf into its averaged gradient (a rank-local clip, hook, ...)
  InInput,  // rank 1's input holds an inf: DDP's average carries it to rank 0
};

struct Result {
  std::vector<double> scales;
  std::vector<int> stepped;
  bool params_equal = true;  // parameters and momentum buffers, bit for bit, rank 0 vs rank 1
};

// Four steps of Linear(4, 2) under DDP with SGD momentum and GradScaler(init_scale 1024,
// growth_interval 2); rank 1 overflows at step 1.
Result run_steps(bool sync, Overflow overflow) {
  manual_seed(0);
  nn::Linear model({.in = 4, .out = 2});
  dist::DistributedDataParallel ddp(model);
  std::vector<Variable> params = model.parameters();
  optim::SGD opt(params, {.lr = 0.1, .momentum = 0.9});
  optim::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 2});
  if (sync) dist::sync_grad_scaler(scaler);

  const int rank = dist::rank();
  Result r;
  for (uint64_t s = 0; s < 4; ++s) {
    Tensor x = rand({3, 4}, RandomKey{40 + static_cast<uint64_t>(rank), s});
    const bool overflow_here = rank == 1 && s == 1;
    if (overflow_here && overflow == Overflow::InInput) x.data<float>()[0] = std::numeric_limits<float>::infinity();
    opt.zero_grad();
    scaler.scale(sum(ddp(Variable(x)))).backward();
    ddp.finish();
    if (overflow_here && overflow == Overflow::AfterAllReduce)
      params[0].grad().data<float>()[0] = std::numeric_limits<float>::infinity();
    r.stepped.push_back(scaler.step(opt) ? 1 : 0);
    scaler.update();
    r.scales.push_back(scaler.get_scale());
  }
  std::vector<Tensor> compared;
  for (size_t i = 0; i < params.size(); ++i) {
    compared.push_back(params[i].data());
    compared.push_back(opt.state(static_cast<int64_t>(i)).at("momentum_buffer"));
  }
  for (const Tensor& t : compared) {
    const std::vector<Tensor> all = dist::all_gather(t.contiguous());
    r.params_equal = r.params_equal && all[0].to_vector<float>() == all[1].to_vector<float>();
  }
  return r;
}

void run_two_ranks(const std::function<void(int rank)>& fn) {
  dist::spawn(2, [&](int rank) {
    dist::init({.backend = "gloo", .timeout = std::chrono::seconds(30)});
    fn(rank);
    dist::shutdown();
  });
}

}  // namespace

TEST(GradScalerSync, OneRanksOverflowMakesBothRanksSkipAndBackOff) {
  run_two_ranks([](int) {
    const Result r = run_steps(true, Overflow::AfterAllReduce);
    require(r.stepped == std::vector<int>({1, 0, 1, 1}), "stepped " + str(r.stepped) + ", expected {1, 0, 1, 1}");
    require(r.scales == std::vector<double>({1024, 512, 512, 1024}),
            "scales " + str(r.scales) + ", expected {1024, 512, 512, 1024}");
    require(r.params_equal, "parameters or momentum buffers differ between the ranks");
  });
}

TEST(GradScalerSync, WithoutTheReducerTheRanksDiverge) {
  run_two_ranks([](int rank) {
    const Result r = run_steps(false, Overflow::AfterAllReduce);
    const std::vector<int> stepped = rank == 0 ? std::vector<int>{1, 1, 1, 1} : std::vector<int>{1, 0, 1, 1};
    const std::vector<double> scales =
        rank == 0 ? std::vector<double>{1024, 2048, 2048, 4096} : std::vector<double>{1024, 512, 512, 1024};
    require(r.stepped == stepped, "stepped " + str(r.stepped) + ", expected " + str(stepped));
    require(r.scales == scales, "scales " + str(r.scales) + ", expected " + str(scales));
    require(!r.params_equal, "the replicas should have diverged");
  });
}

TEST(GradScalerSync, AnOverflowInOneRanksInputReachesBothThroughTheAverage) {
  run_two_ranks([](int) {
    const Result r = run_steps(false, Overflow::InInput);
    require(r.stepped == std::vector<int>({1, 0, 1, 1}), "stepped " + str(r.stepped) + ", expected {1, 0, 1, 1}");
    require(r.scales == std::vector<double>({1024, 512, 512, 1024}), "scales " + str(r.scales));
    require(r.params_equal, "parameters or momentum buffers differ between the ranks");
  });
}

TEST(GradScalerSync, AnExplicitGroupOnOneRank) {
  dist::spawn(1, [](int) {
    dist::init({.backend = "gloo", .timeout = std::chrono::seconds(30)});
    Variable w(from_vector<float>({1.0f}), true);
    optim::SGD opt({w}, {.lr = 1.0});
    optim::GradScaler scaler({.init_scale = 2.0});
    dist::sync_grad_scaler(scaler, &dist::default_group());
    w.set_grad(from_vector<float>({std::numeric_limits<float>::quiet_NaN()}));
    require(!scaler.step(opt), "a NaN on the only rank skips the step");
    scaler.update();
    require(scaler.get_scale() == 1.0, "scale " + std::to_string(scaler.get_scale()) + ", expected 1");
    dist::shutdown();
  });
}
