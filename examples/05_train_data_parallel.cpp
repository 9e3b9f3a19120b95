// examples/05_train_data_parallel.cpp — 04_train_single_process.cpp made data-parallel: the
// steps of the PyTorch DDP / PaddleViT multi-GPU guides, in order, in one short program.
// Two processes (spawned here) each train the CNN of reference-models.md on their half of every
// batch; DDP averages the gradients, so both hold the same weights after every step.
//   build/examples/05_train_data_parallel [batches = 20] [data dir = /usr/share/datasets/fashion-mnist]
// The full trainer (examples/train.cpp) adds flags, recipes, metrics files and resumable
// checkpoints around exactly these steps; docs/tutorial.md walks through them.
#include <cstdio>
#include <map>
#include <memory>
#include <numeric>
#include <string>

#include "minidl/data/data_all.h"
#include "minidl/dist/ddp.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/distributed_sampler.h"
#include "minidl/dist/metrics.h"
#include "minidl/dist/spawn.h"
#include "minidl/dist/sync_batchnorm.h"
#include "minidl/nn/nn_all.h"
#include "minidl/optim/optim_all.h"
#include "minidl/tensor/serialize.h"

using namespace minidl;

// What every process runs. The data sets were loaded once by the parent and are shared.
void worker(std::shared_ptr<const data::Dataset> train_set, std::shared_ptr<const data::Dataset> test_set,
            int64_t batches) {
  // [tutorial:05-init]
  dist::init();  // rendezvous at MASTER_ADDR:MASTER_PORT (set by spawn), then a shm or Gloo group
  const int rank = dist::rank(), world = dist::world_size();
  // [/tutorial:05-init]

  // [tutorial:05-sampler]
  // Each rank reads its own share of one (seed, epoch)-keyed permutation of the data set.
  auto sampler = std::make_shared<dist::DistributedSampler>(train_set->size(),
                                                            dist::DistributedSamplerOptions{.shuffle = true, .seed = 0});
  data::DataLoader loader(train_set, {.batch_size = 64 / world, .num_workers = 1}, sampler);  // global batch 64
  // [/tutorial:05-sampler]

  // [tutorial:05-model]
  manual_seed(0);                    // the same initial weights on every rank
  nn::CNN model;
  dist::convert_sync_batchnorm(model);  // BatchNorm statistics over the global batch
  dist::DistributedDataParallel ddp(model);  // broadcasts rank 0's weights; averages gradients
  optim::SGD optimizer(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  // [/tutorial:05-model]
  // [tutorial:05-warmup]
  // The learning rate ramps linearly from 0.005 to 0.05 over the first 5 steps (torch's LinearLR).
  optim::LinearWarmup warmup(optimizer, /*warmup_steps=*/5, /*start_factor=*/0.1);
  // [/tutorial:05-warmup]

  // [tutorial:05-train]
  ddp.train();
  for (int64_t epoch = 0, step = 0; step < batches; ++epoch) {
    loader.set_epoch(epoch);  // a new shuffle each epoch, the same on every rank
    for (auto& batch : loader) {
      if (step++ == batches) break;
      optimizer.zero_grad();
      Variable loss = cross_entropy(ddp.forward(Variable(batch.input)), batch.target, /*label_smoothing=*/0.1);
      loss.backward();        // gradient all-reduces overlap the rest of backward
      ddp.finish();           // wait for the averaged gradients: the same on every rank
      optim::clip_grad_norm(model.parameters(), 5.0);  // so every rank clips them alike
      optimizer.step();
      warmup.step();          // the next step's learning rate
      if (rank == 0 && step % 5 == 0) std::printf("step %3lld  loss %.4f (rank 0's half)\n", static_cast<long long>(step), loss.item());
    }
    loader.reset();
  }
  // [/tutorial:05-train]

  // [tutorial:05-metrics]
  // Exact evaluation: every test image on exactly one rank; sums weighted by the shard sizes.
  auto test_sampler = std::make_shared<dist::DistributedSampler>(
      test_set->size(), dist::DistributedSamplerOptions{.shuffle = false, .exact = true});
  data::DataLoader test_loader(test_set, {.batch_size = 250}, test_sampler);
  model.eval();
  NoGradGuard no_grad;
  dist::MetricSums sums;
  for (auto& batch : test_loader) {
    Variable logits = model(Variable(batch.input));
    const double n = static_cast<double>(batch.target.numel());
    const double correct = sum(eq(argmax(logits.data(), 1), batch.target)).item();
    sums.add("loss", cross_entropy(logits, batch.target).item(), n);
    sums.add("acc", correct / n, n);
  }
  std::map<std::string, double> mean = sums.all_reduce_mean(dist::default_group());  // one all-reduce
  // [/tutorial:05-metrics]

  // [tutorial:05-save]
  if (rank == 0) {  // the replicas are identical: one process writes
    std::printf("test loss %.4f, accuracy %.2f%% over %lld images (%d processes)\n", mean["loss"], 100 * mean["acc"],
                static_cast<long long>(test_set->size()), world);
    save(model.state_dict(), "/tmp/05_cnn.safetensors");  // atomic: temporary file, then rename
  }
  dist::barrier();   // nobody leaves while rank 0 is still writing
  dist::shutdown();
  // [/tutorial:05-save]
}

int main(int argc, char** argv) {
  const int64_t batches = argc > 1 ? std::stoll(argv[1]) : 20;
  const std::string dir = argc > 2 ? argv[2] : data::kFashionMnistDir;
  // [tutorial:05-spawn]
  // Load the data once, then fork one process per device; each runs worker() as one rank.
  auto train_set = std::make_shared<data::MnistDataset>(dir, /*train=*/true);
  std::vector<int64_t> first(1000);
  std::iota(first.begin(), first.end(), 0);
  auto test_set = std::make_shared<data::Subset>(std::make_shared<data::MnistDataset>(dir, false), first);
  dist::spawn(2, [&](int /*rank*/) { worker(train_set, test_set, batches); });
  // [/tutorial:05-spawn]
  return 0;
}
