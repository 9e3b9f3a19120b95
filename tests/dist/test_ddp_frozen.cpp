// tests/dist/test_ddp_frozen.cpp — frozen parameters (requires_grad_(false)) under DDP: no bucket
// slot, no gradient, untouched by the optimizer, while the trainable ones match one process
// training on the whole batch.
#include <cmath>
#include <sstream>

#include "minidl/dist/ddp.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/spawn.h"
#include "minidl/nn/nn_all.h"
#include "minidl/optim/optim_all.h"
#include "tests/common/testing.h"

using namespace minidl;

namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}
void require_close(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  require(va.size() == vb.size(), what + ": sizes differ");
  for (size_t i = 0; i < va.size(); ++i)
    if (std::fabs(va[i] - vb[i]) > tol * (1 + std::fabs(vb[i]))) {
      std::ostringstream os;
      os << what << ": element " << i << " is " << va[i] << ", expected " << vb[i];
      throw std::runtime_error(os.str());
    }
}

struct Net : nn::Module {
  nn::Linear body, head;
  Net() : body({.in = 6, .out = 8}), head({.in = 8, .out = 3}) {
    register_module("body", body);
    register_module("head", head);
  }
  void freeze() { body.weight.requires_grad_(false); }  // a frozen backbone (its bias still trains)
  Variable forward(const Variable& x) override { return head(relu(body(x))); }
};

// three SGD steps on a fixed global batch of 8: with DDP on this rank's half, or on all of it
void train(Net& net, dist::DistributedDataParallel* ddp) {
  optim::SGD opt(net.parameters(), {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-2});
  const int rank = ddp ? dist::rank() : 0, world = ddp ? dist::world_size() : 1;
  for (uint64_t s = 0; s < 3; ++s) {
    Tensor x = randn({8, 6}, RandomKey{31, s}), y = randint(0, 3, {8}, RandomKey{32, s});
    const int64_t n = 8 / world;
    opt.zero_grad();
    Variable in(x.narrow(0, rank * n, n).contiguous());
    Variable out = ddp ? ddp->forward(in) : net(in);
    cross_entropy(out, y.narrow(0, rank * n, n).contiguous()).backward();
    require(!net.body.weight.grad().defined(), "a frozen parameter got a gradient");
    if (ddp)
      ddp->step(opt);
    else
      opt.step();
  }
}

}  // namespace

TEST(DDPFrozen, FrozenParametersGetNoBucketSlotAndStayPut) {
  dist::spawn(2, [](int) {
    dist::init({.backend = "gloo", .timeout = std::chrono::seconds(30)});
    manual_seed(4);
    Net ref;
    ref.freeze();
    const Tensor frozen_before = ref.body.weight.data().clone();
    train(ref, nullptr);
    require_close(ref.body.weight.data(), frozen_before, 0, "frozen weight unchanged (one process)");

    manual_seed(4);
    Net net;
    net.freeze();
    dist::DistributedDataParallel ddp(net);
    for (const auto& bucket : ddp.bucket_parameter_names())
      for (const auto& name : bucket) require(name != "body.weight", "the frozen body.weight has a bucket slot");
    size_t slots = 0;
    for (const auto& bucket : ddp.bucket_parameter_names()) slots += bucket.size();
    require(slots == 3, "3 trainable parameters in the buckets, got " + std::to_string(slots));
    train(net, &ddp);
    require_close(net.body.weight.data(), frozen_before, 0, "frozen weight unchanged (DDP)");
    for (const auto& [name, p] : ref.named_parameters())
      require_close(net.state_dict().at(name), p.data(), 1e-5, name + " after 3 DDP steps vs one process");
    dist::shutdown();
  });
}
