// tests/tensor/test_cpu_fast_paths.cpp — every specialised CPU kernel against the plain version
// it replaces (the reference stays in the code base for that): the unrolled 2x2 max-pool against
// the general window loop (NaNs, -inf and ties included), the one-pass batch-norm statistics
// against a two-pass long-double computation, and the CPU caching allocator's steady state (a
// repeated training step maps no new memory). Thread-count independence of these kernels is
// checked here too (the same bits with 1 and 2 threads).
#include <cmath>
#include <limits>
#include <vector>

#include "autograd/ops.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/pool.h"
#include "nn/models.h"
#include "optim/sgd.h"
#include "tensor/cpu_allocator.h"
#include "tests/common/testing.h"

using namespace minidl;
using minidl::testing::expect_equal;

namespace {
template <class F>
std::pair<Tensor, Tensor> with_1_and_2_threads(F f) {
  const int saved = kernels::cpu::get_num_threads();
  kernels::cpu::set_num_threads(1);
  Tensor a = f();
  kernels::cpu::set_num_threads(2);
  Tensor b = f();
  kernels::cpu::set_num_threads(saved);
  return {a, b};
}
}  // namespace

TEST(FastPaths, MaxPool2x2MatchesTheGeneralWindowLoop) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (auto [H, W] : {std::pair<int64_t, int64_t>{6, 8}, {7, 5}, {28, 28}, {2, 2}}) {
    std::vector<float> x = randn({H * W}).to_vector<float>();
    for (int64_t i = 0; i < H * W; ++i) {  // ties, NaNs and -inf in some windows
      if (i % 7 == 0) x[i] = 0.5f;
      if (i % 11 == 0) x[i] = 0.5f;
      if (i % 13 == 3) x[i] = nan;
      if (i % 17 == 5) x[i] = -inf;
    }
    if (H * W >= 4) x[0] = x[1] = x[W] = x[W + 1] = -inf;  // a window of only -inf
    const int64_t Ho = H / 2, Wo = W / 2;
    std::vector<float> y_ref(Ho * Wo), y_fast(Ho * Wo);
    std::vector<int64_t> i_ref(Ho * Wo), i_fast(Ho * Wo);
    kernels::cpu::max_pool2d_plane_forward(x.data(), H, W, y_ref.data(), i_ref.data(), Ho, Wo, {2, 2, 2, 2, 0, 0});
    kernels::cpu::max_pool2d_plane_forward_2x2(x.data(), H, W, y_fast.data(), i_fast.data(), Ho, Wo);
    for (int64_t o = 0; o < Ho * Wo; ++o) {
      EXPECT_EQ(i_fast[o], i_ref[o]) << H << "x" << W << " output " << o;
      if (std::isnan(y_ref[o])) EXPECT_TRUE(std::isnan(y_fast[o])) << "output " << o;
      else EXPECT_EQ(y_fast[o], y_ref[o]) << "output " << o;
    }
  }
}

TEST(FastPaths, BatchNormStatsMatchTwoPassReference) {
  // (N, C, S) with a large offset and a small spread: the one-pass shifted sums must not cancel.
  const int64_t N = 5, C = 3, S = 37;
  std::vector<double> x = randn({N * C * S}, DType::Float64).to_vector<double>();
  for (int64_t i = 0; i < N * C * S; ++i) x[i] = 1000.0 + 1e-2 * x[i] + (i / S % C);
  std::vector<double> mean(C), invstd(C);
  kernels::cpu::batch_norm_stats(x.data(), N, C, S, 1e-5, mean.data(), invstd.data());
  for (int64_t c = 0; c < C; ++c) {
    long double s = 0, ss = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < S; ++i) s += x[(n * C + c) * S + i];
    const long double m = s / (N * S);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < S; ++i) ss += (x[(n * C + c) * S + i] - m) * (x[(n * C + c) * S + i] - m);
    const double ref_invstd = static_cast<double>(1.0L / std::sqrt(ss / (N * S) + 1e-5L));
    EXPECT_NEAR(mean[c], static_cast<double>(m), 1e-12) << "channel " << c;
    EXPECT_NEAR(invstd[c], ref_invstd, 1e-9 * ref_invstd) << "channel " << c;
  }
}

TEST(FastPaths, PoolAndBatchNormSameBitsFor1And2Threads) {
  Tensor x = randn({16, 8, 28, 28});
  auto [a, b] = with_1_and_2_threads([&] { return max_pool2d_forward(x, {.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2}).out; });
  expect_equal(a, b, "max_pool2d 2x2");
  auto [c, d] = with_1_and_2_threads([&] { return batch_norm_stats(x, 1e-5).invstd; });
  expect_equal(c, d, "batch_norm_stats");
  Tensor dy = randn({16, 8, 28, 28}, RandomKey{3, 1});
  auto [e, f] = with_1_and_2_threads([&] {
    BatchNormStats s = batch_norm_stats(x, 1e-5);
    return batch_norm_backward_reduce(dy, x, s.mean, s.invstd, Tensor()).sum_dy_xmu;
  });
  expect_equal(e, f, "batch_norm_backward_reduce");
}

TEST(FastPaths, SteadyStateTrainingStepMapsNoNewMemory) {
  manual_seed(0);
  nn::CNN model;
  optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  const Tensor x = rand({8, 1, 28, 28}), y = randint(0, 10, {8});
  auto step = [&] {
    opt.zero_grad();
    cross_entropy(model.forward(Variable(x)), y).backward();
    opt.step();
  };
  step();
  step();
  const auto before = cpu_allocator_stats();
  for (int i = 0; i < 3; ++i) step();
  const auto after = cpu_allocator_stats();
  EXPECT_EQ(after.segment_allocs, before.segment_allocs) << "steady-state steps allocated new segments";
  EXPECT_GT(after.cache_hits, before.cache_hits);
}
