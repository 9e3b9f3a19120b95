// data/transforms.h — per-sample transforms applied on the DataLoader's worker threads:
// Normalize (to float32, then (x - mean[c]) / std[c]), RandomCrop (zero padding, then a random
// size x size window), RandomHorizontalFlip, and Compose to chain them.
//
// Randomness is keyed, never drawn from hidden state: a transform's random numbers are
//   philox_at(seed, stream = epoch + ((1 + stage) << 48), index = dataset index of the sample)
// so a sample gets the same augmentation whichever worker thread or rank loads it, different
// augmentations in different epochs, and independent numbers for each stage of a Compose.
// (Stream tag 0 is left to the samplers, which key their shuffles by (seed, epoch).)
//
// Images are (C, H, W); crop and flip keep the dtype, Normalize returns float32.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "minidl/tensor/tensor.h"

namespace minidl::data {

// Which sample, in which epoch, under which seed — everything a random transform may depend on.
struct SampleKey {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t index = 0;  // the sample's index in the dataset (not its position in a batch)
  uint32_t stage = 0;  // position in a Compose; set by Compose
};

// Four random 32-bit words for this key: kernels::philox_at with the keying described above.
std::array<uint32_t, 4> sample_random_words(const SampleKey& key);

class Transform {
 public:
  virtual ~Transform() = default;
  // Must be thread-safe: workers call it concurrently on different samples.
  virtual Tensor apply(const Tensor& input, const SampleKey& key) const = 0;
};

struct NormalizeOptions {
  std::vector<double> mean = {0.0};  // one value, or one per channel (dim 0)
  std::vector<double> std = {1.0};
};
// uint8 input is first scaled to [0, 1] (/ 255); float input is used as it is. Output float32.
class Normalize : public Transform {
 public:
  explicit Normalize(NormalizeOptions options = {});
  Tensor apply(const Tensor& input, const SampleKey& key) const override;

 private:
  NormalizeOptions options_;
};

struct RandomCropOptions {
  int64_t size = 32;  // output is (C, size, size)
  int64_t padding = 0;  // added on all four sides before cropping
  double fill = 0.0;  // value of the padding
};
// Pads (C, H, W) by `padding`, then takes a size x size window at a random (top, left).
class RandomCrop : public Transform {
 public:
  explicit RandomCrop(RandomCropOptions options = {});
  Tensor apply(const Tensor& input, const SampleKey& key) const override;

 private:
  RandomCropOptions options_;
};

struct RandomHorizontalFlipOptions {
  double p = 0.5;  // probability of flipping
};
// Mirrors the last dimension (W) with probability p.
class RandomHorizontalFlip : public Transform {
 public:
  explicit RandomHorizontalFlip(RandomHorizontalFlipOptions options = {});
  Tensor apply(const Tensor& input, const SampleKey& key) const override;

 private:
  RandomHorizontalFlipOptions options_;
};

// Applies transforms in order; transform k sees the key with stage = k.
class Compose : public Transform {
 public:
  explicit Compose(std::vector<std::shared_ptr<const Transform>> transforms);
  Tensor apply(const Tensor& input, const SampleKey& key) const override;

 private:
  std::vector<std::shared_ptr<const Transform>> transforms_;
};

// Horizontal flip of a (..., W) tensor, always (the deterministic half of RandomHorizontalFlip).
Tensor hflip(const Tensor& input);

}  // namespace minidl::data
