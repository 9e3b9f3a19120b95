// examples/trainer/mode.cpp — choosing the training mode once, and the validation loader both
// modes use (see mode.h).
#include "examples/trainer/mode.h"

#include "minidl/dist/distributed_sampler.h"

namespace trainer {

std::unique_ptr<Mode> make_ordinary_mode(const TrainConfig& cfg, minidl::Device device, const ValSet& val);
std::unique_ptr<Mode> make_deterministic_mode(const TrainConfig& cfg, minidl::Device device, const ValSet& val);

std::unique_ptr<Mode> make_mode(const TrainConfig& cfg, minidl::Device device, const ValSet& val) {
  return cfg.deterministic ? make_deterministic_mode(cfg, device, val) : make_ordinary_mode(cfg, device, val);
}

// [tutorial:val-sampler]
std::unique_ptr<minidl::data::DataLoader> make_val_loader(const ValSet& val, int64_t batch_per_rank, int64_t chunk) {
  auto sampler = std::make_shared<minidl::dist::DistributedSampler>(
      val.images->size(), minidl::dist::DistributedSamplerOptions{.shuffle = false, .exact = true, .chunk = chunk});
  return std::make_unique<minidl::data::DataLoader>(
      val.images,
      minidl::data::DataLoaderOptions{
          .batch_size = batch_per_rank, .num_workers = val.num_workers, .pin_memory = val.pin_memory},
      sampler);
}
// [/tutorial:val-sampler]

}  // namespace trainer
