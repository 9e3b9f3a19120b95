// examples/06_accumulate_and_freeze.cpp — two things that meet DDP inside the training step, in
// one short program, each checked as it runs:
//  - gradient accumulation: the first micro-batches' backward runs under ddp.no_sync() (their
//    gradients add up locally, no all-reduce), the last one's outside it (one all-reduce of the
//    sums) — the result equals one step on the whole batch, checked against gradients computed
//    without DDP and averaged by hand;
//  - freezing a layer: requires_grad_(false) before DDP is built keeps the parameter out of DDP's
//    buckets; it gets no gradient and the optimizer leaves it alone, checked after the steps.
// Two processes (spawned here), the MLP of reference-models.md, random Fashion-MNIST-shaped data.
//   build/examples/06_accumulate_and_freeze
// Exit status 0 when both checks hold, 1 otherwise.
#include <cmath>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <vector>

#include "minidl/dist/ddp.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/spawn.h"
#include "minidl/nn/nn_all.h"
#include "minidl/optim/optim_all.h"

using namespace minidl;

namespace {

constexpr int kMicroBatches = 2;
constexpr int64_t kMicro = 32;  // images per micro-batch per rank

// The largest absolute difference between two tensors of one shape.
double max_diff(const Tensor& a, const Tensor& b) { return max(abs(sub(a, b))).item(); }

void worker(int rank) {
  dist::init();
  const int world = dist::world_size();
  manual_seed(0);  // the same initial weights on every rank
  nn::MLP model;   // net: Flatten, Linear(784, 256), ReLU, Linear(256, 128), ReLU, Linear(128, 10)
  nn::MLP reference;  // the same weights, trained without DDP: what the accumulated step must equal
  reference.load_state_dict(model.state_dict());

  // [tutorial:06-freeze]
  // Freeze the first layer before DDP lays out its buckets: its parameters get no slot, no
  // gradient, and the optimizer skips them.
  for (Variable& p : model.net[1].parameters()) p.requires_grad_(false);
  const Tensor frozen_before = model.net[1].parameters()[0].data().clone();
  dist::DistributedDataParallel ddp(model);
  optim::SGD optimizer(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  // [/tutorial:06-freeze]

  double worst = 0;
  for (int step = 0; step < 3; ++step) {
    std::vector<Tensor> xs, ys;  // this rank's micro-batches of this step
    for (int m = 0; m < kMicroBatches; ++m) {
      const uint64_t stream = static_cast<uint64_t>((step * kMicroBatches + m) * world + rank);
      xs.push_back(rand({kMicro, 1, 28, 28}, RandomKey{7, stream}));
      ys.push_back(randint(0, 10, {kMicro}, RandomKey{8, stream}));
    }
    // [tutorial:06-accumulate]
    // Gradient accumulation: each micro-batch's loss is divided by their number, so the sum of
    // the gradients is the gradient of the whole batch's mean loss. Only the last backward,
    // outside no_sync(), all-reduces (the sums of every micro-batch, averaged over the ranks).
    optimizer.zero_grad();
    for (int m = 0; m < kMicroBatches; ++m) {
      std::optional<dist::DistributedDataParallel::NoSyncGuard> local;
      if (m + 1 < kMicroBatches) local.emplace(ddp);  // forward and backward add locally, no all-reduce
      (cross_entropy(ddp.forward(Variable(xs[m])), ys[m]) / static_cast<double>(kMicroBatches)).backward();
    }
    ddp.finish();  // the averaged gradients, the same on every rank
    // [/tutorial:06-accumulate]

    // The same step without DDP: the whole batch's gradients on each rank, averaged by hand.
    reference.zero_grad();
    cross_entropy(reference(Variable(cat(xs, 0))), cat(ys, 0)).backward();
    for (size_t i = 2; i < model.parameters().size(); ++i) {  // [0], [1]: the frozen layer
      Tensor expected = reference.parameters()[i].grad().clone();
      dist::all_reduce(expected);
      expected = expected / static_cast<double>(world);
      worst = std::max(worst, max_diff(model.parameters()[i].grad(), expected));
    }
    optimizer.step();
    reference.load_state_dict(model.state_dict());  // the next step starts from the same weights
  }
  const bool frozen_kept = max_diff(model.net[1].parameters()[0].data(), frozen_before) == 0.0 &&
                           !model.net[1].parameters()[0].grad().defined();
  if (rank == 0) {
    std::printf("accumulated gradients of %d micro-batches x %lld images on %d ranks against the whole batch's: "
                "max difference %.3g\n",
                kMicroBatches, static_cast<long long>(kMicro), world, worst);
    std::printf("frozen first layer: %s\n", frozen_kept ? "unchanged, no gradient" : "CHANGED");
  }
  dist::barrier();
  dist::shutdown();
  if (worst > 1e-6 || !frozen_kept) throw std::runtime_error("a check failed (see above)");
}

}  // namespace

int main() {
  try {
    dist::spawn(2, worker);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "06_accumulate_and_freeze: %s\n", e.what());
    return 1;
  }
  std::printf("both checks hold\n");
  return 0;
}
