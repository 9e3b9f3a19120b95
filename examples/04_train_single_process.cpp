// examples/04_train_single_process.cpp — training in one process, the loop every other example
// builds on: data set -> DataLoader -> model -> optimizer -> forward, loss, backward, step ->
// evaluation. The MLP of reference-models.md on a slice of Fashion-MNIST, a few batches by default.
//   build/examples/04_train_single_process [batches = 100] [data dir = /usr/share/datasets/fashion-mnist]
// (examples/05_train_data_parallel.cpp is this same program over 2 processes.)
#include <cstdio>
#include <memory>
#include <numeric>
#include <string>

#include "minidl/data/data_all.h"
#include "minidl/nn/nn_all.h"
#include "minidl/optim/optim_all.h"

using namespace minidl;

int main(int argc, char** argv) {
  const int64_t batches = argc > 1 ? std::stoll(argv[1]) : 100;
  const std::string dir = argc > 2 ? argv[2] : data::kFashionMnistDir;

  // Data: images (1, 28, 28) normalised, labels 0..9. Evaluate on the first 2000 test images.
  auto train_set = std::make_shared<data::MnistDataset>(dir, /*train=*/true);
  std::vector<int64_t> first(2000);
  std::iota(first.begin(), first.end(), 0);
  auto test_set = std::make_shared<data::Subset>(std::make_shared<data::MnistDataset>(dir, false), first);
  data::DataLoader train_loader(train_set, {.batch_size = 64, .shuffle = true, .num_workers = 1, .seed = 0});
  data::DataLoader test_loader(test_set, {.batch_size = 500});

  // Model and optimizer: the same seed gives the same initial weights.
  manual_seed(0);
  nn::MLP model;
  optim::Adam optimizer(model.parameters(), {.lr = 1e-3});

  // The training loop: forward, loss, backward, step.
  model.train();
  train_loader.set_epoch(0);
  int64_t step = 0;
  for (auto& batch : train_loader) {
    if (step == batches) break;
    optimizer.zero_grad();
    Variable logits = model(Variable(batch.input));  // (64, 10)
    Variable loss = cross_entropy(logits, batch.target);  // mean over the batch
    loss.backward();  // gradients into .grad()
    optimizer.step();
    if (++step % 20 == 0) std::printf("batch %3lld  loss %.4f\n", static_cast<long long>(step), loss.item());
  }

  // Evaluation: no graph, eval mode, count the correct predictions.
  model.eval();
  NoGradGuard no_grad;
  int64_t correct = 0, seen = 0;
  for (auto& batch : test_loader) {
    Tensor predicted = argmax(model(Variable(batch.input)).data(), 1);  // (B) int64
    correct += static_cast<int64_t>(sum(eq(predicted, batch.target)).item());
    seen += batch.target.numel();
  }
  std::printf("after %lld batches: test accuracy %.2f%% on %lld images\n", static_cast<long long>(step),
              100.0 * static_cast<double>(correct) / static_cast<double>(seen), static_cast<long long>(seen));
  return 0;
}
