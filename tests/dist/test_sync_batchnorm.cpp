// tests/dist/test_sync_batchnorm.cpp — SyncBatchNorm on R ranks against BatchNorm2d on the
// concatenated batch: output, input gradient, weight/bias gradients (after DDP averaging) and
// running statistics, with unequal per-rank batch sizes and a rank with no samples; world size 1
// and eval mode against BatchNorm written out by hand; the one-value-per-channel error; the
// statistics merge (batch_norm_gather_stats_with_counts) and the backward's count tensor against
// numbers written out. (The CUDA merge: tests/kernels/test_cuda_batch_norm_gather.cpp.)
#include <cmath>
#include <sstream>

#include "minidl/dist/ddp.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/spawn.h"
#include "minidl/dist/sync_batchnorm.h"
#include "minidl/nn/nn_all.h"
#include "tests/common/testing.h"

using namespace minidl;

namespace {

void require_close(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  if (va.size() != vb.size())
    throw std::runtime_error(what + ": " + std::to_string(va.size()) + " vs " + std::to_string(vb.size()) +
                             " elements");
  for (size_t i = 0; i < va.size(); ++i)
    if (std::fabs(va[i] - vb[i]) > tol * (1 + std::fabs(vb[i]))) {
      std::ostringstream os;
      os << what << ": element " << i << " is " << va[i] << ", expected " << vb[i];
      throw std::runtime_error(os.str());
    }
}

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// The pattern nn/module.h teaches: a BatchNorm held as a member of a user module.
struct MemberBN : nn::Module {
  nn::BatchNorm2d bn{{.num_features = 3}};
  MemberBN() { register_module("bn", bn); }
  Variable forward(const Variable& x) override { return bn(x); }
};

// Rank r holds rows [start_r, start_r + sizes[r]) of a global batch (N, C, H, W). The BatchNorm
// is an owned child of an nn::Sequential, or (member) a member of a user module.
void sync_bn_matches_batchnorm(const std::vector<int64_t>& sizes, bool member = false) {
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

    // SyncBatchNorm inside an nn::Sequential (or a member), converted and wrapped in DDP
    nn::Sequential seq;
    MemberBN net;
    nn::Module& model = member ? static_cast<nn::Module&>(net) : seq;
    auto& bn = member ? net.bn : seq.push_back<nn::BatchNorm2d>(nn::BatchNormOptions{.num_features = C});
    bn.weight.data().copy_(w0);
    bn.bias.data().copy_(b0);
    if (dist::convert_sync_batchnorm(model) != 1) throw std::runtime_error("one BatchNorm converted");
    nn::BatchNormBase& sbn =
        member ? static_cast<nn::BatchNormBase&>(net.bn) : dynamic_cast<dist::SyncBatchNorm&>(seq[0]);
    if (sbn.type_name() != "SyncBatchNorm") throw std::runtime_error("converted type name is " + sbn.type_name());
    dist::DistributedDataParallel ddp(model);
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

// BatchNorm of x (N, C, H, W) written out in double, independently of the library: output, input,
// weight and bias gradients for upstream gradient dy, and the running statistics afterwards
// (momentum 0.1, unbiased variance, eps 1e-5, as torch.nn.BatchNorm2d).
struct HandBatchNorm {
  std::vector<double> y, dx, dw, db, running_mean, running_var;
};
HandBatchNorm hand_batchnorm(const Tensor& x_t, const Tensor& dy_t, const Tensor& w_t, const Tensor& b_t,
                             const Tensor& rm_t, const Tensor& rv_t, bool training) {
  const int64_t N = x_t.size(0), C = x_t.size(1), HW = x_t.size(2) * x_t.size(3);
  const auto x = x_t.to_vector<double>(), dy = dy_t.to_vector<double>(), w = w_t.to_vector<double>(),
             b = b_t.to_vector<double>();
  HandBatchNorm r{std::vector<double>(x.size()), std::vector<double>(x.size()), std::vector<double>(C),
                  std::vector<double>(C),        rm_t.to_vector<double>(),      rv_t.to_vector<double>()};
  const double M = static_cast<double>(N * HW), eps = 1e-5;
  auto at = [&](int64_t n, int64_t c, int64_t i) { return static_cast<size_t>((n * C + c) * HW + i); };
  for (int64_t c = 0; c < C; ++c) {
    double mean = 0, var = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) mean += x[at(n, c, i)] / M;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) var += (x[at(n, c, i)] - mean) * (x[at(n, c, i)] - mean) / M;
    if (!training) mean = r.running_mean[c], var = r.running_var[c];
    const double invstd = 1.0 / std::sqrt(var + eps);
    double sum_dy = 0, sum_dy_xhat = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) {
        const double xhat = (x[at(n, c, i)] - mean) * invstd;
        r.y[at(n, c, i)] = xhat * w[c] + b[c];
        sum_dy += dy[at(n, c, i)];
        sum_dy_xhat += dy[at(n, c, i)] * xhat;
      }
    r.dw[c] = sum_dy_xhat;
    r.db[c] = sum_dy;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) {
        const double xhat = (x[at(n, c, i)] - mean) * invstd;
        r.dx[at(n, c, i)] = training ? w[c] * invstd * (dy[at(n, c, i)] - sum_dy / M - xhat * sum_dy_xhat / M)
                                     : w[c] * invstd * dy[at(n, c, i)];
      }
    if (training) {
      r.running_mean[c] = 0.9 * r.running_mean[c] + 0.1 * mean;
      r.running_var[c] = 0.9 * r.running_var[c] + 0.1 * var * M / (M - 1);
    }
  }
  return r;
}

Tensor as_tensor(const std::vector<double>& v, const Tensor& like) { return from_vector<double>(v, like.shape()); }

// One forward and backward of `m` (train or eval) on x against hand_batchnorm.
void expect_hand_batchnorm(nn::BatchNormBase& m, const Tensor& x, const Tensor& dy, bool training,
                           const std::string& what) {
  const Tensor rm = m.running_mean.clone(), rv = m.running_var.clone();
  const HandBatchNorm want = hand_batchnorm(x, dy, m.weight.data(), m.bias.data(), rm, rv, training);
  m.train(training);
  m.zero_grad();
  Variable xv(x.clone(), true);
  Variable y = m(xv);
  y.backward(dy);
  require_close(y.data(), as_tensor(want.y, x), 1e-5, what + " output");
  require_close(xv.grad(), as_tensor(want.dx, x), 1e-5, what + " input gradient");
  require_close(m.weight.grad(), as_tensor(want.dw, rm), 1e-5, what + " weight gradient");
  require_close(m.bias.grad(), as_tensor(want.db, rm), 1e-5, what + " bias gradient");
  require_close(m.running_mean, as_tensor(want.running_mean, rm), 1e-6, what + " running_mean");
  require_close(m.running_var, as_tensor(want.running_var, rm), 1e-6, what + " running_var");
}

}  // namespace

TEST(SyncBatchNorm, EqualBatchesOnTwoRanksMatchBatchNormOnTheWholeBatch) { sync_bn_matches_batchnorm({4, 4}); }
TEST(SyncBatchNorm, UnequalBatchesOnThreeRanks) { sync_bn_matches_batchnorm({2, 5, 3}); }
TEST(SyncBatchNorm, ARankWithZeroSamplesTakesPart) { sync_bn_matches_batchnorm({3, 0, 5}); }
TEST(SyncBatchNorm, MemberBatchNormIsConvertedInPlace) { sync_bn_matches_batchnorm({2, 5}, /*member=*/true); }

TEST(SyncBatchNorm, WorldSizeOneTrainAndEvalMatchHandComputedBatchNorm) {
  dist::spawn(1, [](int) {
    dist::init({.backend = "gloo"});
    Tensor x = add(mul(randn({6, 2, 3, 3}, RandomKey{4, 0}), 1.5), -0.7);
    Tensor dy = randn({6, 2, 3, 3}, RandomKey{4, 1});
    dist::SyncBatchNorm sbn({.num_features = 2});
    sbn.weight.data().copy_(from_vector<float>({1.3f, -0.6f}, {2}));
    sbn.bias.data().copy_(from_vector<float>({0.2f, 0.9f}, {2}));
    sbn.running_mean.copy_(from_vector<float>({0.4f, -1.0f}, {2}));
    sbn.running_var.copy_(from_vector<float>({2.0f, 0.5f}, {2}));
    expect_hand_batchnorm(sbn, x, dy, /*training=*/true, "train, world 1");
    require(sbn.num_batches_tracked.item() == 1, "one batch tracked");
    expect_hand_batchnorm(sbn, x, dy, /*training=*/false, "eval, world 1");  // the updated running stats
    dist::shutdown();
  });
}

TEST(SyncBatchNorm, EvalModeOnTwoRanksUsesEachRanksRunningStatsWithoutCommunicating) {
  dist::spawn(2, [](int rank) {
    dist::init({.backend = "gloo", .timeout = std::chrono::seconds(30)});
    // different local batches, sizes 3 and 5: eval normalises each with the running statistics
    Tensor x = randn({rank == 0 ? 3 : 5, 2, 2, 2}, RandomKey{5, static_cast<uint64_t>(rank)});
    Tensor dy = randn(x.shape(), RandomKey{6, static_cast<uint64_t>(rank)});
    dist::SyncBatchNorm sbn({.num_features = 2});
    sbn.weight.data().copy_(from_vector<float>({0.5f, 2.0f}, {2}));
    sbn.running_mean.copy_(from_vector<float>({-0.3f, 0.8f}, {2}));
    sbn.running_var.copy_(from_vector<float>({0.7f, 2e-4f}, {2}));  // small enough for eps to matter
    expect_hand_batchnorm(sbn, x, dy, /*training=*/false, "eval, rank " + std::to_string(rank));
    // No collective ran: without this barrier rank 0 could tear the group down while rank 1 is
    // still connecting to it ("connection closed by peer").
    dist::barrier();
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

TEST(SyncBatchNorm, ConvertingAMemberKeepsItsObjectStateAndPrintsSyncBatchNorm) {
  MemberBN net;
  net.bn.running_mean.fill_(0.5);
  Variable& weight = net.bn.weight;
  EXPECT_EQ(dist::convert_sync_batchnorm(net), 1);
  EXPECT_EQ(dist::convert_sync_batchnorm(net), 0) << "already converted";
  EXPECT_TRUE(weight.is_same(net.named_parameters()[0].second));
  EXPECT_EQ(net.bn.running_mean.to_vector<float>()[0], 0.5f);
  EXPECT_NE(net.to_string().find("(bn): SyncBatchNorm(3, eps=1e-05"), std::string::npos) << net;
  // without a process group it is plain BatchNorm
  nn::BatchNorm2d ref({.num_features = 3});
  ref.running_mean.fill_(0.5);
  Tensor x = randn({4, 3, 2, 2}, RandomKey{5, 0});
  require_close(net(Variable(x)).data(), ref(Variable(x)).data(), 0, "no group: BatchNorm");
  require_close(net.bn.running_mean, ref.running_mean, 0, "running_mean");
}

// The error for a global batch of one value per channel: the total is read on the host only when
// this rank has at most one value, and every rank reports it; two ranks with one value each train.
TEST(SyncBatchNorm, OneValuePerChannelOverAllRanksIsAnErrorOnEveryRank) {
  for (const std::vector<int64_t>& sizes : {std::vector<int64_t>{1, 0}, std::vector<int64_t>{1, 1}}) {
    dist::spawn(2, [&](int rank) {
      dist::init({.backend = "gloo", .timeout = std::chrono::seconds(30)});
      dist::SyncBatchNorm bn({.num_features = 2});
      Variable x(randn({sizes[rank], 2}, RandomKey{3, static_cast<uint64_t>(rank)}), true);
      const bool expect_error = sizes[0] + sizes[1] <= 1;
      try {
        (void)bn(x);
        require(!expect_error, "expected the one-value error");
      } catch (const std::invalid_argument& e) {
        require(expect_error && std::string(e.what()).find("expected more than 1 value per channel over all "
                                                           "ranks when training, got 1") != std::string::npos,
                std::string("unexpected error: ") + e.what());
      }
      dist::shutdown();
    });
  }
}

// The merge SyncBatchNorm runs on the gathered rows, written out: channel 0 of rank 0 holds
// {1, 3} (mean 2, var 1), rank 1 nothing, rank 2 {4, 6, 8, 10} (mean 7, var 5); channel 1 is
// channel 0 plus 10 on every rank. Together {1, 3, 4, 6, 8, 10}: mean 16/3, var 83/9 (eps 0).
TEST(SyncBatchNorm, GatherStatsWithCountsMergesRanksAndSkipsEmptyOnes) {
  const double s5 = 1.0 / std::sqrt(5.0);
  const Tensor rows = from_vector<double>({2, 12, 1, 1, 2,  //
                                           0, 0, 0, 0, 0,  //
                                           7, 17, s5, s5, 4},
                                          {3, 5});
  const BatchNormGatheredStats g = batch_norm_gather_stats_with_counts(rows, 0.0);
  const double mean = 16.0 / 3.0, var = 83.0 / 9.0;
  require_close(g.mean, from_vector<double>({mean, mean + 10}), 1e-14, "mean");
  require_close(g.invstd, from_vector<double>({1 / std::sqrt(var), 1 / std::sqrt(var)}), 1e-14, "invstd");
  require_close(g.unbiased_var, from_vector<double>({var * 6 / 5, var * 6 / 5}), 1e-14, "unbiased_var");
  require(g.count.to_vector<double>() == std::vector<double>{6.0}, "count");
  EXPECT_THROW((void)batch_norm_gather_stats_with_counts(zeros({3, 4}, DType::Float64), 0.0), std::invalid_argument);
}

// The backward with the total as a tensor (how SyncBatchNorm passes it) gives the same bits as
// with the count as an integer on the CPU.
TEST(SyncBatchNorm, BackwardElemtWithACountTensorEqualsTheIntegerCount) {
  const Tensor x = randn({4, 3, 2, 2}, RandomKey{5, 0}), dy = randn({4, 3, 2, 2}, RandomKey{5, 1});
  const BatchNormStats s = batch_norm_stats(x, 1e-5);
  const Tensor w = randn({3}, RandomKey{5, 2});
  const BatchNormReduce r = batch_norm_backward_reduce(dy, x, s.mean, s.invstd, w);
  const Tensor by_int = batch_norm_backward_elemt(dy, x, s.mean, s.invstd, w, r.sum_dy, r.sum_dy_xmu, int64_t{40});
  const Tensor by_tensor =
      batch_norm_backward_elemt(dy, x, s.mean, s.invstd, w, r.sum_dy, r.sum_dy_xmu, from_vector<double>({40.0}));
  require(by_int.to_vector<float>() == by_tensor.to_vector<float>(), "bits differ");
  require(
      by_int.to_vector<float>() !=
          batch_norm_backward_elemt(dy, x, s.mean, s.invstd, w, r.sum_dy, r.sum_dy_xmu, int64_t{16}).to_vector<float>(),
      "the count must matter");
  EXPECT_THROW((void)batch_norm_backward_elemt(dy, x, s.mean, s.invstd, w, r.sum_dy, r.sum_dy_xmu,
                                               from_vector<double>({1.0, 2.0})),
               std::invalid_argument);
}
