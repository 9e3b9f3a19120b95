// tests/tensor/test_cpu_fast_paths.cpp — every specialised CPU kernel against the plain version
// it replaces (the reference stays in the code base for that): the unrolled 2x2 max-pool against
// the general window loop (NaNs, -inf and ties included), the one-pass batch-norm statistics
// against a two-pass long-double computation (and its backward sums against long-double sums,
// walked by channel or in memory order: the same bits), the vectorised exp / erf against std::exp /
// std::erf, GELU, softmax and cross-entropy fast rows against the shared functors and float64, the small-GEMM
// loop against gemm_reference, im2col / col2im (strides 1 to 3) against their definition, a
// convolution's backward without the input gradient, the float layer-norm rows against
// layer_norm_forward_reference, the one-pass layer-norm backward against
// layer_norm_backward_reference (its two passes), the bit-mask ReLU of the fused batch norm + ReLU
// against the functors, and the CPU caching allocator's steady state (a repeated training step
// maps no new memory).
// Thread-count independence of these kernels is checked too (same bits, 1 and 2 threads).
#include <cmath>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <limits>
#include <vector>

#include "minidl/autograd/ops.h"
#include "minidl/kernels/cpu/gemm.h"
#include "minidl/kernels/cpu/im2col.h"
#include "minidl/kernels/cpu/layer_norm.h"
#include "minidl/kernels/cpu/norm.h"
#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/cpu/pool.h"
#include "minidl/kernels/cpu/vec_math.h"
#include "minidl/kernels/functors.h"
#include "minidl/nn/models.h"
#include "minidl/optim/sgd.h"
#include "minidl/tensor/cpu_allocator.h"
#include "tests/common/testing.h"
#include "tests/common/threads.h"

using namespace minidl;
using minidl::testing::expect_equal;
using minidl::testing::with_1_and_2_threads;

// float takes the AVX-512 row loop where the CPU has it, double the scalar loop.
template <class T> void check_max_pool_2x2() {
  const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
  for (auto [H, W] : {std::pair<int64_t, int64_t>{6, 8}, {7, 5}, {28, 28}, {2, 2}, {4, 70}, {3, 33}}) {
    std::vector<T> x = randn({H * W}, DType::Float64).template to_vector<T>();
    for (int64_t i = 0; i < H * W; ++i) {  // ties, NaNs and -inf in some windows
      if (i % 7 == 0) x[i] = T(0.5);
      if (i % 11 == 0) x[i] = T(0.5);
      if (i % 13 == 3) x[i] = nan;
      if (i % 17 == 5) x[i] = -inf;
    }
    x[0] = x[1] = x[W] = x[W + 1] = -inf;  // a window of only -inf
    const int64_t Ho = H / 2, Wo = W / 2;
    std::vector<T> y_ref(Ho * Wo), y_fast(Ho * Wo);
    std::vector<int64_t> i_ref(Ho * Wo), i_fast(Ho * Wo);
    kernels::cpu::max_pool2d_plane_forward(x.data(), H, W, y_ref.data(), i_ref.data(), Ho, Wo, {2, 2, 2, 2, 0, 0});
    kernels::cpu::max_pool2d_plane_forward_2x2(x.data(), H, W, y_fast.data(), i_fast.data(), Ho, Wo);
    for (int64_t o = 0; o < Ho * Wo; ++o) {
      EXPECT_EQ(i_fast[o], i_ref[o]) << H << "x" << W << " output " << o;
      if (std::isnan(y_ref[o]))
        EXPECT_TRUE(std::isnan(y_fast[o])) << "output " << o;
      else
        EXPECT_EQ(y_fast[o], y_ref[o]) << "output " << o;
    }
  }
}

TEST(FastPaths, MaxPool2x2MatchesTheGeneralWindowLoop) {
  check_max_pool_2x2<float>();
  check_max_pool_2x2<double>();
}

TEST(FastPaths, BatchNormStatsMatchTwoPassReference) {
  // (N, C, S) with a large offset and a small spread: the one-pass shifted sums must not cancel.
  // Planes of 9 are walked channel by channel, planes of 100 in memory order.
  static_assert(9 < kernels::cpu::kMemoryOrderMinPlane && 100 >= kernels::cpu::kMemoryOrderMinPlane);
  for (const int64_t S : {9, 100}) {
    const int64_t N = 5, C = 3;
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
      EXPECT_NEAR(mean[c], static_cast<double>(m), 1e-12) << "S " << S << " channel " << c;
      EXPECT_NEAR(invstd[c], ref_invstd, 1e-9 * ref_invstd) << "S " << S << " channel " << c;
    }
  }
}

TEST(FastPaths, BatchNormBackwardReduceMatchesLongDoubleSums) {
  // Masked by a ReLU after the batch norm (its output rebuilt from x, the mean and the affine),
  // in both traversal orders (planes of 9 and of 100).
  for (const int64_t S : {9, 100}) {
    const int64_t N = 6, C = 4;
    const std::vector<float> x = randn({N * C * S}, RandomKey{11, 1}).to_vector<float>();
    const std::vector<float> dy = randn({N * C * S}, RandomKey{11, 2}).to_vector<float>();
    const std::vector<double> mean = {0.1, -0.2, 0.0, 0.3}, invstd = {1.0, 2.0, 0.5, 1.5}, weight = {1, -1, 2, 0.5},
                              bias = {-0.3, 0.0, 0.4, 0.1};
    const kernels::cpu::BatchNormAffine relu{invstd.data(), weight.data(), bias.data()};
    std::vector<double> sum_dy(C), sum_dy_xmu(C);
    kernels::cpu::batch_norm_backward_reduce(dy.data(), x.data(), N, C, S, mean.data(), sum_dy.data(),
                                             sum_dy_xmu.data(), &relu);
    for (int64_t c = 0; c < C; ++c) {
      long double a = 0, b = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < S; ++i) {
          const size_t k = static_cast<size_t>((n * C + c) * S + i);
          const long double y = (x[k] - static_cast<long double>(mean[c])) * invstd[c] * weight[c] + bias[c];
          const long double g = y > 0 ? dy[k] : 0.0f;
          a += g;
          b += g * (static_cast<long double>(x[k]) - mean[c]);
        }
      EXPECT_NEAR(sum_dy[c], static_cast<double>(a), 1e-12) << "S " << S << " channel " << c;
      EXPECT_NEAR(sum_dy_xmu[c], static_cast<double>(b), 1e-12) << "S " << S << " channel " << c;
    }
  }
}

TEST(FastPaths, ChannelSumsGiveTheSameBitsInEitherOrder) {
  // The same planes' sums, walked channel by channel (a plane size below the threshold) or in
  // memory order (at it), with 1 and 2 threads: every channel's sum has the same bits. (The planes'
  // sums use no multiplication: GCC may contract a multiply-add into an FMA in one inlined copy
  // only, which norm.h's comment allows.)
  const int64_t N = 37, C = 5, L = 11;
  const std::vector<double> v = randn({N * C * L}, DType::Float64).to_vector<double>();
  auto sums = [&](int64_t plane_size) {
    std::vector<double> a(C), b(C);
    kernels::cpu::channel_sums_in_n_order(
        N, C, plane_size,
        [&](int64_t pl) {
          double s = 0, q = 0;
          for (int64_t i = 0; i < L; ++i) {
            s += v[static_cast<size_t>(pl * L + i)];
            q += std::abs(v[static_cast<size_t>(pl * L + i)]);
          }
          return kernels::cpu::PlaneSums{s, q};
        },
        a.data(), b.data());
    a.insert(a.end(), b.begin(), b.end());
    return from_vector<double>(a, {2 * C});
  };
  const int64_t threshold = kernels::cpu::kMemoryOrderMinPlane;
  auto [by_channel1, by_channel2] = with_1_and_2_threads([&] { return sums(threshold - 1); });
  auto [in_order1, in_order2] = with_1_and_2_threads([&] { return sums(threshold); });
  expect_equal(by_channel1, in_order1, "by channel / in memory order");
  expect_equal(by_channel1, by_channel2, "by channel, 1 / 2 threads");
  expect_equal(in_order1, in_order2, "in memory order, 1 / 2 threads");
}

TEST(FastPaths, PoolAndBatchNormSameBitsFor1And2Threads) {
  Tensor x = randn({16, 8, 28, 28});
  auto [a, b] = with_1_and_2_threads(
      [&] { return max_pool2d_forward(x, {.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2}).out; });
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

// cpu_reset_peak_memory_stats: the peak starts again from what is held now, then follows new highs.
TEST(FastPaths, ResetPeakMemoryStatsStartsThePeakFromWhatIsHeldNow) {
  { const Tensor big = zeros({1 << 20}); }  // 4 MiB held and freed: the peak is at least that
  ASSERT_GE(cpu_allocator_stats().peak_allocated, cpu_allocator_stats().allocated + (size_t(4) << 20));
  cpu_reset_peak_memory_stats();
  const auto now = cpu_allocator_stats();
  EXPECT_EQ(now.peak_allocated, now.allocated);
  EXPECT_EQ(now.peak_reserved, now.reserved);
  { const Tensor two = zeros({1 << 19}); }  // 2 MiB
  EXPECT_EQ(cpu_allocator_stats().peak_allocated, now.allocated + (size_t(2) << 20));
}

TEST(FastPaths, ExpAndErfMatchTheLibrary) {
  double worst_exp = 0, worst_erf = 0;
  for (int i = 0; i <= 400000; ++i) {
    const float x = -104.0f * static_cast<float>(i) / 400000.0f;  // [-104, 0]
    const double ref = std::exp(static_cast<double>(x));
    const float e = kernels::cpu::exp_nonpositive(x);
    if (ref >= 1.1754944e-38)
      worst_exp = std::max(worst_exp, std::fabs(e - ref) / ref);
    else
      EXPECT_EQ(e, 0.0f) << "exp(" << x << ") should flush to 0";
    const float y = -6.0f + 12.0f * static_cast<float>(i) / 400000.0f;
    worst_erf = std::max(worst_erf, std::fabs(kernels::cpu::erf_fast(y) - std::erf(static_cast<double>(y))));
  }
  EXPECT_LT(worst_exp, 4.8e-7) << "exp: worst relative error (4 ulp allowed)";
  EXPECT_LT(worst_erf, 5e-7) << "erf: worst absolute error";
  EXPECT_EQ(kernels::cpu::exp_nonpositive(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(kernels::cpu::exp_nonpositive(0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(kernels::cpu::exp_nonpositive(std::nanf(""))));
  EXPECT_TRUE(std::isnan(kernels::cpu::erf_fast(std::nanf(""))));
}

TEST(FastPaths, GeluMatchesTheSharedFunctors) {
  std::vector<float> x = (randn({4099}) * 3.0).to_vector<float>();
  std::vector<float> dy = randn({4099}, RandomKey{5, 5}).to_vector<float>();
  std::vector<float> y(x.size()), dx(x.size());
  kernels::cpu::gelu_erf_span(x.data(), y.data(), static_cast<int64_t>(x.size()));
  kernels::cpu::gelu_erf_backward_span(x.data(), dy.data(), dx.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(y[i], kernels::GeluErfOp{}(x[i]), 2e-6 * (1 + std::fabs(x[i]))) << "x = " << x[i];
    EXPECT_NEAR(dx[i], kernels::GeluErfBackward{}(x[i], dy[i]), 2e-6 * (1 + std::fabs(dy[i]))) << "x = " << x[i];
  }
}

TEST(FastPaths, SoftmaxFastRowsMatchFloat64) {
  Tensor x = randn({37, 50}) * 4.0;
  Tensor dy = randn({37, 50}, RandomKey{6, 1});
  const Tensor x64 = x.to(DType::Float64), dy64 = dy.to(DType::Float64);
  minidl::testing::expect_close(softmax(x, 1), softmax(x64, 1).to(DType::Float32), 1e-6, 1e-8, "softmax");
  minidl::testing::expect_close(log_softmax(x, 1), log_softmax(x64, 1).to(DType::Float32), 1e-6, 1e-6, "log_softmax");
  minidl::testing::expect_close(softmax_backward(softmax(x, 1), dy, 1),
                                softmax_backward(softmax(x64, 1), dy64, 1).to(DType::Float32), 1e-5, 1e-7,
                                "softmax backward");
  minidl::testing::expect_close(log_softmax_backward(log_softmax(x, 1), dy, 1),
                                log_softmax_backward(log_softmax(x64, 1), dy64, 1).to(DType::Float32), 1e-5, 1e-6,
                                "log_softmax backward");
  // rows shorter than, equal to and longer than the 16-lane blocks of the span reductions
  for (int64_t len : {1, 5, 16, 17, 33, 100}) {
    const Tensor xs = randn({3, len}) * 4.0, gs = randn({3, len});
    const Tensor xs64 = xs.to(DType::Float64);
    minidl::testing::expect_close(softmax(xs, 1), softmax(xs64, 1).to(DType::Float32), 1e-6, 1e-8,
                                  "softmax, len " + std::to_string(len));
    minidl::testing::expect_close(softmax_backward(softmax(xs, 1), gs, 1),
                                  softmax_backward(softmax(xs64, 1), gs.to(DType::Float64), 1).to(DType::Float32), 1e-5,
                                  1e-7, "softmax backward, len " + std::to_string(len));
  }
  // masked (-inf) entries give exact zeros
  x.narrow(1, 7, 3).fill_(-std::numeric_limits<double>::infinity());
  const std::vector<float> y = softmax(x, 1).to_vector<float>();
  for (int64_t r = 0; r < 37; ++r)
    for (int64_t c = 7; c < 10; ++c) EXPECT_EQ(y[r * 50 + c], 0.0f) << r << ", " << c;
}

// Float logits take the vectorised rows (max, exp, sums on 16 lanes; softmax in float); float64
// logits, and float rows holding an infinity, the reference's double loop.
TEST(FastPaths, CrossEntropyFastRowsMatchFloat64) {
  for (int64_t C : {1, 5, 16, 17, 96, 1000})
    for (double eps : {0.0, 0.1}) {
      const Tensor x = randn({33, C}, RandomKey{7, static_cast<uint64_t>(C)}) * 4.0;
      const Tensor t = randint(0, C, {33}, RandomKey{8, static_cast<uint64_t>(C)});
      const Tensor g = scalar_tensor(0.75, DType::Float32);
      const Tensor x64 = x.to(DType::Float64);
      const std::string what = "C " + std::to_string(C) + ", eps " + std::to_string(eps);
      EXPECT_NEAR(cross_entropy_forward(x, t, eps).item(), cross_entropy_forward(x64, t, eps).item(), 1e-6) << what;
      minidl::testing::expect_close(cross_entropy_backward(x, t, eps, g),
                                    cross_entropy_backward(x64, t, eps, g.to(DType::Float64)).to(DType::Float32), 1e-5,
                                    1e-8, "cross-entropy backward, " + what);
    }
  // a row with +inf takes the reference: NaN where the reference has NaN, its other entries finite
  Tensor x = randn({2, 20});
  x.narrow(1, 3, 1).narrow(0, 0, 1).fill_(std::numeric_limits<double>::infinity());
  const Tensor t = from_vector<int64_t>({0, 1}, {2});
  const std::vector<float> d = cross_entropy_backward(x, t, 0.0, scalar_tensor(1.0, DType::Float32)).to_vector<float>();
  const std::vector<double> d64 =
      cross_entropy_backward(x.to(DType::Float64), t, 0.0, scalar_tensor(1.0, DType::Float64)).to_vector<double>();
  for (size_t i = 0; i < d.size(); ++i) {
    EXPECT_EQ(std::isnan(d[i]), std::isnan(d64[i])) << i;
    if (!std::isnan(d64[i])) {
      EXPECT_NEAR(d[i], d64[i], 1e-7) << i;
    }
  }
}

TEST(FastPaths, SmallGemmMatchesTheReference) {
  for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{50, 50, 16}, {32, 784, 9}, {5, 3, 7}, {17, 33, 64}}) {
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 0.5f}) {
          const std::vector<float> A = randn({M * K}, RandomKey{7, 1}).to_vector<float>();
          const std::vector<float> B = randn({K * N}, RandomKey{7, 2}).to_vector<float>();
          std::vector<float> C = randn({M * N}, RandomKey{7, 3}).to_vector<float>(), C0 = C;
          if (beta == 0.0f) C[0] = std::numeric_limits<float>::quiet_NaN();  // ignored when beta == 0
          kernels::cpu::gemm(M, N, K, A.data(), ta ? M : K, ta, B.data(), tb ? K : N, tb, C.data(), N, 1.5f, beta);
          kernels::cpu::gemm_reference(M, N, K, A.data(), ta ? M : K, ta, B.data(), tb ? K : N, tb, C0.data(), N, 1.5f,
                                       beta);
          for (int64_t i = 0; i < M * N; ++i)
            ASSERT_NEAR(C[i], C0[i], 1e-4 * (1 + std::fabs(C0[i])))
                << M << "x" << N << "x" << K << " ta " << ta << " tb " << tb << " beta " << beta << " at " << i;
        }
  }
}

TEST(FastPaths, Im2colAndCol2imMatchTheirDefinition) {
  // strides 1 and 2 (their own loops) and 3, with padding 0 to 2,
  // dilation 1 and 2, rows whose first and last outputs read padding, an odd width and rows of
  // more than 16 outputs; dx starts at -0.0, which col2im must leave where it adds nothing
  for (int64_t W : {7, 41})
    for (int64_t stride : {1, 2, 3})
      for (int64_t pad : {0, 1, 2})
        for (int64_t dil : {1, 2}) {
          const int64_t C = 2, H = 6, k = 3;
          const int64_t Ho = (H + 2 * pad - dil * (k - 1) - 1) / stride + 1;
          const int64_t Wo = (W + 2 * pad - dil * (k - 1) - 1) / stride + 1;
          const kernels::cpu::ConvGeometry g{C, H, W, k, k, stride, stride, pad, pad, dil, dil, Ho, Wo};
          const std::vector<float> x = randn({C * H * W}, RandomKey{8, 1}).to_vector<float>();
          std::vector<float> col(C * k * k * Ho * Wo, -1.0f), back(C * H * W, -0.0f), back_ref(C * H * W, -0.0f);
          kernels::cpu::im2col(x.data(), g, col.data());
          kernels::cpu::col2im(col.data(), g, back.data());
          for (int64_t c = 0; c < C; ++c)
            for (int64_t kh = 0; kh < k; ++kh)
              for (int64_t kw = 0; kw < k; ++kw)
                for (int64_t oh = 0; oh < Ho; ++oh)
                  for (int64_t ow = 0; ow < Wo; ++ow) {
                    const int64_t h = oh * stride - pad + kh * dil, w = ow * stride - pad + kw * dil;
                    const bool in = h >= 0 && h < H && w >= 0 && w < W;
                    const float v = in ? x[(c * H + h) * W + w] : 0.0f;
                    EXPECT_EQ(col[(((c * k + kh) * k + kw) * Ho + oh) * Wo + ow], v)
                        << "W " << W << " stride " << stride << " pad " << pad << " dil " << dil;
                    if (in) back_ref[(c * H + h) * W + w] += v;
                  }
          for (int64_t i = 0; i < C * H * W; ++i) {
            EXPECT_FLOAT_EQ(back[i], back_ref[i]) << "col2im, stride " << stride << ", element " << i;
            EXPECT_EQ(std::signbit(back[i]), std::signbit(back_ref[i]))
                << "col2im, stride " << stride << ", element " << i;
          }
        }
}

TEST(FastPaths, ConvBackwardWithoutInputGradientKeepsWeightGradients) {
  const Tensor x = randn({3, 2, 9, 9}), w = randn({4, 2, 3, 3}, RandomKey{9, 1}),
               dy = randn({3, 4, 9, 9}, RandomKey{9, 2});
  const Conv2dParams p{.pad_h = 1, .pad_w = 1};
  const Conv2dGrads all = conv2d_backward(x, w, dy, true, p), no_dx = conv2d_backward(x, w, dy, true, p, false);
  EXPECT_FALSE(no_dx.dx.defined());
  expect_equal(no_dx.dw, all.dw, "dw");
  expect_equal(no_dx.db, all.db, "db");
}

TEST(FastPaths, VitPiecesSameBitsFor1And2Threads) {
  Tensor x = randn({64, 50, 64});
  auto [a, b] = with_1_and_2_threads([&] { return gelu(x); });
  expect_equal(a, b, "gelu");
  auto [c, d] = with_1_and_2_threads([&] { return softmax(x, 2); });
  expect_equal(c, d, "softmax");
  auto [e, f] = with_1_and_2_threads([&] { return matmul(x, x.transpose(1, 2)); });
  expect_equal(e, f, "batched small matmul");
}

// The float layer-norm rows (double row sums, float element loop) against
// layer_norm_forward_reference (all double), with and without weight and bias, on row lengths with
// and without a tail, and on rows whose mean is far from zero (1000, spread 1: x - mean in float
// from a mean rounded to one float would be off by up to 3e-5): equal to a float rounding; and the
// same bits for 1 and 2 threads.
TEST(FastPaths, LayerNormFloatRowsMatchTheReference) {
  const int64_t rows = 77;
  for (double offset : {0.0, 1000.0}) {
    for (int64_t M : {64, 48, 50, 7, 1}) {
      const std::vector<float> x = (randn({rows * M}, DType::Float64) + offset).to_vector<float>();
      const std::vector<float> w = randn({M}, DType::Float64).to_vector<float>();
      const std::vector<float> b = randn({M}, DType::Float64).to_vector<float>();
      for (int affine = 0; affine < 4; ++affine) {
        const float* wp = (affine & 1) ? w.data() : nullptr;
        const float* bp = (affine & 2) ? b.data() : nullptr;
        std::vector<float> y_ref(rows * M), m_ref(rows), is_ref(rows);
        kernels::cpu::layer_norm_forward_reference(x.data(), rows, M, wp, bp, 1e-5, y_ref.data(), m_ref.data(),
                                                   is_ref.data());
        const int saved = kernels::cpu::get_num_threads();
        std::vector<float> y_by_threads[2];
        for (int threads : {1, 2}) {
          kernels::cpu::set_num_threads(threads);
          std::vector<float> y(rows * M), m(rows), is(rows);
          kernels::cpu::layer_norm_forward(x.data(), rows, M, wp, bp, 1e-5, y.data(), m.data(), is.data());
          for (int64_t i = 0; i < rows * M; ++i)
            ASSERT_NEAR(y[i], y_ref[i], 1e-6 * (1.0 + std::fabs(y_ref[i])))
                << "offset " << offset << " M " << M << " affine " << affine << " at " << i;
          for (int64_t r = 0; r < rows; ++r) {
            ASSERT_NEAR(m[r], m_ref[r], 1e-6 * (1.0 + std::fabs(m_ref[r]))) << "mean, M " << M << " row " << r;
            ASSERT_NEAR(is[r], is_ref[r], 1e-6 * std::fabs(is_ref[r])) << "invstd, M " << M << " row " << r;
          }
          y_by_threads[threads - 1] = y;
        }
        kernels::cpu::set_num_threads(saved);
        EXPECT_EQ(y_by_threads[0], y_by_threads[1]) << "M " << M << ", 1 vs 2 threads";
      }
    }
  }
}

// The one-pass layer-norm backward against layer_norm_backward_reference, the two passes it
// replaces (input gradient, then the affine gradients), with and without a weight: equal to
// rounding (float rows: the fast path computes its elements and each chunk's column sums in
// float, the reference in double), and the same bits for 1 and 2 threads.
template <class T> void check_layer_norm_one_pass(bool with_weight) {
  const int64_t rows = 203, M = 48;  // a partial last chunk of 32 rows
  const std::vector<T> x = randn({rows * M}, DType::Float64).template to_vector<T>();
  const std::vector<T> dy = randn({rows * M}, DType::Float64).template to_vector<T>();
  const std::vector<T> w = randn({M}, DType::Float64).template to_vector<T>();
  std::vector<T> y(rows * M), mean(rows), invstd(rows);
  kernels::cpu::layer_norm_forward(x.data(), rows, M, w.data(), static_cast<const T*>(nullptr), 1e-5, y.data(),
                                   mean.data(), invstd.data());
  const T* wp = with_weight ? w.data() : nullptr;
  std::vector<T> dx_ref(rows * M);
  std::vector<double> dw_ref(M, 0.0), db_ref(M, 0.0);
  kernels::cpu::layer_norm_backward_reference(dy.data(), x.data(), rows, M, mean.data(), invstd.data(), wp,
                                              dx_ref.data(), dw_ref.data(), db_ref.data());
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  auto close = [&](const auto& a, const auto& b, const char* what) {
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_NEAR(a[i], b[i], tol * (1.0 + std::fabs(double(b[i]))))
          << what << " at " << i << ", weight " << with_weight;
  };
  const int saved = kernels::cpu::get_num_threads();
  std::vector<T> dx_by_threads[2];
  std::vector<double> dw_by_threads[2];
  for (int threads : {1, 2}) {
    kernels::cpu::set_num_threads(threads);
    std::vector<T> dx(rows * M);
    std::vector<T> part(2 * kernels::cpu::layer_norm_chunks(rows) * M);
    std::vector<double> dw(M, 0.0), db(M, 0.0);
    kernels::cpu::layer_norm_backward(dy.data(), x.data(), rows, M, mean.data(), invstd.data(), wp, dx.data(),
                                      with_weight ? part.data() : nullptr, dw.data(), db.data());
    close(dx, dx_ref, "dx");
    close(dw, dw_ref, "dweight");
    close(db, db_ref, "dbias");
    dx_by_threads[threads - 1] = dx;
    dw_by_threads[threads - 1] = dw;
  }
  kernels::cpu::set_num_threads(saved);
  EXPECT_EQ(dx_by_threads[0], dx_by_threads[1]) << "dx, 1 vs 2 threads";
  EXPECT_EQ(dw_by_threads[0], dw_by_threads[1]) << "dweight, 1 vs 2 threads";
}

TEST(FastPaths, LayerNormOnePassBackwardMatchesTwoPasses) {
  for (bool with_weight : {true, false}) {
    check_layer_norm_one_pass<float>(with_weight);
    check_layer_norm_one_pass<double>(with_weight);
  }
}

// The bit-mask ReLU of the fused batch norm + ReLU against the shared functors, special values
// included (signed zeros and NaNs, infinities, subnormals).
template <class T> void check_relu_bits() {
  const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
  const T sub = std::numeric_limits<T>::denorm_min();
  const std::vector<T> vals{T(0), -T(0), T(1.5), T(-1.5), inf, -inf, nan, -nan, sub, -sub, T(1e-30), T(-1e-30)};
  auto same = [](T a, T b) { return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b)); };
  for (T v : vals) {
    EXPECT_TRUE(same(kernels::cpu::relu_bits(v), kernels::ReluOp{}(v))) << "relu(" << v << ")";
    for (T g : {T(2), T(-3), inf, nan})
      EXPECT_TRUE(same(kernels::cpu::relu_grad_bits(v, g), kernels::ReluBackward{}(v, g)))
          << "relu backward at " << v << ", dy " << g;
  }
}

TEST(FastPaths, BitMaskReluMatchesTheFunctors) {
  check_relu_bits<float>();
  check_relu_bits<double>();
}
