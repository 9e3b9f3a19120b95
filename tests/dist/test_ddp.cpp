// tests/dist/test_ddp.cpp — DistributedDataParallel against one process, with real Gloo ranks
// forked by dist::spawn. Each rank also trains the single-process reference itself (full batch,
// no DDP) and compares: a failed expectation in a child becomes an exception, which makes
// spawn() throw with that rank's message.
#include <cmath>
#include <optional>
#include <sstream>
#include <thread>

#include "minidl/dist/ddp.h"
#include "minidl/dist/join.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/spawn.h"
#include "minidl/dist/sync_batchnorm.h"
#include "minidl/nn/nn_all.h"
#include "minidl/optim/optim_all.h"
#include "tests/common/testing.h"

using namespace minidl;

namespace {

// Throws (inside a child) when a and b differ beyond |a - b| <= atol + rtol |b|.
void require_close(const Tensor& a, const Tensor& b, double rtol, double atol, const std::string& what) {
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  if (va.size() != vb.size()) throw std::runtime_error(what + ": sizes differ");
  for (size_t i = 0; i < va.size(); ++i)
    if (std::fabs(va[i] - vb[i]) > atol + rtol * std::fabs(vb[i])) {
      std::ostringstream os;
      os << what << ": element " << i << " is " << va[i] << ", expected " << vb[i];
      throw std::runtime_error(os.str());
    }
}

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// A fixed global batch: inputs (B, 1, 28, 28), targets (B)
struct GlobalBatch {
  Tensor x, y;
};
GlobalBatch make_batch(int64_t B, uint64_t step) {
  return {rand({B, 1, 28, 28}, RandomKey{77, step}), randint(0, 10, {B}, RandomKey{78, step})};
}

void init_world(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  dist::init({.backend = "gloo", .timeout = timeout});
}

// Trains `model` for `steps` SGD-momentum steps: with DDP on this rank's slice of each global
// batch, or (ddp == nullptr) on the whole batch.
void train_steps(nn::Module& model, dist::DistributedDataParallel* ddp, int steps, int64_t B) {
  optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9, .weight_decay = 5e-4});
  const int rank = ddp ? dist::rank() : 0, world = ddp ? dist::world_size() : 1;
  for (int s = 0; s < steps; ++s) {
    GlobalBatch g = make_batch(B, static_cast<uint64_t>(s));
    const int64_t local = B / world;
    Tensor x = g.x.narrow(0, rank * local, local), y = g.y.narrow(0, rank * local, local).contiguous();
    opt.zero_grad();
    Variable out = ddp ? ddp->forward(Variable(x.contiguous())) : model.forward(Variable(x.contiguous()));
    cross_entropy(out, y).backward();
    if (ddp) {
      ddp->step(opt);
    } else {
      opt.step();
    }
  }
}

void ddp_matches_single_process(const std::string& model_name, int world, bool sync_bn) {
  dist::spawn(world, [&](int) {
    init_world();
    const int64_t B = 12;
    manual_seed(0);
    auto reference = nn::make_model(model_name);
    train_steps(*reference, nullptr, 5, B);

    manual_seed(0);
    auto model = nn::make_model(model_name);
    if (sync_bn) require(dist::convert_sync_batchnorm(*model) == 2, "two BatchNorms converted");
    dist::DistributedDataParallel ddp(*model);
    train_steps(*model, &ddp, 5, B);

    const TensorMap ref = reference->state_dict(), got = model->state_dict();
    for (const auto& [name, t] : ref) require_close(got.at(name), t, 1e-5, 1e-6, model_name + " " + name);
    dist::shutdown();
  });
}

}  // namespace

TEST(DDP, MlpTwoRanksMatchesOneProcess) { ddp_matches_single_process("mlp", 2, false); }
TEST(DDP, MlpThreeRanksMatchesOneProcess) { ddp_matches_single_process("mlp", 3, false); }
TEST(DDP, CnnWithSyncBatchNormTwoRanksMatchesOneProcess) { ddp_matches_single_process("cnn", 2, true); }
TEST(DDP, CnnWithSyncBatchNormThreeRanksMatchesOneProcess) { ddp_matches_single_process("cnn", 3, true); }

TEST(DDP, ConstructionBroadcastsRankZerosWeights) {
  dist::spawn(2, [](int rank) {
    init_world();
    manual_seed(100 + rank);  // different init on every rank
    nn::MLP model;
    dist::DistributedDataParallel ddp(model);
    Tensor w = model.net[1].state_dict().at("weight").clone();
    dist::all_reduce(w, dist::ReduceOp::SUM);
    require_close(w, mul(model.net[1].state_dict().at("weight"), 2.0), 0, 0, "weights equal on both ranks");
    dist::shutdown();
  });
}

TEST(DDP, DifferentModelsAreAClearError) {
  EXPECT_THROW_MSG(dist::spawn(2,
                               [](int rank) {
                                 init_world();
                                 nn::Linear a({.in = 4, .out = rank == 0 ? 3 : 5});
                                 dist::DistributedDataParallel ddp(a);
                               }),
                   std::runtime_error, "model differs from rank 0's at parameter #0: rank 0 has 'weight [3, 4]");
}

TEST(DDP, TinyBucketsGiveIdenticalGradientsAndOverlapBackward) {
  dist::spawn(2, [](int) {
    init_world();
    Tensor x = rand({8, 1, 28, 28}, RandomKey{5, 0});
    Tensor y = randint(0, 10, {8}, RandomKey{5, 1});
    auto grads = [&](double cap_mb, int* early, size_t* buckets) {
      manual_seed(0);
      nn::MLP model;
      dist::DistributedDataParallel ddp(model, {.bucket_cap_mb = cap_mb, .first_bucket_cap_mb = cap_mb});
      Tensor xs = x.narrow(0, dist::rank() * 4, 4).contiguous(), ys = y.narrow(0, dist::rank() * 4, 4).contiguous();
      cross_entropy(ddp(Variable(xs)), ys).backward();
      ddp.finish();
      *early = ddp.buckets_launched_before_backward_end();
      *buckets = ddp.num_buckets();
      std::vector<Tensor> g;
      for (auto& p : model.parameters()) g.push_back(p.grad().clone());
      return g;
    };
    int early_default, early_tiny;
    size_t n_default, n_tiny;
    auto a = grads(25.0, &early_default, &n_default);
    // ~100-byte caps: each parameter reaches the cap and closes its bucket, except the 40-byte last
    // bias, which shares the last weight's: 5 buckets, as PyTorch's rule gives
    // (torch.distributed._compute_bucket_assignment_by_size: [[0, 1], [2], [3], [4], [5]])
    auto b = grads(1e-4, &early_tiny, &n_tiny);
    require(n_tiny == 5, "5 buckets, got " + std::to_string(n_tiny));
    for (size_t i = 0; i < a.size(); ++i) require_close(b[i], a[i], 0, 0, "gradient " + std::to_string(i));
    require(early_tiny >= 1, "the first bucket's all-reduce started before backward ended");
    dist::shutdown();
  });
}

TEST(DDP, BucketsFollowReverseRegistrationOrderAndCloseOnceTheyReachTheirCap) {
  dist::spawn(2, [](int) {
    init_world();
    nn::CNN model;  // classifier.1.weight is 3136*128*4 bytes = 1.6 MB
    dist::DistributedDataParallel ddp(model);
    auto names = ddp.bucket_parameter_names();
    // PyTorch's rule (torch.distributed._compute_bucket_assignment_by_size with the caps 1 MB, 25 MB
    // on these sizes: [[0, 1, 2, 3], [4, ..., 11]]): the first bucket takes parameters until it
    // holds 1 MB, so the 1.6 MB classifier.1.weight closes it; the second takes the rest.
    require(names.size() == 2, "2 buckets, got " + std::to_string(names.size()));
    require(names[0] == std::vector<std::string>{"classifier.3.bias", "classifier.3.weight", "classifier.1.bias",
                                                 "classifier.1.weight"},
            "the first bucket holds the classifier");
    require(names[1].size() == 8 && names[1].back() == "features.0.weight",
            "the second bucket holds the 8 feature parameters, ending with the first parameter");
    dist::shutdown();
  });
}

namespace {
// Four (in, out) matrices whose dtypes take turns, registered float32 a, float64 b, float32 c,
// float64 d: x (B, 8) -> to float64 @ ... -> logits (B, 10) in float32.
struct AlternatingDtypes : nn::Module {
  Variable a, b, c, d;
  AlternatingDtypes()
      : a(randn({8, 16}, RandomKey{5, 1}), true),
        b(randn({16, 16}, RandomKey{5, 2}, DType::Float64), true),
        c(randn({16, 16}, RandomKey{5, 3}), true),
        d(randn({16, 10}, RandomKey{5, 4}, DType::Float64), true) {
    register_parameter("a", a);
    register_parameter("b", b);
    register_parameter("c", c);
    register_parameter("d", d);
  }
  Variable forward(const Variable& x) override {
    const Variable h = minidl::to(tanh(matmul(x, a)), DType::Float64);
    const Variable k = minidl::to(tanh(matmul(h, b)), DType::Float32);
    return minidl::to(matmul(minidl::to(tanh(matmul(k, c)), DType::Float64), d), DType::Float32);
  }
};
}  // namespace

// PyTorch keeps one open bucket per dtype: parameters whose dtypes take turns fill a bucket per
// dtype, not a bucket per turn. Reversed, the parameters arrive d (f64), c (f32), b (f64), a (f32);
// the float64 bucket's last parameter (b) comes before the float32 one's (a), so it launches first.
// Training on 2 ranks then equals one process on the whole batch.
TEST(DDP, ParametersOfTwoDtypesTakingTurnsFillOneBucketPerDtype) {
  dist::spawn(2, [](int) {
    init_world();
    AlternatingDtypes model, reference;
    dist::DistributedDataParallel ddp(model);
    const auto names = ddp.bucket_parameter_names();
    require(names.size() == 2, "2 buckets, got " + std::to_string(names.size()));
    require(names[0] == std::vector<std::string>{"d", "b"}, "the float64 bucket first: d, b");
    require(names[1] == std::vector<std::string>{"c", "a"}, "then the float32 bucket: c, a");
    const auto layout = ddp.bucket_layout();
    require(layout[0].params[1].second == 160 && layout[1].params[1].second == 256, "each slot after the one before");
    optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
    optim::SGD ref_opt(reference.parameters(), {.lr = 0.1, .momentum = 0.9});
    const int rank = dist::rank();
    for (uint64_t step = 0; step < 3; ++step) {
      const Tensor x = randn({8, 8}, RandomKey{6, step}), y = randint(0, 10, {8}, RandomKey{7, step});
      ref_opt.zero_grad();
      cross_entropy(reference.forward(Variable(x)), y).backward();
      ref_opt.step();
      opt.zero_grad();
      cross_entropy(ddp.forward(Variable(x.narrow(0, 4 * rank, 4).contiguous())), y.narrow(0, 4 * rank, 4).contiguous())
          .backward();
      ddp.step(opt);
    }
    const TensorMap ref = reference.state_dict(), got = model.state_dict();
    for (const auto& [name, t] : ref) require_close(got.at(name), t, 1e-5, 1e-6, "alternating dtypes " + name);
    dist::shutdown();
  });
}

TEST(DDP, NoSyncAccumulationEqualsOneStepOnTheCombinedBatch) {
  dist::spawn(2, [](int) {
    init_world();
    const int64_t B = 8;
    // reference: one process, two micro-batches of B accumulated
    manual_seed(0);
    nn::MLP ref;
    for (int k = 0; k < 2; ++k) {
      GlobalBatch g = make_batch(B, 10 + k);
      cross_entropy(ref(Variable(g.x)), g.y).backward();
    }
    manual_seed(0);
    nn::MLP model;
    dist::DistributedDataParallel ddp(model);
    const int64_t local = B / 2, r = dist::rank();
    for (int k = 0; k < 2; ++k) {
      GlobalBatch g = make_batch(B, 10 + k);
      Tensor x = g.x.narrow(0, r * local, local).contiguous(), y = g.y.narrow(0, r * local, local).contiguous();
      if (k == 0) {
        auto guard = ddp.no_sync();
        cross_entropy(ddp(Variable(x)), y).backward();
      } else {
        cross_entropy(ddp(Variable(x)), y).backward();
      }
    }
    ddp.finish();
    auto pr = ref.named_parameters(), pm = model.named_parameters();
    for (size_t i = 0; i < pr.size(); ++i)
      require_close(pm[i].second.grad(), pr[i].second.grad(), 1e-5, 1e-6, pr[i].first);
    dist::shutdown();
  });
}

namespace {
// Two heads; `use_b` picks which one the forward uses.
struct TwoHeads : nn::Module {
  nn::Linear body{{.in = 4, .out = 4}}, head_a{{.in = 4, .out = 2}}, head_b{{.in = 4, .out = 2}};
  bool use_b = false;
  TwoHeads() {
    register_module("body", body);
    register_module("head_a", head_a);
    register_module("head_b", head_b);
  }
  std::string type_name() const override { return "TwoHeads"; }
  Variable forward(const Variable& x) override { return use_b ? head_b(body(x)) : head_a(body(x)); }
};
}  // namespace

TEST(DDP, FindUnusedParametersCompletesWhenABranchIsUnusedOnOneRank) {
  dist::spawn(2, [](int rank) {
    init_world();
    manual_seed(0);
    TwoHeads m;
    m.use_b = rank == 1;  // head_b unused on rank 0, head_a unused on rank 1
    dist::DistributedDataParallel ddp(m, {.find_unused_parameters = true});
    Variable x(ones({3, 4}));
    sum(ddp(x)).backward();
    ddp.finish();
    // each head's gradient is the one rank's gradient averaged with the other's zero
    Tensor g = m.head_b.bias.grad().clone();
    require_close(g, full({2}, 1.5), 0, 1e-6, "head_b.bias grad = 3 rows / 2 ranks");
    dist::shutdown();
  });
}

TEST(DDP, UnusedParameterWithoutFindUnusedIsAnErrorNamingIt) {
  EXPECT_THROW_MSG(dist::spawn(2,
                               [](int) {
                                 init_world(std::chrono::seconds(5));
                                 TwoHeads m;
                                 dist::DistributedDataParallel ddp(m);
                                 sum(ddp(Variable(ones({3, 4})))).backward();
                                 ddp.finish();
                               }),
                   std::runtime_error, "did not receive a gradient in this backward: head_b.weight, head_b.bias");
}

TEST(DDP, JoinLetsRanksWithThreeAndFiveBatchesFinish) {
  // Rank r's batch b (4 samples) is make_batch(4, 100 + 2b + r). Rank 0 has 3 batches, rank 1 has
  // 5. While rank 0 is joined it contributes zero gradients and the average still divides by the
  // world size (as PyTorch's Join, divide_by_initial_world_size): step b is one step on the
  // union of the samples present, with loss sum / 8 (the full global batch).
  auto batch_of = [](int rank, int b) { return make_batch(4, static_cast<uint64_t>(100 + b * 2 + rank)); };
  const int batches[2] = {3, 5};
  dist::spawn(2, [&](int rank) {
    init_world(std::chrono::seconds(20));
    // reference: one process, SGD on the union of the samples of each step
    manual_seed(0);
    nn::MLP ref;
    optim::SGD ref_opt(ref.parameters(), {.lr = 0.1});
    for (int b = 0; b < 5; ++b) {
      std::vector<Tensor> xs, ys;
      for (int r = 0; r < 2; ++r)
        if (b < batches[r]) {
          xs.push_back(batch_of(r, b).x);
          ys.push_back(batch_of(r, b).y);
        }
      const Tensor x = cat(xs, 0), y = cat(ys, 0);
      ref_opt.zero_grad();
      mul(cross_entropy(ref(Variable(x)), y), static_cast<double>(x.size(0)) / 8.0).backward();
      ref_opt.step();
    }

    manual_seed(0);
    nn::MLP model;
    dist::DistributedDataParallel ddp(model);
    optim::SGD opt(model.parameters(), {.lr = 0.1});
    {
      dist::Join join(ddp);  // the end of the scope joins
      for (int b = 0; b < batches[rank]; ++b) {
        GlobalBatch g = batch_of(rank, b);
        opt.zero_grad();
        cross_entropy(ddp(Variable(g.x)), g.y).backward();
        ddp.step(opt);
      }
    }
    // both ranks end with the model trained on all 5 steps
    const TensorMap want = ref.state_dict(), got = model.state_dict();
    for (const auto& [name, t] : want)
      require_close(got.at(name), t, 1e-5, 1e-6, "rank " + std::to_string(rank) + " " + name);
    dist::shutdown();
  });
}

TEST(DDP, JoinRefusesAModelWithSyncBatchNorm) {
  dist::spawn(2, [](int) {
    init_world(std::chrono::seconds(20));
    manual_seed(0);
    nn::CNN model;
    require(dist::convert_sync_batchnorm(model) == 2, "two BatchNorms converted");
    dist::DistributedDataParallel ddp(model);
    std::string err;
    try {
      ddp.join();
    } catch (const std::logic_error& e) {
      err = e.what();
    }
    require(err.find("DistributedDataParallel::join: the model communicates in forward (SyncBatchNorm)") !=
                    std::string::npos &&
                err.find("give every rank the same number of batches") != std::string::npos,
            "join() on a SyncBatchNorm model: expected a logic_error saying why, got '" + err + "'");
    // the group is still usable: nothing was left half-done
    Tensor t = full({1}, 1.0);
    dist::all_reduce(t);
    require(t.item() == 2.0, "all_reduce after the refused join");
    dist::shutdown();
  });
}

TEST(DDP, StateDictHasTheInnerModulesNames) {
  dist::spawn(1, [](int) {
    init_world();
    nn::MLP model;
    dist::DistributedDataParallel ddp(model);
    TensorMap s = ddp.state_dict();
    require(s.count("net.1.weight") == 1 && s.count("module.net.1.weight") == 0, "no module. prefix");
    nn::MLP plain;
    plain.load_state_dict(s);
    ddp.load_state_dict(plain.state_dict());
    dist::shutdown();
  });
}

TEST(DDP, ReportsStepTimes) {
  dist::spawn(2, [](int) {
    init_world();
    nn::MLP model;
    dist::DistributedDataParallel ddp(model);
    optim::SGD opt(model.parameters(), {.lr = 0.1});
    GlobalBatch g = make_batch(4, 0);
    cross_entropy(ddp(Variable(g.x)), g.y).backward();
    ddp.step(opt);
    const auto& t = ddp.last_step_times();
    require(t.forward > 0 && t.backward > 0 && t.comm_wait >= 0 && t.optimizer > 0, "all phases timed");
    dist::shutdown();
  });
}

TEST(DDP, ARankThatSkipsBackwardMakesTheOthersFailWithinTheTimeout) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW_MSG(dist::spawn(2,
                               [](int rank) {
                                 init_world(std::chrono::seconds(2));
                                 nn::MLP model;
                                 dist::DistributedDataParallel ddp(model);
                                 GlobalBatch g = make_batch(4, 0);
                                 Variable loss = cross_entropy(ddp(Variable(g.x)), g.y);
                                 if (rank == 1) {  // skips backward, stays connected a while
                                   std::this_thread::sleep_for(std::chrono::seconds(4));
                                   return;
                                 }
                                 loss.backward();
                               }),
                   std::runtime_error, "rank 0 failed");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(12));
}

namespace {

// A process group that forwards to another and counts DDP's calls by kind.
class CountingGroup : public dist::ProcessGroup {
 public:
  explicit CountingGroup(dist::ProcessGroup& inner) : ProcessGroup(inner.rank(), inner.size()), inner_(inner) {}
  std::string backend_name() const override { return inner_.backend_name(); }
  std::shared_ptr<dist::Work> all_reduce_async(Tensor& t, dist::ReduceOp op) override {
    ++all_reduces;
    return inner_.all_reduce_async(t, op);
  }
  std::shared_ptr<dist::Work> broadcast_async(Tensor& t, int root) override {
    ++broadcasts;
    return inner_.broadcast_async(t, root);
  }
  std::shared_ptr<dist::Work> all_gather_async(const Tensor& t, std::vector<Tensor>& out) override {
    ++others;
    return inner_.all_gather_async(t, out);
  }
  std::shared_ptr<dist::Work> reduce_scatter_async(const Tensor& input, Tensor& out, dist::ReduceOp op) override {
    ++others;
    return inner_.reduce_scatter_async(input, out, op);
  }
  std::shared_ptr<dist::Work> barrier_async() override {
    ++others;
    return inner_.barrier_async();
  }
  int all_reduces = 0, broadcasts = 0, others = 0;

 private:
  dist::ProcessGroup& inner_;
};

// The collectives DDP issues in one training step of `model` on `group` (after a first step).
std::string collectives_per_step(nn::Module& model, CountingGroup& group, bool join) {
  dist::DistributedDataParallel ddp(model, {.group = &group});
  optim::SGD opt(model.parameters(), {.lr = 0.01});
  std::optional<dist::Join> scope;
  if (join) scope.emplace(ddp);
  auto step = [&](uint64_t s) {
    GlobalBatch g = make_batch(4, s);
    opt.zero_grad();
    cross_entropy(ddp(Variable(g.x)), g.y).backward();
    ddp.step(opt);
  };
  step(0);
  const int a0 = group.all_reduces, b0 = group.broadcasts, o0 = group.others;
  step(1);
  std::string out = std::to_string(group.all_reduces - a0 - static_cast<int>(ddp.num_buckets())) +
                    " all-reduce(s) besides the " + std::to_string(ddp.num_buckets()) + " bucket(s), " +
                    std::to_string(group.broadcasts - b0) + " broadcast(s), " + std::to_string(group.others - o0) +
                    " other(s)";
  return out;
}

}  // namespace

TEST(DDP, AStepIssuesOnlyItsBucketsAndOneCoalescedBufferBroadcast) {
  // PyTorch's DDP: no join handshake outside Join, the buffers in one coalesced broadcast, none
  // when every buffer belongs to a layer that synchronises itself (SyncBatchNorm).
  const auto lines = dist::spawn_with_results(2, [](int) {
    init_world(std::chrono::seconds(20));
    CountingGroup group(dist::default_group());
    std::string out;
    manual_seed(0);
    nn::MLP mlp;  // no buffers
    out += "mlp: " + collectives_per_step(mlp, group, false) + "\n";
    manual_seed(0);
    nn::CNN cnn;  // two BatchNorms: 6 buffers
    out += "cnn: " + collectives_per_step(cnn, group, false) + "\n";
    manual_seed(0);
    nn::CNN sync_cnn;
    dist::convert_sync_batchnorm(sync_cnn);
    out += "cnn sync-bn: " + collectives_per_step(sync_cnn, group, false) + "\n";
    manual_seed(0);
    nn::MLP joined;
    out += "mlp in Join: " + collectives_per_step(joined, group, true) + "\n";
    dist::shutdown();
    return out;
  });
  for (const std::string& l : lines)
    EXPECT_EQ(l,
              "mlp: 0 all-reduce(s) besides the 1 bucket(s), 0 broadcast(s), 0 other(s)\n"
              "cnn: 0 all-reduce(s) besides the 2 bucket(s), 1 broadcast(s), 0 other(s)\n"
              "cnn sync-bn: 0 all-reduce(s) besides the 2 bucket(s), 0 broadcast(s), 0 other(s)\n"
              "mlp in Join: 1 all-reduce(s) besides the 1 bucket(s), 0 broadcast(s), 0 other(s)\n");
}

TEST(DDP, CoalescedBufferBroadcastGivesEveryRankRankZerosBuffers) {
  dist::spawn(2, [](int rank) {
    init_world(std::chrono::seconds(20));
    manual_seed(0);
    nn::CNN model;
    dist::DistributedDataParallel ddp(model);
    // each rank moves its running statistics differently; the next training forward restores rank 0's
    for (auto& [name, b] : model.named_buffers()) b->fill_(static_cast<double>(rank + 1) * 3);
    GlobalBatch g = make_batch(4, 0);
    ddp.train();
    Variable out = ddp(Variable(g.x));
    cross_entropy(out, g.y).backward();
    ddp.finish();
    for (auto& [name, b] : model.named_buffers()) {
      const std::string what = "rank " + std::to_string(rank) + " " + name;
      // forward used rank 0's buffers (3), then the BatchNorm moved them from there
      const Tensor all = dist::all_gather(*b)[0];  // rank 0's
      require_close(*b, all, 0, 0, what);
    }
    dist::shutdown();
  });
}

TEST(DDP, ARankThatStopsEarlyWithoutJoinIsNamed) {
  // Rank 1 has 3 batches, rank 0 has 5, and no Join: rank 0's step 4 fails, naming rank 1.
  const auto start = std::chrono::steady_clock::now();
  std::string err;
  try {
    dist::spawn(2, [](int rank) {
      init_world(std::chrono::seconds(2));
      manual_seed(0);
      nn::MLP model;
      dist::DistributedDataParallel ddp(model);
      optim::SGD opt(model.parameters(), {.lr = 0.1});
      for (int b = 0; b < (rank == 0 ? 5 : 3); ++b) {
        GlobalBatch g = make_batch(4, static_cast<uint64_t>(b));
        opt.zero_grad();
        cross_entropy(ddp(Variable(g.x)), g.y).backward();
        ddp.step(opt);
      }
      if (rank == 1) std::this_thread::sleep_for(std::chrono::seconds(4));  // still connected, elsewhere
    });
  } catch (const std::runtime_error& e) {
    err = e.what();
  }
  EXPECT_THAT(err, ::testing::HasSubstr("rank 0 failed: DistributedDataParallel: the gradient all-reduce of "
                                        "training step 4 failed: "));
  EXPECT_THAT(err, ::testing::HasSubstr("; rank 1 did not reach training step 4: it stopped training earlier than "
                                        "this rank (fewer batches?) or died"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(DDP, JoinOutsideAJoinScopeSaysHowToUseIt) {
  dist::spawn(2, [](int) {
    init_world(std::chrono::seconds(20));
    nn::MLP model;
    dist::DistributedDataParallel ddp(model);
    std::string err;
    try {
      ddp.join();
    } catch (const std::logic_error& e) {
      err = e.what();
    }
    require(err.find("only inside a dist::Join scope") != std::string::npos,
            "join() outside a scope: got '" + err + "'");
    dist::shutdown();
  });
}

TEST(DDP, GradientsAreViewsOfTheirBucketHoldingTheAverage) {
  // gradient_as_bucket_view: after backward every .grad of a bucket shares the bucket's storage
  // and holds the average over the ranks (no copy back); the next step's gradients land there too
  // (each parameter's gradient destination is its slot: the linear weights' are made there).
  dist::spawn(2, [](int rank) {
    init_world(std::chrono::seconds(20));
    manual_seed(0);
    nn::MLP model;
    dist::DistributedDataParallel ddp(model);
    require(ddp.num_buckets() == 1, "the MLP fits one bucket");
    for (uint64_t s = 0; s < 2; ++s) {
      for (auto& p : model.parameters()) p.set_grad(Tensor());
      GlobalBatch g = make_batch(4, 10 * s + static_cast<uint64_t>(rank));  // a different batch per rank
      cross_entropy(ddp(Variable(g.x)), g.y).backward();
      const auto params = model.parameters();
      for (const auto& p : params) {
        require(p.grad().storage() == params.front().grad().storage(),
                "step " + std::to_string(s) + ": every .grad is a view of the one bucket");
        require(p.grad().is_same(p.grad_destination()), "each gradient is made in (or moved to) its slot");
      }
      for (const auto& p : params) {
        const Tensor mine = p.grad().clone();
        const std::vector<Tensor> all = dist::all_gather(mine);
        require_close(mine, all[0], 0, 0, "rank " + std::to_string(rank) + ": the same average on every rank");
      }
    }
    {
      dist::DistributedDataParallel other(model);  // a wrapper's end removes its destinations
    }
    for (const auto& p : model.parameters()) require(!p.grad_destination().defined(), "no destination after DDP");
    dist::shutdown();
  });
}
