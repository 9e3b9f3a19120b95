// examples/bench_dataloader.cpp — DataLoader throughput: images/s over the Fashion-MNIST train set
// (60000 images, (1, 28, 28) float32 after normalisation) at batch 128, shuffled, with 0, 1 and 2
// worker threads. Prints one line per configuration; the numbers go into docs/benchmarks.md.
//   ./bench_dataloader [dir = /usr/share/datasets/fashion-mnist] [epochs = 3]
// Each configuration runs `epochs` full epochs (set_epoch each time) after one warm-up epoch and
// reports the best epoch. The consumer does nothing but touch the batch, so this measures the
// loader alone (reading from memory, converting, collating), not a training step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>

#include "minidl/data/dataloader.h"
#include "minidl/data/mnist.h"

namespace data = minidl::data;

namespace {

// Seconds for one full epoch; the checksum keeps the compiler from skipping the work.
double time_epoch(data::DataLoader& loader, int64_t epoch, double& checksum) {
  loader.set_epoch(epoch);
  const auto start = std::chrono::steady_clock::now();
  for (auto& batch : loader) checksum += batch.input.data<float>()[0] + static_cast<double>(batch.target.numel());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string dir = argc > 1 ? argv[1] : data::kFashionMnistDir;
    const int epochs = argc > 2 ? std::max(1, std::atoi(argv[2])) : 3;
    const auto load_start = std::chrono::steady_clock::now();
    auto train = std::make_shared<data::MnistDataset>(dir, /*train=*/true);
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
    std::printf("Fashion-MNIST train: %lld images loaded (gunzip + parse) in %.2f s\n",
                static_cast<long long>(train->size()), load_s);
    std::printf("%-8s %-6s %14s %12s\n", "workers", "batch", "images/s", "epoch (ms)");
    double checksum = 0;
    for (int workers : {0, 1, 2}) {
      data::DataLoader loader(train, {.batch_size = 128, .shuffle = true, .num_workers = workers, .seed = 0});
      time_epoch(loader, 0, checksum);  // warm-up
      double best = 1e30;
      for (int e = 1; e <= epochs; ++e) best = std::min(best, time_epoch(loader, e, checksum));
      std::printf("%-8d %-6d %14.0f %12.1f\n", workers, 128, static_cast<double>(train->size()) / best, best * 1e3);
    }
    std::printf("(checksum %.3f)\n", checksum);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_dataloader: %s\n", e.what());
    return 1;
  }
}
