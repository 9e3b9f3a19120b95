// tests/dist/test_deterministic.cpp — deterministic data parallelism: the shard tree (known
// shapes and sums against explicit expressions), its all-gather across Gloo ranks, and whole
// training runs — MLP (Adam), CNN with SyncBatchNorm (ghost batch norm, SGD momentum), ViT with
// dropout (AdamW) — whose final model and optimizer tensors have the same sha256 on 1, 2 and 4
// processes with 1 and 2 threads each, and equal those of an independent single-process
// reference (plain autograd per micro-shard, its own tree, plain BatchNorm). With the mode off,
// 1 and 2 processes end with different bits (what the mode fixes).
//
// The training runs are fresh processes (minidl-run starting this binary with
// MINIDL_DETERMINISTIC_WORKER set, so OpenMP may use 2 threads: forked children could not).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "minidl/dist/ddp.h"
#include "minidl/dist/deterministic_ddp.h"
#include "minidl/dist/deterministic.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/socket.h"
#include "minidl/dist/sync_batchnorm.h"
#include "minidl/nn/nn_all.h"
#include "minidl/optim/optim_all.h"
#include "tests/common/testing.h"
#include "tests/dist/dist_test_util.h"
#include "tests/dist/pg_test_util.h"
#include "tests/dist/sha256.h"

using namespace minidl;
using minidl::dist::ShardRange;
namespace mt = minidl::testing;

namespace {

// ---------------------------------------------------------------------------------------------
// The training worker (runs in a process started by minidl-run; see the TESTs at the end).
// Environment: MINIDL_DETERMINISTIC_WORKER = deterministic | ordinary | reference,
// MINIDL_DET_MODEL = mlp | cnn | vit, MINIDL_DET_STEPS = N. Prints "rank R sha256 HEX".

constexpr int64_t kGlobalBatch = 32, kMicro = 8;

std::unique_ptr<nn::Module> make(const std::string& name) {
  if (name == "vit") return std::make_unique<nn::ViT>(nn::ViTOptions{.dropout = 0.1});
  return nn::make_model(name);
}

std::unique_ptr<optim::Optimizer> optimizer_for(const std::string& name, nn::Module& model) {
  if (name == "mlp") return std::make_unique<optim::Adam>(model.parameters(), optim::AdamOptions{.lr = 1e-3});
  if (name == "cnn")
    return std::make_unique<optim::SGD>(model.parameters(),
                                        optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 5e-4});
  return std::make_unique<optim::AdamW>(model.parameters(), optim::AdamWOptions{.lr = 1e-3, .weight_decay = 0.05});
}

// Step t's global batch: (B, 1, 28, 28) images and (B) labels.
std::pair<Tensor, Tensor> global_batch(int64_t t) {
  return {rand({kGlobalBatch, 1, 28, 28}, RandomKey{100, static_cast<uint64_t>(t)}),
          randint(0, 10, {kGlobalBatch}, RandomKey{101, static_cast<uint64_t>(t)})};
}

// Dropout masks of the micro-shard that starts at global sample `sample` of step t.
uint64_t shard_key(int64_t t, int64_t sample) {
  return 1000003ull * static_cast<uint64_t>(t) + static_cast<uint64_t>(sample);
}

std::string state_hash(const nn::Module& model, const optim::Optimizer& opt) {
  const TensorMap m = model.state_dict(), o = opt.state_dict();
  return mt::sha256_of({&m, &o});
}

// DDP, deterministic or not, on this rank's contiguous slice of each global batch.
std::string train_ddp(const std::string& name, int64_t steps, bool deterministic) {
  // auto: shared memory on this host, the transport train uses on one machine's CPUs
  dist::init({.backend = "auto", .timeout = std::chrono::seconds(120)});
  const int R = dist::world_size(), r = dist::rank();
  manual_seed(0);
  auto model = make(name);
  if (name == "cnn") dist::convert_sync_batchnorm(*model);
  std::unique_ptr<dist::DataParallel> dp;
  if (deterministic)
    dp = std::make_unique<dist::DeterministicDDP>(*model);
  else
    dp = std::make_unique<dist::DistributedDataParallel>(*model);
  dist::DataParallel& ddp = *dp;
  auto opt = optimizer_for(name, *model);
  const int64_t local = kGlobalBatch / R;
  for (int64_t t = 0; t < steps; ++t) {
    auto [x, y] = global_batch(t);
    x = x.narrow(0, r * local, local).contiguous();
    y = y.narrow(0, r * local, local).contiguous();
    opt->zero_grad();
    if (deterministic) {
      for (int64_t j = 0; j < local / kMicro; ++j) {
        const int64_t first = r * local + j * kMicro;  // global sample index of the shard's start
        manual_seed(shard_key(t, first));
        Variable out = ddp.forward(Variable(x.narrow(0, j * kMicro, kMicro)));
        cross_entropy(out, y.narrow(0, j * kMicro, kMicro)).backward();
      }
    } else {
      manual_seed(shard_key(t, 7777 + r));
      cross_entropy(ddp.forward(Variable(x)), y).backward();
    }
    ddp.step(*opt);
  }
  std::string hash = state_hash(*model, *opt);
  dist::barrier();
  dist::shutdown();
  return hash;
}

// The test's own tree over shards [lo, hi), written from the rule in dist/deterministic.h.
std::vector<float> reference_tree(const std::vector<std::vector<float>>& shard, size_t lo, size_t hi) {
  if (hi - lo == 1) return shard[lo];
  size_t n = hi - lo, p = 1;
  while (p * 2 < n) p *= 2;  // the largest power of two below n ...
  const size_t mid = (n & (n - 1)) == 0 ? lo + n / 2 : lo + p;  // ... or the half of a power of two
  std::vector<float> a = reference_tree(shard, lo, mid), b = reference_tree(shard, mid, hi);
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}

// One process, no dist: each micro-shard's gradient by plain autograd, the test's tree, * (1 / K);
// plain BatchNorm whose per-shard statistics are captured by zeroed buffers and momentum 1, then
// averaged by the same tree and applied once per step with the real momentum.
std::string train_reference(const std::string& name, int64_t steps) {
  manual_seed(0);
  auto model = make(name);
  auto opt = optimizer_for(name, *model);
  std::vector<Variable> params = model->parameters();
  std::vector<nn::BatchNormBase*> bns;
  for (auto& [path, m] : model->named_modules())
    if (auto* bn = dynamic_cast<nn::BatchNormBase*>(m)) bns.push_back(bn);
  const int64_t K = kGlobalBatch / kMicro;
  for (int64_t t = 0; t < steps; ++t) {
    auto [x, y] = global_batch(t);
    std::vector<std::vector<float>> shard_values(static_cast<size_t>(K));
    std::vector<Tensor> saved_mean, saved_var, saved_count;
    for (auto* bn : bns) {
      saved_mean.push_back(bn->running_mean.clone());
      saved_var.push_back(bn->running_var.clone());
      saved_count.push_back(bn->num_batches_tracked.clone());
    }
    for (int64_t s = 0; s < K; ++s) {
      for (auto* bn : bns) {
        bn->running_mean.fill_(0.0);
        bn->running_var.fill_(0.0);
        bn->options.momentum = 1.0;
      }
      for (Variable& p : params) p.set_grad(Tensor());
      manual_seed(shard_key(t, s * kMicro));
      Variable out = model->forward(Variable(x.narrow(0, s * kMicro, kMicro).contiguous()));
      cross_entropy(out, y.narrow(0, s * kMicro, kMicro).contiguous()).backward();
      std::vector<float>& v = shard_values[static_cast<size_t>(s)];
      for (Variable& p : params)
        for (float g : p.grad().to_vector<float>()) v.push_back(g);
      for (auto* bn : bns) {
        for (float g : bn->running_mean.to_vector<float>()) v.push_back(g);
        for (float g : bn->running_var.to_vector<float>()) v.push_back(g);
      }
    }
    std::vector<float> sum = reference_tree(shard_values, 0, static_cast<size_t>(K));
    const float inv = static_cast<float>(1.0 / static_cast<double>(K));
    for (float& g : sum) g *= inv;
    size_t at = 0;
    for (Variable& p : params) {
      const std::vector<float> g(sum.begin() + static_cast<std::ptrdiff_t>(at),
                                 sum.begin() + static_cast<std::ptrdiff_t>(at + static_cast<size_t>(p.numel())));
      p.set_grad(from_vector<float>(g, p.shape()));
      at += static_cast<size_t>(p.numel());
    }
    for (size_t b = 0; b < bns.size(); ++b) {
      const int64_t C = bns[b]->options.num_features;
      auto slice = [&](size_t from) {
        return from_vector<float>(
            std::vector<float>(sum.begin() + static_cast<std::ptrdiff_t>(from),
                               sum.begin() + static_cast<std::ptrdiff_t>(from + static_cast<size_t>(C))),
            {C});
      };
      const Tensor mean = slice(at), var = slice(at + static_cast<size_t>(C));
      at += 2 * static_cast<size_t>(C);
      bns[b]->options.momentum = 0.1;
      bns[b]->running_mean.copy_(saved_mean[b]);
      bns[b]->running_var.copy_(saved_var[b]);
      lerp_(bns[b]->running_mean, mean, 0.1);
      lerp_(bns[b]->running_var, var, 0.1);
      bns[b]->num_batches_tracked.copy_(saved_count[b]);
      bns[b]->num_batches_tracked.data<int64_t>()[0] += 1;
    }
    opt->step();
  }
  return state_hash(*model, *opt);
}

int run_worker(const std::string& mode) {
  const char* model = std::getenv("MINIDL_DET_MODEL");
  const char* steps = std::getenv("MINIDL_DET_STEPS");
  if (!model || !steps) {
    std::fprintf(stderr, "MINIDL_DET_MODEL and MINIDL_DET_STEPS must be set\n");
    return 2;
  }
  std::string hash;
  if (mode == "reference") {
    hash = train_reference(model, std::atoll(steps));
    std::printf("rank 0 sha256 %s\n", hash.c_str());
    return 0;
  }
  if (mode != "deterministic" && mode != "ordinary") {
    std::fprintf(stderr, "unknown MINIDL_DETERMINISTIC_WORKER '%s'\n", mode.c_str());
    return 2;
  }
  hash = train_ddp(model, std::atoll(steps), mode == "deterministic");
  std::printf("rank %s sha256 %s\n", std::getenv("RANK") ? std::getenv("RANK") : "0", hash.c_str());
  return 0;
}

[[maybe_unused]] const bool det_worker_ran = [] {
  const char* mode = std::getenv("MINIDL_DETERMINISTIC_WORKER");
  if (mode == nullptr) return false;
  int code = 1;
  try {
    code = run_worker(mode);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deterministic worker failed: %s\n", e.what());
  }
  std::fflush(nullptr);
  _exit(code);
}();

// ---------------------------------------------------------------------------------------------
// The parent side.

// Runs the worker on `procs` processes with `threads` OpenMP threads each; returns every rank's
// hash (all of them must agree: the replicas are identical in both modes).
std::string run_training(const std::string& mode, const std::string& model, int procs, int threads, int steps) {
  std::vector<std::string> argv = {mt::launcher_path(),
                                   "--nproc-per-node",
                                   std::to_string(procs),
                                   "--master-port",
                                   std::to_string(dist::find_free_port()),
                                   mt::self_path()};
  if (mode == "reference") argv = {mt::self_path()};
  mt::Subprocess p = mt::start_process(argv, {{"MINIDL_DETERMINISTIC_WORKER", mode},
                                              {"MINIDL_DET_MODEL", model},
                                              {"MINIDL_DET_STEPS", std::to_string(steps)},
                                              {"OMP_NUM_THREADS", std::to_string(threads)},
                                              {"OMP_WAIT_POLICY", "PASSIVE"}});
  const bool ended = mt::wait_process(p, std::chrono::seconds(240));
  EXPECT_TRUE(ended) << mode << " " << model << " " << procs << "x" << threads << " timed out\n" << p.err;
  EXPECT_EQ(mt::exit_code(p), 0) << p.out << p.err;
  std::set<std::string> hashes;
  const std::regex line(R"(rank \d+ sha256 ([0-9a-f]{64}))");
  for (std::sregex_iterator it(p.out.begin(), p.out.end(), line), end; it != end; ++it) hashes.insert((*it)[1]);
  const size_t lines = static_cast<size_t>(std::count(p.out.begin(), p.out.end(), '\n'));
  EXPECT_EQ(lines, mode == "reference" ? 1u : static_cast<size_t>(procs)) << p.out;
  EXPECT_EQ(hashes.size(), 1u) << "the replicas differ:\n" << p.out;
  return hashes.empty() ? "" : *hashes.begin();
}

void expect_identical_everywhere(const std::string& model, int steps) {
  const std::string reference = run_training("reference", model, 1, 1, steps);
  ASSERT_EQ(reference.size(), 64u);
  for (int procs : {1, 2, 4})
    for (int threads : {1, 2})
      EXPECT_EQ(run_training("deterministic", model, procs, threads, steps), reference)
          << model << ": " << procs << " process(es) x " << threads << " thread(s) differ from the reference";
}

}  // namespace

TEST(Sha256, MatchesTheFipsTestVectors) {
  EXPECT_EQ(mt::sha256("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(mt::sha256(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(mt::sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(ShardTree, SplitsPowersOfTwoInHalvesAndOthersAtTheLargestPowerBelow) {
  EXPECT_EQ(dist::shard_tree_split(0, 8), 4);
  EXPECT_EQ(dist::shard_tree_split(4, 6), 5);
  EXPECT_EQ(dist::shard_tree_split(0, 6), 4);
  EXPECT_EQ(dist::shard_tree_split(0, 7), 4);
  EXPECT_EQ(dist::shard_tree_split(4, 7), 6);
  EXPECT_EQ(dist::shard_tree_split(0, 12), 8);
  EXPECT_THROW(dist::shard_tree_split(3, 4), std::invalid_argument);
}

TEST(ShardTree, CoverIsTheMaximalNodesInsideARange) {
  using V = std::vector<ShardRange>;
  EXPECT_EQ(dist::shard_tree_cover(0, 8, 8), (V{{0, 8}}));
  EXPECT_EQ(dist::shard_tree_cover(4, 8, 8), (V{{4, 8}}));
  EXPECT_EQ(dist::shard_tree_cover(2, 4, 8), (V{{2, 4}}));
  EXPECT_EQ(dist::shard_tree_cover(3, 6, 6), (V{{3, 4}, {4, 6}}));  // 2 ranks of 3 shards: rank 1
  EXPECT_EQ(dist::shard_tree_cover(0, 3, 6), (V{{0, 2}, {2, 3}}));  // rank 0
  EXPECT_EQ(dist::shard_tree_cover(3, 6, 12), (V{{3, 4}, {4, 6}}));  // 4 ranks of 3: rank 1
  EXPECT_EQ(dist::shard_tree_cover(9, 12, 12), (V{{9, 10}, {10, 12}}));  // rank 3: inside the [8, 12) block
  EXPECT_THROW(dist::shard_tree_cover(2, 2, 8), std::invalid_argument);
}

TEST(ShardTree, SumAddsInTheDocumentedOrder) {
  // Values whose sum depends on the order in float32: 1e8 + 1 - 1e8 ...
  const std::vector<float> v = {1e8f, 1.0f, -1e8f, 3.0f, 0.5f, 7.0f};
  std::vector<Tensor> leaves;
  for (float x : v) leaves.push_back(from_vector<float>({x}, {1}));
  const auto known = [&](ShardRange s) -> const Tensor* {
    return s.size() == 1 ? &leaves[static_cast<size_t>(s.lo)] : nullptr;
  };
  const float expected = ((v[0] + v[1]) + (v[2] + v[3])) + (v[4] + v[5]);  // the tree over 6 shards
  EXPECT_EQ(dist::shard_tree_sum({0, 6}, known).to_vector<float>()[0], expected);
  EXPECT_NE(((((v[0] + v[1]) + v[2]) + v[3]) + v[4]) + v[5], expected);  // a left fold differs: the order matters
  EXPECT_THROW_MSG(dist::shard_tree_sum({0, 6}, [](ShardRange) -> const Tensor* { return nullptr; }), std::logic_error,
                   "shard 0 is missing");
}

// Every rank holds its n leaves of n R; every rank gets the 1-process tree's bits.
TEST(ShardTree, AllReduceOverGlooRanksGivesTheOneProcessTreesBits) {
  for (auto [world, leaves] : std::vector<std::pair<int, int64_t>>{{2, 4}, {4, 2}, {2, 3}, {3, 4}, {4, 3}}) {
    const int64_t n = leaves;  // a plain variable: the lambdas below capture it
    const int64_t total = world * n, L = 1000;
    const auto leaf = [&](int64_t s) { return randn({L}, RandomKey{5, static_cast<uint64_t>(s)}) * 1000.0 + 1.0; };
    const auto results = mt::run_gloo_world(world, [&](dist::ProcessGroupGloo& pg) {
      std::vector<Tensor> mine, all;
      for (int64_t s = 0; s < total; ++s) all.push_back(leaf(s));
      for (int64_t j = 0; j < n; ++j) mine.push_back(all[static_cast<size_t>(pg.rank() * n + j)]);
      const Tensor got = dist::shard_tree_all_reduce(mine, pg);
      const Tensor want = dist::shard_tree_sum({0, total}, [&](ShardRange s) -> const Tensor* {
        return s.size() == 1 ? &all[static_cast<size_t>(s.lo)] : nullptr;
      });
      mt::require_equal(got, want, "rank " + std::to_string(pg.rank()));
      // and the tree is not just any order: a plain sequential sum differs somewhere
      Tensor sequential = all[0].clone();
      for (int64_t s = 1; s < total; ++s) sequential = sequential + all[static_cast<size_t>(s)];
      mt::require(sequential.to_vector<float>() != want.to_vector<float>(),
                  "the sequential sum happens to equal the tree");
      return std::string("ok");
    });
    for (const auto& r : results) EXPECT_EQ(r, "ok") << world << " ranks of " << n;
  }
}

// bfloat16 leaves: the tree adds in float32 and the sum is rounded once. Shards 1, u, u, u (u =
// 2^-8, half a bfloat16 unit at 1) on 2 ranks: 1 + 3u is 1.5 units past 1, a tie, rounded to
// even: 1 + 4u. Rounded after each addition of the tree, ((1 + u) + (u + u)) would give 1 + 2u.
TEST(ShardTree, HalfFloatLeavesAreSummedInFloat32AndRoundedOnce) {
  const auto results = mt::run_gloo_world(2, [](dist::ProcessGroupGloo& pg) {
    const double u = 1.0 / 256;
    std::vector<Tensor> mine;
    for (int64_t s = 2 * pg.rank(); s < 2 * pg.rank() + 2; ++s)
      mine.push_back(full({3}, s == 0 ? 1.0 : u, DType::BFloat16));
    const Tensor got = dist::shard_tree_all_reduce(mine, pg);
    mt::require(got.dtype() == DType::BFloat16, "the sum keeps the leaves' dtype, got " + got.desc());
    mt::require_equal(got, full({3}, 1.0 + 4 * u, DType::BFloat16), "rank " + std::to_string(pg.rank()));
    return std::string("ok");
  });
  for (const auto& r : results) EXPECT_EQ(r, "ok");
}

TEST(ShardTree, AllReduceNamesARankWithADifferentNumberOfShards) {
  const auto results = mt::run_gloo_world(2, [](dist::ProcessGroupGloo& pg) {
    std::vector<Tensor> mine(pg.rank() == 0 ? 2 : 3, ones({10}));
    return mt::error_of([&] { dist::shard_tree_all_reduce(mine, pg); });
  });
  EXPECT_THAT(results[0], ::testing::HasSubstr("rank 1 sent 3 shard(s), rank 0 has 2"));
  EXPECT_THAT(results[1], ::testing::HasSubstr("every rank must contribute the same number of micro-shards"));
}

TEST(DeterministicDDP, RefusesPlainBatchNorm) {
  // (join() and no_sync() do not exist on the type: every rank runs its share of every batch)
  const auto results = mt::run_gloo_world(1, [](dist::ProcessGroupGloo& pg) {
    manual_seed(0);
    nn::CNN cnn;
    return mt::error_of([&] { dist::DeterministicDDP d(cnn, {.group = &pg}); });
  });
  EXPECT_THAT(results[0], ::testing::HasSubstr("DeterministicDDP: 'features.1' (BatchNorm2d) would move its running "
                                               "statistics once per micro-shard"));
}

// A BatchNorm held as a member of a user module: convert_sync_batchnorm keeps the object (it is
// not a SyncBatchNorm) and installs SyncBatchNorm's forward. DDP must still see that the model
// communicates in forward: join() refuses it, and deterministic mode names it instead of
// treating it as a plain BatchNorm (or, without running statistics, not at all).
struct MemberBN : nn::Module {
  nn::BatchNorm2d bn;
  explicit MemberBN(bool track) : bn({.num_features = 3, .track_running_stats = track}) { register_module("bn", bn); }
  Variable forward(const Variable& x) override { return bn(x); }
};

TEST(DDP, SeesABatchNormMemberConvertedToSyncBatchNorm) {
  const auto results = mt::run_gloo_world(1, [](dist::ProcessGroupGloo& pg) {
    manual_seed(0);
    MemberBN plain(true);
    std::string out = plain.bn.communicates_in_forward() ? "plain communicates" : "plain is local";
    MemberBN net(true), untracked(false);
    if (dist::convert_sync_batchnorm(net) != 1 || dist::convert_sync_batchnorm(untracked) != 1)
      return std::string("not converted");
    if (dynamic_cast<dist::SyncBatchNorm*>(&net.bn)) return std::string("the member was replaced");
    out += net.bn.communicates_in_forward() ? " | converted communicates" : " | converted is local";
    dist::DistributedDataParallel ddp(net, {.group = &pg});
    out += " | " + mt::error_of([&] { ddp.join(); });
    out += " | " + mt::error_of([&] { dist::DeterministicDDP d(net, {.group = &pg}); });
    out += " | " + mt::error_of([&] { dist::DeterministicDDP d(untracked, {.group = &pg}); });
    return out;
  });
  const std::string& r = results[0];
  EXPECT_THAT(r, ::testing::StartsWith("plain is local | converted communicates | "));
  EXPECT_THAT(r, ::testing::HasSubstr("join: the model communicates in forward (SyncBatchNorm)"));
  const std::string member =
      "'bn' (SyncBatchNorm) is a BatchNorm member of a user module converted by "
      "dist::convert_sync_batchnorm, which cannot run as ghost batch norm";
  const size_t first = r.find(member);
  ASSERT_NE(first, std::string::npos) << r;
  EXPECT_NE(r.find(member, first + 1), std::string::npos) << "untracked member: " << r;
}

TEST(DeterministicTraining, MlpIsBitIdenticalOnOneTwoAndFourProcessesAndAnyThreadCount) {
  expect_identical_everywhere("mlp", 4);
}

TEST(DeterministicTraining, CnnWithSyncBatchNormIsBitIdenticalOnOneTwoAndFourProcessesAndAnyThreadCount) {
  expect_identical_everywhere("cnn", 3);
}

TEST(DeterministicTraining, VitWithDropoutIsBitIdenticalOnOneTwoAndFourProcessesAndAnyThreadCount) {
  expect_identical_everywhere("vit", 2);
}

// What the mode fixes: the ordinary path adds the same numbers in another order on 2 processes.
TEST(DeterministicTraining, WithTheModeOffOneAndTwoProcessesEndWithDifferentBits) {
  for (const char* model : {"mlp", "cnn"}) {
    const std::string one = run_training("ordinary", model, 1, 1, 4), two = run_training("ordinary", model, 2, 1, 4);
    ASSERT_EQ(one.size(), 64u);
    EXPECT_NE(one, two) << model;
    EXPECT_EQ(run_training("ordinary", model, 1, 2, 4), one) << model << ": the kernels depend on the thread count";
  }
}
