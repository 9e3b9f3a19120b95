// tests/tensor/test_random.cpp — Philox 4x32-10 known answers (Random123's kat_vectors) and the
// properties minidl relies on: values depend only on (seed, stream, index).
#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/philox.h"
#include "tests/common/testing.h"

using namespace minidl;
using kernels::Philox4x32;

namespace {
void expect_words(const Philox4x32& r, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  EXPECT_EQ(r.v[0], a);
  EXPECT_EQ(r.v[1], b);
  EXPECT_EQ(r.v[2], c);
  EXPECT_EQ(r.v[3], d);
}
}  // namespace

TEST(Philox, Random123KnownAnswerZero) {
  expect_words(kernels::philox4x32_10({{0, 0, 0, 0}}, 0, 0), 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u);
}

TEST(Philox, Random123KnownAnswerAllOnes) {
  expect_words(kernels::philox4x32_10({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu),
               0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu);
}

TEST(Philox, Random123KnownAnswerPi) {
  expect_words(kernels::philox4x32_10({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u),
               0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u);
}

TEST(Random, SameKeySameValuesWhateverTheThreadCount) {
  kernels::cpu::set_num_threads(1);
  Tensor a = randn({1000}, RandomKey{5, 2});
  kernels::cpu::set_num_threads(2);
  Tensor b = randn({1000}, RandomKey{5, 2});
  kernels::cpu::set_num_threads(kernels::cpu::default_num_threads());
  minidl::testing::expect_equal(a, b);
}

TEST(Random, ElementDependsOnlyOnItsIndex) {
  // the first 10 values of a long tensor equal a short tensor with the same key
  Tensor big = rand({1000}, RandomKey{9, 4}), small = rand({10}, RandomKey{9, 4});
  minidl::testing::expect_equal(big.narrow(0, 0, 10), small);
}

TEST(Random, ManualSeedRestartsTheDefaultGenerator) {
  manual_seed(42);
  Tensor a = rand({4}), b = rand({4});
  manual_seed(42);
  minidl::testing::expect_equal(rand({4}), a);
  minidl::testing::expect_equal(rand({4}), b);
  EXPECT_NE(a.to_vector<float>(), b.to_vector<float>());
}

TEST(Random, UniformAndNormalMoments) {
  Tensor u = rand({100000}, RandomKey{1, 1}, DType::Float64);
  Tensor z = randn({100000}, RandomKey{1, 2}, DType::Float64);
  double su = 0, sz = 0, szz = 0, umin = 1, umax = 0;
  for (double v : u.to_vector<double>()) su += v, umin = std::min(umin, v), umax = std::max(umax, v);
  for (double v : z.to_vector<double>()) sz += v, szz += v * v;
  EXPECT_NEAR(su / 1e5, 0.5, 0.005);
  EXPECT_GE(umin, 0.0);
  EXPECT_LT(umax, 1.0);
  EXPECT_NEAR(sz / 1e5, 0.0, 0.01);
  EXPECT_NEAR(szz / 1e5, 1.0, 0.015);
}

TEST(Random, RandintRangeAndRandpermIsAPermutation) {
  auto v = randint(3, 7, {1000}, RandomKey{2, 0}).to_vector<int64_t>();
  for (int64_t x : v) ASSERT_TRUE(x >= 3 && x < 7);
  EXPECT_THROW_MSG(randint(5, 5, {2}), std::invalid_argument, "expected low < high");
  auto p = randperm(100, RandomKey{3, 0}).to_vector<int64_t>();
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 100; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_NE(p, sorted);
}

TEST(RngState, RestoringTheStateRepeatsTheDraws) {
  manual_seed(77);
  (void)rand({3});  // move the generator on: the state is more than the seed
  const Tensor state = get_rng_state();
  ASSERT_EQ(state.dtype(), DType::UInt8);
  ASSERT_EQ(state.shape(), (Shape{16}));
  // seed 77 then stream 1, each little-endian
  minidl::testing::expect_equal(state, from_vector<uint8_t>({77, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0}, {16}));
  const Tensor a = randn({5}), b = randint(0, 1000, {4});
  manual_seed(5);  // anything in between
  (void)rand({2});
  set_rng_state(state);
  minidl::testing::expect_equal(randn({5}), a);
  minidl::testing::expect_equal(randint(0, 1000, {4}), b);
  EXPECT_EQ(initial_seed(), 77u);
}

TEST(RngState, AnythingButSixteenBytesIsRefused) {
  EXPECT_THROW_MSG(set_rng_state(zeros({16})), std::invalid_argument,
                   "expected the 16 uint8 values of get_rng_state()");
  EXPECT_THROW_MSG(set_rng_state(Tensor({15}, DType::UInt8)), std::invalid_argument, "uint8");
  EXPECT_THROW_MSG(set_rng_state(Tensor()), std::invalid_argument, "an undefined tensor");
}
