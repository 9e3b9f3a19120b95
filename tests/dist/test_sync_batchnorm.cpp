// tests/dist/test_sync_batchnorm.cpp — SyncBatchNorm on R ranks against BatchNorm2d on the
// concatenated batch: output, input gradient, weight/bias gradients (after DDP averaging) and
// running statistics, with unequal per-rank batch sizes and a rank with no samples.
#include <cmath>
#include <sstream>

#include "dist/ddp.h"
#include "dist/distributed.h"
#include "dist/spawn.h"
#include "dist/sync_batchnorm.h"
#include "nn/nn.h"
#include "tests/common/testing.h"

using namespace minidl;

namespace {

void require_close(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  if (va.size() != vb.size())
    throw std::runtime_error(what + ": " + std::to_string(va.size()) + " vs " + std::to_string(vb.size()) + " elements");
  for (size_t i = 0; i < va.size(); ++i)
    if (std::fabs(va[i] - vb[i]) > tol * (1 + std::fabs(vb[i]))) {
      std::ostringstream os;
      os << what << ": element " << i << " is " << va[i] << ", expected " << vb[i];
      throw std::runtime_error(os.str());
    }
}

// Rank r holds rows [start_r, start_r + sizes[r]) of a global batch (N, C, H, W).
void sync_bn_matches_batchnorm(const std::vector<int64_t>& sizes) {
  const int world = static_cast<int>(sizes.size());
  dist::spawn(world, [&](int rank) {
    dist::init({.backend = "gloo", .timeout = std::chrono::seconds(30)});
    int64_t N = 0, start = 0;
    for (int r = 0; r < world; ++r) {
      if (r < rank) start += sizes[r];
      N += sizes[r];
    }
    const int64_t C = 3;
    Tensor x = add(mul(randn({N, C, 4, 4}, RandomKey{9, 0}), 2.0), 0.5);
    Tensor dy = randn({N, C, 4, 4}, RandomKey{9, 1});
    Tensor w0 = randn({C}, RandomKey{9, 2}), b0 = randn({C}, RandomKey{9, 3});

    // reference: BatchNorm2d on the whole batch, one process
    nn::BatchNorm2d ref({.num_features = C});
    ref.weight.data().copy_(w0);
    ref.bias.data().copy_(b0);
    Variable xr(x.clone(), true);
    Variable yr = ref(xr);
    yr.backward(dy);

    // SyncBatchNorm inside an nn::Sequential, converted and wrapped in DDP
    nn::Sequential seq;
    auto& bn = seq.push_back<nn::BatchNorm2d>(nn::BatchNormOptions{.num_features = C});
    bn.weight.data().copy_(w0);
    bn.bias.data().copy_(b0);
    if (dist::convert_sync_batchnorm(seq) != 1) throw std::runtime_error("one BatchNorm converted");
    auto& sbn = dynamic_cast<dist::SyncBatchNorm&>(seq[0]);
    dist::DistributedDataParallel ddp(seq);
    Variable xs(x.narrow(0, start, sizes[rank]).contiguous(), true);
    Variable ys = ddp(xs);
    ys.backward(dy.narrow(0, start, sizes[rank]).contiguous());
    ddp.finish();

    require_close(ys.data(), yr.data().narrow(0, start, sizes[rank]), 1e-5, "output");
    if (sizes[rank] > 0) require_close(xs.grad(), xr.grad().narrow(0, start, sizes[rank]), 1e-5, "input gradient");
    // DDP averaged the local weight/bias gradients: times the world size they are the full sums
    require_close(mul(sbn.weight.grad(), static_cast<double>(world)), ref.weight.grad(), 1e-5, "weight gradient");
    require_close(mul(sbn.bias.grad(), static_cast<double>(world)), ref.bias.grad(), 1e-5, "bias gradient");
    require_close(sbn.running_mean, ref.running_mean, 1e-6, "running_mean");
    require_close(sbn.running_var, ref.running_var, 1e-6, "running_var");
    dist::shutdown();
  });
}

}  // namespace

TEST(SyncBatchNorm, EqualBatchesOnTwoRanksMatchBatchNormOnTheWholeBatch) { sync_bn_matches_batchnorm({4, 4}); }
TEST(SyncBatchNorm, UnequalBatchesOnThreeRanks) { sync_bn_matches_batchnorm({2, 5, 3}); }
TEST(SyncBatchNorm, ARankWithZeroSamplesTakesPart) { sync_bn_matches_batchnorm({3, 0, 5}); }

TEST(SyncBatchNorm, EvalModeAndWorldSizeOneBehaveLikeBatchNorm) {
  dist::spawn(1, [](int) {
    dist::init({.backend = "gloo"});
    manual_seed(3);
    Tensor x = randn({6, 2, 3, 3});
    nn::BatchNorm2d bn({.num_features = 2});
    dist::SyncBatchNorm sbn({.num_features = 2});
    require_close(sbn(Variable(x)).data(), bn(Variable(x)).data(), 0, "train, world 1");
    bn.eval();
    sbn.eval();
    require_close(sbn(Variable(x)).data(), bn(Variable(x)).data(), 0, "eval");
    dist::shutdown();
  });
}

TEST(SyncBatchNorm, ConvertKeepsParametersAndRunningStats) {
  nn::CNN model;
  auto& bn = dynamic_cast<nn::BatchNorm2d&>(model.features[1]);
  bn.weight.data().fill_(2.0);
  bn.running_mean.fill_(0.25);
  bn.num_batches_tracked.fill_(7);
  EXPECT_EQ(dist::convert_sync_batchnorm(model), 2);
  auto& sbn = dynamic_cast<dist::SyncBatchNorm&>(model.features[1]);
  EXPECT_EQ(sbn.weight.data().to_vector<float>()[0], 2.0f);
  EXPECT_EQ(sbn.running_mean.to_vector<float>()[0], 0.25f);
  EXPECT_EQ(sbn.num_batches_tracked.item(), 7);
  EXPECT_EQ(model.num_parameters(), 421834);
  EXPECT_NE(model.to_string().find("(1): SyncBatchNorm(32, eps=1e-05"), std::string::npos) << model;
}

TEST(SyncBatchNorm, MemberBatchNormCannotBeConvertedAndSaysWhy) {
  struct Net : nn::Module {
    nn::BatchNorm2d bn{{.num_features = 2}};
    Net() { register_module("bn", bn); }
    std::string type_name() const override { return "Net"; }
  } net;
  EXPECT_THROW_MSG(dist::convert_sync_batchnorm(net), std::logic_error, "'bn' is a member of Net and cannot be replaced");
}
