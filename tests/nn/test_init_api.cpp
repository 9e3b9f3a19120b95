// tests/nn/test_init_api.cpp — the initialisers the reference models do not use (kaiming_normal_,
// xavier_normal_, zeros_, ones_, constant_) and BatchNorm's reset_running_stats, checked against
// torch.nn.init's formulas: std = gain / sqrt(fan) for kaiming_normal_, gain * sqrt(2 / (fan_in +
// fan_out)) for xavier_normal_, with fans from the weight's shape as PyTorch computes them.
#include <cmath>

#include "minidl/nn/batchnorm.h"
#include "minidl/nn/init.h"
#include "minidl/tensor/random.h"
#include "tests/common/testing.h"

using minidl::Tensor;
namespace init = minidl::nn::init;

namespace {

// Sample mean and standard deviation of every element (float64 accumulation).
std::pair<double, double> mean_std(const Tensor& t) {
  Tensor d = t.to(minidl::DType::Float64).contiguous();
  const double* p = d.data<double>();
  const int64_t n = d.numel();
  double s = 0, s2 = 0;
  for (int64_t i = 0; i < n; ++i) s += p[i];
  const double mean = s / static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) s2 += (p[i] - mean) * (p[i] - mean);
  return {mean, std::sqrt(s2 / static_cast<double>(n - 1))};
}

}  // namespace

TEST(InitApi, KaimingNormalHasPyTorchsStdForConvAndLinearFans) {
  minidl::manual_seed(1);
  // Conv weight (out 64, in 32, 3, 3): fan_in = 32*9 = 288, fan_out = 64*9 = 576.
  Tensor w = minidl::empty({64, 32, 3, 3});
  init::kaiming_normal_(w, 0.0, "fan_in", "relu");
  auto [m1, s1] = mean_std(w);
  EXPECT_NEAR(m1, 0.0, 0.004);
  EXPECT_NEAR(s1, std::sqrt(2.0) / std::sqrt(288.0), 0.01 * s1);  // 18,432 samples: ~0.5% noise
  init::kaiming_normal_(w, 0.0, "fan_out", "relu");
  EXPECT_NEAR(mean_std(w).second, std::sqrt(2.0) / std::sqrt(576.0), 0.01 * mean_std(w).second);
  // leaky_relu with a = sqrt(5) (PyTorch's default for Linear): gain = sqrt(2 / (1 + 5)).
  Tensor l = minidl::empty({256, 784});
  init::kaiming_normal_(l, std::sqrt(5.0));
  EXPECT_NEAR(mean_std(l).second, std::sqrt(2.0 / 6.0) / std::sqrt(784.0), 0.005 * mean_std(l).second);
  EXPECT_THROW_MSG(init::kaiming_normal_(l, 0.0, "fan_avg"), std::invalid_argument, "'fan_in' or 'fan_out'");
}

TEST(InitApi, XavierNormalHasStdGainTimesSqrtTwoOverFanSum) {
  minidl::manual_seed(2);
  Tensor w = minidl::empty({128, 3136});  // fan_in 3136, fan_out 128
  init::xavier_normal_(w, 2.0);
  auto [m, s] = mean_std(w);
  EXPECT_NEAR(m, 0.0, 0.0005);
  EXPECT_NEAR(s, 2.0 * std::sqrt(2.0 / (3136.0 + 128.0)), 0.005 * s);
  Tensor v = minidl::empty({5});
  EXPECT_THROW_MSG(init::xavier_normal_(v), std::invalid_argument, "at least 2 dims");
}

TEST(InitApi, ZerosOnesAndConstantFillEveryElementInPlace) {
  Tensor t = minidl::randn({3, 4});
  Tensor view = t.select(1, 2);  // a strided view: only its elements change
  init::constant_(view, -2.5);
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(t.select(0, i).select(0, 2).item(), -2.5);
    EXPECT_NE(t.select(0, i).select(0, 1).item(), -2.5);
  }
  EXPECT_EQ(minidl::sum(minidl::abs(init::zeros_(t))).item(), 0.0);
  EXPECT_EQ(minidl::sum(init::ones_(t)).item(), 12.0);
}

TEST(InitApi, ResetRunningStatsRestoresZeroMeanUnitVarAndZeroBatches) {
  minidl::nn::BatchNorm2d bn{{.num_features = 3}};
  bn.train();
  minidl::manual_seed(3);
  bn.forward(minidl::Variable(minidl::randn({4, 3, 2, 2}) * 3.0 + 1.0));
  ASSERT_NE(minidl::sum(minidl::abs(bn.running_mean)).item(), 0.0);
  ASSERT_EQ(bn.num_batches_tracked.item(), 1.0);
  bn.reset_running_stats();
  minidl::testing::expect_equal(bn.running_mean, minidl::zeros({3}), "running_mean");
  minidl::testing::expect_equal(bn.running_var, minidl::ones({3}), "running_var");
  EXPECT_EQ(bn.num_batches_tracked.item(), 0.0);
}
