// data/transforms.cpp — Normalize, RandomCrop, RandomHorizontalFlip and Compose as plain loops
// over contiguous (C, H, W) buffers; random choices from sample_random_words.
#include "minidl/data/transforms.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "minidl/kernels/philox.h"

namespace minidl::data {

std::array<uint32_t, 4> sample_random_words(const SampleKey& key) {
  const uint64_t stream = static_cast<uint64_t>(key.epoch) + ((uint64_t{1} + key.stage) << 48);
  const kernels::Philox4x32 r = kernels::philox_at(key.seed, stream, static_cast<uint64_t>(key.index));
  return {r.v[0], r.v[1], r.v[2], r.v[3]};
}

namespace {

void check_image(const Tensor& x, const char* op) {
  if (!x.defined() || x.dim() != 3)
    throw std::invalid_argument(std::string(op) + ": expected a (C, H, W) image, got " +
                                (x.defined() ? x.desc() : std::string("an undefined tensor")));
  if (!x.device().is_cpu()) throw std::invalid_argument(std::string(op) + ": expected a CPU tensor, got " + x.desc());
}

}  // namespace

// ---- Normalize ----

Normalize::Normalize(NormalizeOptions options) : options_(std::move(options)) {
  if (options_.mean.empty() || options_.mean.size() != options_.std.size())
    throw std::invalid_argument("Normalize: mean and std need the same number (>= 1) of values, got " +
                                std::to_string(options_.mean.size()) + " and " + std::to_string(options_.std.size()));
  for (double s : options_.std)
    if (!(s > 0.0)) throw std::invalid_argument("Normalize: std values must be > 0, got " + std::to_string(s));
}

Tensor Normalize::apply(const Tensor& input, const SampleKey&) const {
  if (!input.defined() || input.dim() < 1 || !input.device().is_cpu())
    throw std::invalid_argument("Normalize: expected a CPU tensor (C, ...), got " +
                                (input.defined() ? input.desc() : std::string("an undefined tensor")));
  const int64_t channels = input.size(0);
  const int64_t nvalues = static_cast<int64_t>(options_.mean.size());
  if (nvalues != 1 && nvalues != channels)
    throw std::invalid_argument("Normalize: " + std::to_string(nvalues) + " mean/std values for an input " +
                                input.desc() + " with " + std::to_string(channels) + " channels (dim 0)");
  const Tensor x = input.contiguous();
  Tensor out(x.shape(), DType::Float32);
  const int64_t plane = channels == 0 ? 0 : x.numel() / channels;
  float* dst = out.data<float>();
  dispatch(x.dtype(), "Normalize", [&](auto tag) {
    using T = decltype(tag);
    const T* src = x.data<T>();
    const double to_unit = std::is_same_v<T, uint8_t> ? 1.0 / 255.0 : 1.0;
    for (int64_t c = 0; c < channels; ++c) {
      const size_t v = nvalues == 1 ? 0 : static_cast<size_t>(c);
      const double scale = to_unit / options_.std[v];
      const double shift = -options_.mean[v] / options_.std[v];
      for (int64_t k = c * plane; k < (c + 1) * plane; ++k)
        dst[k] = static_cast<float>(static_cast<double>(src[k]) * scale + shift);
    }
  });
  return out;
}

// ---- RandomCrop ----

RandomCrop::RandomCrop(RandomCropOptions options) : options_(options) {
  if (options_.size < 1 || options_.padding < 0)
    throw std::invalid_argument("RandomCrop: need size >= 1 and padding >= 0, got size " +
                                std::to_string(options_.size) + ", padding " + std::to_string(options_.padding));
}

Tensor RandomCrop::apply(const Tensor& input, const SampleKey& key) const {
  check_image(input, "RandomCrop");
  const Tensor x = input.contiguous();
  const int64_t C = x.size(0), H = x.size(1), W = x.size(2);
  const int64_t p = options_.padding, S = options_.size;
  if (H + 2 * p < S || W + 2 * p < S)
    throw std::invalid_argument("RandomCrop: a " + std::to_string(S) + "x" + std::to_string(S) +
                                " crop does not fit in " + x.desc() + " padded by " + std::to_string(p));
  const std::array<uint32_t, 4> r = sample_random_words(key);
  // Window origin in padded coordinates, uniform over the (H + 2p - S + 1) x (W + 2p - S + 1) choices.
  const int64_t top = static_cast<int64_t>(r[0] % static_cast<uint64_t>(H + 2 * p - S + 1));
  const int64_t left = static_cast<int64_t>(r[1] % static_cast<uint64_t>(W + 2 * p - S + 1));
  Tensor out({C, S, S}, x.dtype());  // (C, S, S)
  dispatch(x.dtype(), "RandomCrop", [&](auto tag) {
    using T = decltype(tag);
    const T* src = x.data<T>();
    T* dst = out.data<T>();
    const T fill = static_cast<T>(options_.fill);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < S; ++i) {
        const int64_t h = top + i - p;  // row in the unpadded image
        T* row = dst + (c * S + i) * S;
        if (h < 0 || h >= H) {
          std::fill(row, row + S, fill);
          continue;
        }
        // Columns j with 0 <= left + j - p < W come from the image; the rest are padding.
        const int64_t j0 = std::clamp<int64_t>(p - left, 0, S), j1 = std::clamp<int64_t>(p - left + W, 0, S);
        std::fill(row, row + j0, fill);
        if (j1 > j0) std::memcpy(row + j0, src + (c * H + h) * W + (left + j0 - p), (j1 - j0) * sizeof(T));
        std::fill(row + std::max(j0, j1), row + S, fill);
      }
  });
  return out;
}

// ---- RandomHorizontalFlip ----

Tensor hflip(const Tensor& input) {
  if (!input.defined() || input.dim() < 1 || !input.device().is_cpu())
    throw std::invalid_argument("hflip: expected a CPU tensor (..., W), got " +
                                (input.defined() ? input.desc() : std::string("an undefined tensor")));
  const Tensor x = input.contiguous();
  const int64_t W = x.size(-1), rows = W == 0 ? 0 : x.numel() / W;
  Tensor out(x.shape(), x.dtype());
  dispatch(x.dtype(), "hflip", [&](auto tag) {
    using T = decltype(tag);
    const T* src = x.data<T>();
    T* dst = out.data<T>();
    for (int64_t r = 0; r < rows; ++r) std::reverse_copy(src + r * W, src + (r + 1) * W, dst + r * W);
  });
  return out;
}

RandomHorizontalFlip::RandomHorizontalFlip(RandomHorizontalFlipOptions options) : options_(options) {
  if (!(options_.p >= 0.0 && options_.p <= 1.0))
    throw std::invalid_argument("RandomHorizontalFlip: p must be in [0, 1], got " + std::to_string(options_.p));
}

Tensor RandomHorizontalFlip::apply(const Tensor& input, const SampleKey& key) const {
  const std::array<uint32_t, 4> r = sample_random_words(key);
  const double u = kernels::philox_uniform_double(r[2], r[3]);
  return u < options_.p ? hflip(input) : input;
}

// ---- Compose ----

Compose::Compose(std::vector<std::shared_ptr<const Transform>> transforms) : transforms_(std::move(transforms)) {
  for (size_t k = 0; k < transforms_.size(); ++k)
    if (!transforms_[k]) throw std::invalid_argument("Compose: transform " + std::to_string(k) + " is null");
}

Tensor Compose::apply(const Tensor& input, const SampleKey& key) const {
  Tensor x = input;
  SampleKey k = key;
  for (size_t s = 0; s < transforms_.size(); ++s) {
    k.stage = key.stage + static_cast<uint32_t>(s);
    x = transforms_[s]->apply(x, k);
  }
  return x;
}

}  // namespace minidl::data
