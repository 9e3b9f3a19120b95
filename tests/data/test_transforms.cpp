// tests/data/test_transforms.cpp — Normalize values, RandomCrop/RandomHorizontalFlip keyed by
// (seed, epoch, index): deterministic, different across epochs, independent across Compose stages.
#include "tests/common/testing.h"
#include "minidl/data/transforms.h"
#include "minidl/tensor/creation.h"

namespace minidl::data {
namespace {

using minidl::testing::expect_equal;

// (C, H, W) float32 with value c * 1000 + h * 100 + w + 1 (never 0, so padding is recognisable).
Tensor coded_image(int64_t C, int64_t H, int64_t W) {
  Tensor t({C, H, W}, DType::Float32);
  float* p = t.data<float>();
  for (int64_t c = 0; c < C; ++c)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w) p[(c * H + h) * W + w] = static_cast<float>(c * 1000 + h * 100 + w + 1);
  return t;
}

bool bits_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.to_vector<double>() == b.to_vector<double>();
}

TEST(Normalize, Uint8IsScaledTo01ThenNormalisedPerChannel) {
  const Tensor x = from_vector<uint8_t>({0, 255, 51, 102}, {2, 1, 2});
  const Normalize norm({.mean = {0.5, 0.0}, .std = {0.5, 0.2}});
  const Tensor y = norm.apply(x, {});
  EXPECT_EQ(y.dtype(), DType::Float32);
  minidl::testing::expect_close(y, from_vector<float>({-1.0f, 1.0f, 1.0f, 2.0f}, {2, 1, 2}), 1e-6, 1e-6);
}

TEST(Normalize, FloatInputIsNotRescaledAndOneValueAppliesToAllChannels) {
  const Tensor x = from_vector<float>({1.0f, 2.0f, 3.0f}, {3, 1, 1});
  const Tensor y = Normalize({.mean = {1.0}, .std = {2.0}}).apply(x, {});
  minidl::testing::expect_close(y, from_vector<float>({0.0f, 0.5f, 1.0f}, {3, 1, 1}), 0, 1e-7);
}

TEST(Normalize, WrongNumberOfChannelValuesIsAnError) {
  EXPECT_THROW_MSG(Normalize({.mean = {0.1, 0.2}, .std = {1, 1}}).apply(zeros({3, 2, 2}), {}), std::invalid_argument,
                   "2 mean/std values for an input float32[3, 2, 2] on cpu with 3 channels");
  EXPECT_THROW_MSG(Normalize({.mean = {0.1}, .std = {0.0}}), std::invalid_argument, "std values must be > 0");
}

TEST(RandomCrop, WithoutPaddingAtFullSizeIsTheIdentity) {
  const Tensor x = coded_image(2, 5, 6).narrow(2, 0, 5);  // non-contiguous (2, 5, 5)
  const Tensor y = RandomCrop({.size = 5}).apply(x, {.seed = 1, .epoch = 2, .index = 3});
  expect_equal(y, x.contiguous());
}

TEST(RandomCrop, OutputIsTheKeyedWindowOfThePaddedImage) {
  const Tensor x = coded_image(3, 8, 8);
  const RandomCrop crop({.size = 8, .padding = 2, .fill = 0.0});
  for (int64_t index = 0; index < 40; ++index) {
    const SampleKey key{.seed = 7, .epoch = 1, .index = index};
    const Tensor y = crop.apply(x, key);
    ASSERT_EQ(y.shape(), (Shape{3, 8, 8}));
    const auto r = sample_random_words(key);
    const int64_t top = r[0] % 5, left = r[1] % 5;  // 8 + 4 - 8 + 1 = 5 choices each
    const float* p = y.data<float>();
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t i = 0; i < 8; ++i)
        for (int64_t j = 0; j < 8; ++j) {
          const int64_t h = top + i - 2, w = left + j - 2;
          const float want =
              (h < 0 || h >= 8 || w < 0 || w >= 8) ? 0.0f : static_cast<float>(c * 1000 + h * 100 + w + 1);
          ASSERT_EQ(p[(c * 8 + i) * 8 + j], want) << "index " << index << " c " << c << " i " << i << " j " << j;
        }
  }
}

TEST(RandomCrop, SameKeySameCropDifferentEpochsDiffer) {
  const Tensor x = coded_image(1, 10, 10);
  const RandomCrop crop({.size = 10, .padding = 4});
  int differ = 0;
  for (int64_t index = 0; index < 50; ++index) {
    const Tensor a = crop.apply(x, {.seed = 3, .epoch = 0, .index = index});
    expect_equal(crop.apply(x, {.seed = 3, .epoch = 0, .index = index}), a);
    differ += !bits_equal(a, crop.apply(x, {.seed = 3, .epoch = 1, .index = index}));
  }
  EXPECT_GE(differ, 40);  // 81 possible windows: a repeat is rare
}

TEST(RandomCrop, CropLargerThanPaddedImageIsAnError) {
  EXPECT_THROW_MSG(RandomCrop({.size = 9, .padding = 0}).apply(zeros({1, 8, 8}), {}), std::invalid_argument,
                   "a 9x9 crop does not fit");
  EXPECT_THROW_MSG(RandomCrop({.size = 2}).apply(zeros({8, 8}), {}), std::invalid_argument, "expected a (C, H, W)");
}

TEST(RandomHorizontalFlip, HflipMirrorsTheLastDimension) {
  const Tensor x = from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {1, 2, 3});
  EXPECT_EQ(hflip(x).to_vector<int64_t>(), (std::vector<int64_t>{3, 2, 1, 6, 5, 4}));
}

TEST(RandomHorizontalFlip, ProbabilityOneAlwaysFlipsZeroNever) {
  const Tensor x = coded_image(2, 3, 4);
  for (int64_t index = 0; index < 10; ++index) {
    expect_equal(RandomHorizontalFlip({.p = 1.0}).apply(x, {.index = index}), hflip(x));
    expect_equal(RandomHorizontalFlip({.p = 0.0}).apply(x, {.index = index}), x);
  }
}

TEST(RandomHorizontalFlip, HalfTheSamplesFlipDeterministicallyAndEpochsDiffer) {
  const Tensor x = coded_image(1, 2, 3);
  const RandomHorizontalFlip flip({.p = 0.5});
  int flipped = 0, changed = 0;
  for (int64_t index = 0; index < 1000; ++index) {
    const bool f0 = !bits_equal(flip.apply(x, {.seed = 5, .epoch = 0, .index = index}), x);
    const bool again = !bits_equal(flip.apply(x, {.seed = 5, .epoch = 0, .index = index}), x);
    const bool f1 = !bits_equal(flip.apply(x, {.seed = 5, .epoch = 1, .index = index}), x);
    ASSERT_EQ(f0, again) << "index " << index;
    flipped += f0;
    changed += f0 != f1;
  }
  EXPECT_NEAR(flipped, 500, 60);
  EXPECT_NEAR(changed, 500, 60);  // epochs are independent: half the decisions change
}

TEST(Compose, AppliesInOrderWithIndependentStages) {
  const Tensor x = coded_image(1, 2, 3);
  const auto flip = std::make_shared<RandomHorizontalFlip>(RandomHorizontalFlipOptions{.p = 0.5});
  const Compose twice({flip, flip});
  int identity = 0;
  for (int64_t index = 0; index < 1000; ++index) identity += bits_equal(twice.apply(x, {.seed = 9, .index = index}), x);
  // Same numbers in both stages would always cancel (1000); independent stages cancel half the time.
  EXPECT_NEAR(identity, 500, 60);

  const Compose chain({std::make_shared<Normalize>(NormalizeOptions{.mean = {1.0}, .std = {2.0}}),
                       std::make_shared<RandomHorizontalFlip>(RandomHorizontalFlipOptions{.p = 1.0})});
  const Tensor y = chain.apply(from_vector<float>({1.0f, 3.0f, 5.0f}, {1, 1, 3}), {});
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{2.0f, 1.0f, 0.0f}));
}

}  // namespace
}  // namespace minidl::data
