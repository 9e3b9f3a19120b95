// tests/dist/test_zero_redundancy_optimizer.cpp — ZeroRedundancyOptimizer against the unsharded
// optimizer, with real ranks forked by dist::spawn (shared memory; one test over Gloo). Each rank
// trains the MLP under DDP twice from the same start, once with the plain optimizer and once with
// ZeRO around it: DDP's reduce-scatter sums in the order of its all-reduce, the wrapped optimizer
// does the same per-element arithmetic on its pieces and the all-gather copies the bits, so the
// parameters must be bit-identical. A failed expectation in a child becomes an exception, which
// makes spawn() throw with that rank's message.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>

#include "minidl/dist/ddp.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/grad_scaler_sync.h"
#include "minidl/dist/join.h"
#include "minidl/dist/spawn.h"
#include "minidl/dist/zero_redundancy_optimizer.h"
#include "minidl/nn/nn_all.h"
#include "minidl/optim/optim_all.h"
#include "tests/common/testing.h"

using namespace minidl;

namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// Throws unless a and b hold the same bits.
void require_identical(const Tensor& a, const Tensor& b, const std::string& what) {
  require(a.shape() == b.shape() && a.dtype() == b.dtype(), what + ": " + a.desc() + " vs " + b.desc());
  const Tensor ca = a.cpu().contiguous(), cb = b.cpu().contiguous();
  require(std::memcmp(ca.raw_data(), cb.raw_data(), static_cast<size_t>(ca.numel()) * element_size(ca.dtype())) == 0,
          what + ": the values differ");
}

void require_identical(const TensorMap& a, const TensorMap& b, const std::string& what) {
  require(a.size() == b.size(), what + ": " + std::to_string(a.size()) + " vs " + std::to_string(b.size()) + " keys");
  for (const auto& [key, t] : a) {
    require(b.count(key) == 1, what + ": no key " + key);
    require_identical(t, b.at(key), what + " " + key);
  }
}

// Throws unless every element of got is within rel * max(max |want|, 1) of want's.
void require_close(const Tensor& got, const Tensor& want, double rel, const std::string& what) {
  const double worst = max(abs(got - want)).item(), scale = max(abs(want)).item();
  require(worst <= rel * std::max(scale, 1.0), what + ": differs by " + std::to_string(worst));
}

void init_world(const std::string& backend = "shm") {
  dist::init({.backend = backend, .timeout = std::chrono::seconds(30)});
}

// The optimizer under test, over given groups.
using Make = std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroupSpec>)>;

Make adam() {
  return [](std::vector<optim::ParamGroupSpec> g) {
    return std::make_unique<optim::Adam>(std::move(g), optim::AdamOptions{.lr = 1e-3, .weight_decay = 1e-4});
  };
}
Make sgd_momentum() {
  return [](std::vector<optim::ParamGroupSpec> g) {
    return std::make_unique<optim::SGD>(std::move(g), optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true});
  };
}
Make adamw() {
  return [](std::vector<optim::ParamGroupSpec> g) {
    return std::make_unique<optim::AdamW>(std::move(g), optim::AdamWOptions{.lr = 2e-3, .weight_decay = 0.05});
  };
}

// Weights at the optimizer's lr, biases (1-d) at 10x that without weight decay.
std::vector<optim::ParamGroupSpec> two_groups(const nn::Module& model, double lr) {
  std::vector<optim::ParamGroupSpec> groups(2);
  groups[1].lr = 10 * lr;
  groups[1].weight_decay = 0.0;
  for (const Variable& p : model.parameters()) groups[p.data().dim() == 1 ? 1 : 0].params.push_back(p);
  return groups;
}

// `steps` steps on this rank's slice of fixed global batches of 12 (steps first..first+steps-1);
// without DDP, on the whole batch.
void train(nn::Module& model, dist::DistributedDataParallel* ddp, optim::Optimizer& opt, int first, int steps,
           optim::LRScheduler* scheduler = nullptr) {
  const int64_t B = 12;
  const int rank = ddp ? dist::rank() : 0, world = ddp ? dist::world_size() : 1;
  for (int s = first; s < first + steps; ++s) {
    const Tensor x = rand({B, 1, 28, 28}, RandomKey{77, static_cast<uint64_t>(s)});
    const Tensor y = randint(0, 10, {B}, RandomKey{78, static_cast<uint64_t>(s)});
    const int64_t local = B / world;
    const Tensor xs = x.narrow(0, rank * local, local).contiguous(), ys = y.narrow(0, rank * local, local).contiguous();
    opt.zero_grad();
    cross_entropy(ddp ? ddp->forward(Variable(xs)) : model.forward(Variable(xs)), ys).backward();
    if (ddp) {
      ddp->step(opt);
    } else {
      opt.step();
    }
    if (scheduler) scheduler->step();
  }
}

std::unique_ptr<nn::Module> fresh_mlp() {
  manual_seed(0);
  return nn::make_model("mlp");
}

// adam() over the model's parameters under ddp: ZeRO-1 sharding ddp's gradients, or the plain one.
std::unique_ptr<optim::Optimizer> adam_under(dist::DistributedDataParallel& ddp, const nn::Module& model, bool zero,
                                             dist::ParameterGather gather = dist::ParameterGather::AtStep) {
  if (zero)
    return std::make_unique<dist::ZeroRedundancyOptimizer>(
        model.parameters(), adam(), dist::ZeroRedundancyOptimizerOptions{.ddp = &ddp, .gather = gather});
  return adam()(optim::single_group(model.parameters()));
}

// N ranks, 4 steps under DDP: ZeRO around `make` gives the parameters of `make` alone, bit for bit.
// sharded: DDP reduce-scatters for ZeRO (options.ddp); else DDP all-reduces and ZeRO takes the
// averaged gradients as they are.
void zero_matches_plain(int world, const Make& make, bool groups, const std::string& backend = "shm",
                        bool sharded = true, const dist::DDPOptions& ddp_options = {}) {
  dist::spawn(world, [&](int) {
    init_world(backend);
    auto plain_model = fresh_mlp();
    dist::DistributedDataParallel plain_ddp(*plain_model, ddp_options);
    auto plain = groups ? make(two_groups(*plain_model, 1e-3)) : make(optim::single_group(plain_model->parameters()));
    optim::StepLR plain_lr(*plain, /*step_size=*/2, /*gamma=*/0.5);
    train(*plain_model, &plain_ddp, *plain, 0, 4, &plain_lr);

    auto model = fresh_mlp();
    dist::DistributedDataParallel ddp(*model, ddp_options);
    const dist::ZeroRedundancyOptimizerOptions options{.ddp = sharded ? &ddp : nullptr};
    std::unique_ptr<dist::ZeroRedundancyOptimizer> zero =
        groups ? std::make_unique<dist::ZeroRedundancyOptimizer>(two_groups(*model, 1e-3), make, options)
               : std::make_unique<dist::ZeroRedundancyOptimizer>(model->parameters(), make, options);
    require(ddp.gradients_sharded() == sharded, "DDP reduce-scatters exactly when ZeRO is given it");
    require(ddp.num_buckets() >= (ddp_options.bucket_cap_mb < 1 ? 3u : 1u), "small caps make several buckets");
    optim::StepLR zero_lr(*zero, /*step_size=*/2, /*gamma=*/0.5);
    train(*model, &ddp, *zero, 0, 4, &zero_lr);

    require(zero->local_optimizer() != nullptr, "every rank owns a parameter of the MLP");
    require_identical(model->state_dict(), plain_model->state_dict(), "ZeRO vs plain, parameters");
    dist::shutdown();
  });
}

}  // namespace

TEST(ZeroRedundancyOptimizer, AdamTwoRanksBitIdenticalToPlainAdam) { zero_matches_plain(2, adam(), false); }
TEST(ZeroRedundancyOptimizer, AdamThreeRanksBitIdenticalToPlainAdam) { zero_matches_plain(3, adam(), false); }
TEST(ZeroRedundancyOptimizer, AdamThreeGlooRanksBitIdenticalToPlainAdam) {
  zero_matches_plain(3, adam(), false, "gloo");
}
TEST(ZeroRedundancyOptimizer, AdamThreeRanksOnAllReducedGradientsBitIdenticalToPlainAdam) {
  zero_matches_plain(3, adam(), false, "shm", /*sharded=*/false);
}
// Small buckets: several of them, each padded to a multiple of 3 and cut into 3 slabs, and
// parameters split at their slab boundaries.
TEST(ZeroRedundancyOptimizer, AdamWParamGroupsThreeRanksSmallBucketsBitIdenticalToPlainAdamW) {
  zero_matches_plain(3, adamw(), true, "shm", true, {.bucket_cap_mb = 0.1, .first_bucket_cap_mb = 0.001});
}
TEST(ZeroRedundancyOptimizer, SgdMomentumThreeRanksBitIdenticalToPlainSgd) {
  zero_matches_plain(3, sgd_momentum(), false);
}
TEST(ZeroRedundancyOptimizer, AdamWParamGroupsWithTheirOwnLrBitIdenticalToPlainAdamW) {
  zero_matches_plain(2, adamw(), true);
}

// After one step each rank's wrapped Adam holds the moments of its slab of the MLP's one DDP
// bucket — ceil(235146 / N) elements, fewer on the last rank — and a step count per piece; the
// slabs add up to the whole.
TEST(ZeroRedundancyOptimizer, EachRankHoldsOneNthOfTheAdamMoments) {
  for (int world : {2, 4}) {
    dist::spawn(world, [&](int rank) {
      init_world();
      auto model = fresh_mlp();
      dist::DistributedDataParallel ddp(*model);
      dist::ZeroRedundancyOptimizer zero(model->parameters(), adam(), {.ddp = &ddp});
      train(*model, &ddp, zero, 0, 1);
      require(ddp.num_buckets() == 1, "the MLP's gradients fit in DDP's first bucket");

      int64_t moments = 0, steps = 0, elements = 0;
      for (size_t j = 0; j < zero.local_pieces().size(); ++j) {
        elements += zero.local_pieces()[j].numel;
        for (const auto& [name, t] : zero.local_optimizer()->state(static_cast<int64_t>(j)))
          (name == "step" ? steps : moments) += t.numel() * static_cast<int64_t>(element_size(t.dtype()));
      }
      const int64_t total = 235146, slab = (total + world - 1) / world;
      const int64_t expected = rank < world - 1 ? slab : total - (world - 1) * slab;
      require(elements == expected, "rank " + std::to_string(rank) + " owns " + std::to_string(elements) +
                                        " elements, expected " + std::to_string(expected));
      require(moments == 2 * 4 * elements, "exp_avg and exp_avg_sq of float32: " + std::to_string(moments));
      require(steps == 8 * static_cast<int64_t>(zero.local_pieces().size()), "one 8-byte step per piece");
      Tensor sum = from_vector<double>({static_cast<double>(elements)}, {1});
      dist::all_reduce(sum, dist::ReduceOp::SUM);
      require(sum.item() == static_cast<double>(total), "the slabs add up to " + std::to_string(sum.item()));
      dist::shutdown();
    });
  }
}

// 3 steps on 2 ranks, the state consolidated on rank 0 and loaded into a plain Adam there, 3 more
// steps in one process: the same bits as when plain Adam ran the first 3 steps.
TEST(ZeroRedundancyOptimizer, StateDictFromTwoRanksLoadsIntoPlainAdamAndTrainingContinuesIdentically) {
  dist::spawn(2, [](int rank) {
    init_world();
    auto plain_model = fresh_mlp();
    dist::DistributedDataParallel plain_ddp(*plain_model);
    optim::Adam plain(plain_model->parameters(), {.lr = 1e-3, .weight_decay = 1e-4});
    train(*plain_model, &plain_ddp, plain, 0, 3);

    auto model = fresh_mlp();
    dist::DistributedDataParallel ddp(*model);
    dist::ZeroRedundancyOptimizer zero(model->parameters(), adam(), {.ddp = &ddp});
    train(*model, &ddp, zero, 0, 3);
    zero.consolidate_state_dict(0);
    bool refused = false;
    try {
      (void)zero.state_dict();
    } catch (const std::logic_error&) {
      refused = true;
    }
    require(refused == (rank != 0), "state_dict() only on the rank the state was consolidated on");
    if (rank == 0) {
      const TensorMap dict = zero.state_dict();
      require(dict.count("state.5.exp_avg_sq") == 1 && dict.count("param_groups.0.lr") == 1, "the unsharded layout");
      require_identical(dict, plain.state_dict(), "consolidated vs plain state_dict");

      auto a = fresh_mlp(), b = fresh_mlp();
      a->load_state_dict(plain_model->state_dict());
      b->load_state_dict(model->state_dict());
      optim::Adam continued_plain(a->parameters(), {.lr = 1e-3, .weight_decay = 1e-4});
      optim::Adam continued_zero(b->parameters(), {.lr = 1e-3, .weight_decay = 1e-4});
      continued_plain.load_state_dict(plain.state_dict());
      continued_zero.load_state_dict(dict);
      train(*a, nullptr, continued_plain, 3, 3);
      train(*b, nullptr, continued_zero, 3, 3);
      require_identical(b->state_dict(), a->state_dict(), "continued from ZeRO vs from plain");
    }
    dist::shutdown();
  });
}

// A plain Adam's state_dict (one process, 2 steps) loaded into ZeRO on 3 ranks, 2 more steps
// under DDP: the same bits as a plain Adam loaded with it.
TEST(ZeroRedundancyOptimizer, PlainStateDictLoadsIntoThreeRanks) {
  dist::spawn(3, [](int) {
    init_world();
    auto single = fresh_mlp();
    optim::Adam single_opt(single->parameters(), {.lr = 1e-3, .weight_decay = 1e-4});
    train(*single, nullptr, single_opt, 0, 2);
    const TensorMap opt_dict = single_opt.state_dict(), model_dict = single->state_dict();

    auto plain_model = fresh_mlp();
    plain_model->load_state_dict(model_dict);
    dist::DistributedDataParallel plain_ddp(*plain_model);
    optim::Adam plain(plain_model->parameters(), {.lr = 1e-3, .weight_decay = 1e-4});
    plain.load_state_dict(opt_dict);
    train(*plain_model, &plain_ddp, plain, 2, 2);

    auto model = fresh_mlp();
    model->load_state_dict(model_dict);
    dist::DistributedDataParallel ddp(*model);
    dist::ZeroRedundancyOptimizer zero(model->parameters(), adam(), {.ddp = &ddp});
    zero.load_state_dict(opt_dict);
    for (size_t j = 0; j < zero.local_pieces().size(); ++j) {
      const auto& piece = zero.local_pieces()[j];
      const Tensor whole = opt_dict.at("state." + std::to_string(piece.param) + ".exp_avg");
      require_identical(zero.local_optimizer()->state(static_cast<int64_t>(j)).at("exp_avg"),
                        whole.reshape({whole.numel()}).narrow(0, piece.offset, piece.numel), "loaded piece");
    }
    train(*model, &ddp, zero, 2, 2);
    require_identical(model->state_dict(), plain_model->state_dict(), "ZeRO vs plain after loading");

    // and back: the consolidated state equals the plain optimizer's
    zero.consolidate_state_dict(1);
    if (dist::rank() == 1) require_identical(zero.state_dict(), plain.state_dict(), "consolidated after loading");

    // a malformed dict is refused on every rank, naming the key
    TensorMap bad = opt_dict;
    bad["state.0.exp_avg"] = zeros({3});
    std::string message;
    try {
      zero.load_state_dict(bad);
    } catch (const std::invalid_argument& e) {
      message = e.what();
    }
    require(message.find("state.0.exp_avg") != std::string::npos, "refused naming the key: '" + message + "'");
    dist::shutdown();
  });
}

TEST(ZeroRedundancyOptimizer, AParameterOutsideTheDdpModuleIsNamed) {
  dist::spawn(2, [](int) {
    init_world();
    auto model = fresh_mlp();
    dist::DistributedDataParallel ddp(*model);
    std::vector<Variable> params = model->parameters();
    params.push_back(Variable(zeros({7, 5}), /*requires_grad=*/true));
    std::string message;
    try {
      dist::ZeroRedundancyOptimizer zero(params, adam(), {.module = model.get()});
    } catch (const std::invalid_argument& e) {
      message = e.what();
    }
    require(message ==
                "ZeroRedundancyOptimizer(Adam): param group 0, parameter 6 (float32[7, 5]) is not a parameter "
                "of the module (its gradient would not be averaged)",
            "got '" + message + "'");
    dist::shutdown();
  });
}

TEST(ZeroRedundancyOptimizer, TheParametersMustBeThoseTheDdpReduces) {
  dist::spawn(2, [](int) {
    init_world();
    auto model = fresh_mlp();
    dist::DistributedDataParallel ddp(*model);
    auto message_for = [&](std::vector<Variable> params) {
      try {
        dist::ZeroRedundancyOptimizer zero(std::move(params), adam(), {.ddp = &ddp});
      } catch (const std::invalid_argument& e) {
        return std::string(e.what());
      }
      return std::string();
    };
    std::vector<Variable> params = model->parameters();
    params.push_back(Variable(zeros({7, 5}), /*requires_grad=*/true));
    const std::string outside = message_for(params);
    require(outside ==
                "ZeroRedundancyOptimizer(Adam): param group 0, parameter 6 (float32[7, 5]) is not a "
                "parameter that the DDP reduces",
            "one outside: got '" + outside + "'");
    params.pop_back();
    params.erase(params.begin());
    const std::string missing = message_for(params);
    require(missing.find("DDP reduces a parameter (float32[256, 784]) that this optimizer does not hold") !=
                std::string::npos,
            "one missing: got '" + missing + "'");
    require(!ddp.gradients_sharded(), "a refused optimizer leaves DDP all-reducing");
    dist::shutdown();
  });
}

TEST(ZeroRedundancyOptimizer, RanksPassingDifferentParametersAreNamed) {
  dist::spawn(3, [](int rank) {
    init_world();
    auto model = fresh_mlp();
    std::vector<Variable> params = model->parameters();
    if (rank == 2) params.pop_back();
    std::string message;
    try {
      dist::ZeroRedundancyOptimizer zero(params, adam());
    } catch (const std::invalid_argument& e) {
      message = e.what();
    }
    require(message ==
                "ZeroRedundancyOptimizer(Adam): the ranks pass different parameters: rank 0 has param group 0, "
                "parameter 5 (float32[10]), rank 2 has 1 param groups",
            "got '" + message + "'");
    dist::shutdown();
  });
}

TEST(ZeroRedundancyOptimizer, ZeroGradClearsEveryParametersGradient) {
  dist::spawn(2, [](int) {
    init_world();
    auto model = fresh_mlp();
    dist::DistributedDataParallel ddp(*model);
    dist::ZeroRedundancyOptimizer zero(model->parameters(), sgd_momentum(), {.ddp = &ddp});
    require(zero.has_momentum() && zero.num_params() == 6, "the wrapped SGD's momentum, 6 parameters");
    train(*model, &ddp, zero, 0, 1);
    cross_entropy(ddp.forward(Variable(rand({6, 1, 28, 28}, RandomKey{1, 2}))), randint(0, 10, {6}, RandomKey{3, 4}))
        .backward();
    ddp.finish();
    zero.zero_grad(/*set_to_none=*/false);
    for (const Variable& p : model->parameters())
      for (double g : p.grad().to_vector<double>()) require(g == 0.0, "zero-filled gradient");
    zero.zero_grad();
    for (const Variable& p : model->parameters()) require(!p.grad().defined(), "no gradient");
    dist::shutdown();
  });
}

// Parameters of 3, 5 and 2 elements on 4 ranks, without DDP: 10 elements padded to 12, a slab of
// 3 per rank — rank 0 p0[0:3], rank 1 p1[0:3], rank 2 p1[3:5] and p2[0:1], rank 3 p2[1:2] — so
// p1 and p2 are each split over two ranks. One SGD step of lr 0.5 on gradient 1: every element
// 1 - 0.5 on every rank, after the all-gather.
TEST(ZeroRedundancyOptimizer, EqualSlabsSplitParameters) {
  dist::spawn(4, [](int rank) {
    init_world();
    std::vector<Variable> params = {Variable(ones({3}), true), Variable(ones({5}), true), Variable(ones({2}), true)};
    dist::ZeroRedundancyOptimizer zero(params, [](std::vector<optim::ParamGroupSpec> g) {
      return std::make_unique<optim::SGD>(std::move(g), optim::SGDOptions{.lr = 0.5});
    });
    using Piece = dist::ZeroRedundancyOptimizer::Piece;
    const std::vector<std::vector<Piece>> expected = {{{0, 0, 3}}, {{1, 0, 3}}, {{1, 3, 2}, {2, 0, 1}}, {{2, 1, 1}}};
    require(zero.local_pieces() == expected[static_cast<size_t>(rank)], "this rank's pieces");
    require(zero.local_optimizer()->num_params() == static_cast<int64_t>(expected[static_cast<size_t>(rank)].size()),
            "the wrapped SGD holds one parameter per piece");
    for (Variable& p : params) p.set_grad(ones(p.data().shape()));
    zero.step();
    for (const Variable& p : params)
      for (double v : p.data().to_vector<double>()) require(v == 0.5, "updated and gathered: 0.5");
    dist::shutdown();
  });
}

// Under ZeRO, DDP reduce-scatters its buckets: only this rank's slab of .grad is the average.
// join() without the optimizer's step is refused then (a joined rank must shadow its all-gather).
TEST(ZeroRedundancyOptimizer, DdpReduceScattersOnlyThisRanksSlabAndRefusesJoinWithoutTheOptimizer) {
  dist::spawn(2, [](int rank) {
    init_world();
    auto model = fresh_mlp();
    dist::DistributedDataParallel ddp(*model);
    dist::ZeroRedundancyOptimizer zero(model->parameters(), sgd_momentum(), {.ddp = &ddp});
    const auto layout = ddp.bucket_layout();
    require(layout.size() == 1 && layout[0].numel == 235146, "one bucket, an even length already");
    // each rank's batch is its rank + 1 everywhere: gradients differ, and their average is known
    auto model_local = fresh_mlp();
    const Tensor x = full({4, 1, 28, 28}, static_cast<double>(rank + 1));
    const Tensor y = randint(0, 10, {4}, RandomKey{5, 6});
    cross_entropy(model_local->forward(Variable(x)), y).backward();  // this rank's own gradient
    std::vector<Tensor> own;
    for (const Variable& p : model_local->parameters()) own.push_back(p.grad().reshape({p.grad().numel()}));
    {
      auto m = fresh_mlp();  // the other rank's gradient, from its batch
      cross_entropy(m->forward(Variable(full({4, 1, 28, 28}, static_cast<double>(2 - rank)))), y).backward();
      std::vector<Tensor> theirs;
      for (const Variable& p : m->parameters()) theirs.push_back(p.grad().reshape({p.grad().numel()}));
      cross_entropy(ddp.forward(Variable(x)), y).backward();
      const auto params = model->parameters();
      const int64_t half = 235146 / 2;
      for (const auto& [p, offset] : layout[0].params) {
        size_t i = 0;
        while (!params[i].is_same(p)) ++i;
        const Tensor g = p.grad().reshape({p.grad().numel()});
        for (int64_t e = 0; e < g.numel(); e += 997) {
          const bool mine = (offset + e) / half == rank;
          const double a = own[i].narrow(0, e, 1).item(), b = theirs[i].narrow(0, e, 1).item();
          const double want = mine ? static_cast<double>(static_cast<float>((a + b) / 2)) : a;
          require(g.narrow(0, e, 1).item() == want, "element " + std::to_string(e) + " of a gradient");
        }
      }
    }
    std::string err;
    try {
      ddp.join();
    } catch (const std::logic_error& e) {
      err = e.what();
    }
    require(err.find("pass the optimizer: dist::Join join(ddp, optimizer)") != std::string::npos,
            "join() without the optimizer refused under ZeRO: got '" + err + "'");
    dist::shutdown();
  });
}

// GradScaler drives ZeRO as it drives the plain optimizer: 3 steps with loss scaling, an inf
// written into rank 1's averaged gradient at the second (a rank-local hook); with
// sync_grad_scaler both ranks skip that step and back off 1024 -> 512, the others step, and the
// parameters stay bit-identical to plain Adam's.
TEST(ZeroRedundancyOptimizer, GradScalerSkipsAndStepsAsWithThePlainOptimizer) {
  dist::spawn(2, [](int rank) {
    init_world();
    auto run = [&](bool zero) {
      auto model = fresh_mlp();
      dist::DistributedDataParallel ddp(*model);
      std::unique_ptr<optim::Optimizer> opt = adam_under(ddp, *model, zero);
      optim::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 2});
      dist::sync_grad_scaler(scaler);
      std::vector<bool> stepped;
      for (int s = 0; s < 3; ++s) {
        const Tensor x = rand({6, 1, 28, 28}, RandomKey{90, static_cast<uint64_t>(2 * s + rank)});
        const Tensor y = randint(0, 10, {6}, RandomKey{91, static_cast<uint64_t>(2 * s + rank)});
        opt->zero_grad();
        scaler.scale(cross_entropy(ddp.forward(Variable(x)), y)).backward();
        ddp.finish();
        if (s == 1 && rank == 1) model->parameters()[0].grad().data<float>()[0] = INFINITY;
        stepped.push_back(scaler.step(*opt));
        scaler.update();
      }
      require(stepped == std::vector<bool>{true, false, true}, "stepped, skipped, stepped");
      require(scaler.get_scale() == 512.0, "backed off to 512, got " + std::to_string(scaler.get_scale()));
      return model->state_dict();
    };
    require_identical(run(true), run(false), "ZeRO vs plain under GradScaler");
    dist::shutdown();
  });
}

// clip_grad_norm under ZeRO sees the averaged gradients, as optim::clip_grad_norm does without
// it: 3 ranks (the MLP's slabs split parameters), 2 steps of Adam, each clipped to 0.05 (the
// MLP's gradient norms here are 3x (max) to 10x (2-norm) that, so every step clips). The infinity norm is a max,
// the same whatever the order: the norms and the parameters are bit-identical. The 2-norm sums
// the slabs' squares in another order than the parameters': the norms agree to 1e-12 and the
// parameters to float rounding. optim::clip_grad_norm over .grad under ZeRO would see this rank's
// own gradient outside its slabs: the first check shows its 2-norm differs.
namespace {
void clip_matches_plain(double norm_type, dist::ParameterGather gather = dist::ParameterGather::AtStep) {
  dist::spawn(3, [&](int rank) {
    init_world();
    auto run = [&](bool zero, std::vector<double>& norms) {
      auto model = fresh_mlp();
      dist::DistributedDataParallel ddp(*model);
      const std::unique_ptr<optim::Optimizer> owned = adam_under(ddp, *model, zero, gather);
      optim::Optimizer& opt = *owned;
      auto* zopt = zero ? static_cast<dist::ZeroRedundancyOptimizer*>(owned.get()) : nullptr;
      for (int s = 0; s < 2; ++s) {
        const Tensor x = rand({4, 1, 28, 28}, RandomKey{95, static_cast<uint64_t>(3 * s + rank)});
        const Tensor y = randint(0, 10, {4}, RandomKey{96, static_cast<uint64_t>(3 * s + rank)});
        opt.zero_grad();
        cross_entropy(ddp.forward(Variable(x)), y).backward();
        ddp.finish();
        if (zero && s == 0) {
          std::vector<Variable> params = model->parameters();
          const double local_view = optim::clip_grad_norm(params, 1e30, norm_type);  // no clipping: the norm only
          norms.push_back(local_view);
        }
        norms.push_back(zero ? zopt->clip_grad_norm(0.05, norm_type)
                             : optim::clip_grad_norm(model->parameters(), 0.05, norm_type));
        opt.step();
      }
      if (zopt) zopt->wait_for_parameters();
      return model->state_dict();
    };
    std::vector<double> zn, pn;
    const TensorMap z = run(true, zn), p = run(false, pn);
    require(zn.size() == 3 && pn.size() == 2, "three norms with ZeRO, two without");
    require(pn[0] > 0.1 && pn[1] > 0.1, "every step clips: norm " + std::to_string(pn[0]));
    if (!std::isinf(norm_type)) {  // a max can land in this rank's own slab and agree by chance
      require(std::abs(zn[0] - pn[0]) > 1e-6 * pn[0], "optim::clip_grad_norm over .grad differs under ZeRO");
    }
    for (int s = 0; s < 2; ++s) {
      const double got = zn[static_cast<size_t>(s) + 1], want = pn[static_cast<size_t>(s)];
      if (std::isinf(norm_type)) {
        require(got == want, "step " + std::to_string(s) + ": max norm " + std::to_string(got) + " vs " +
                                 std::to_string(want));
      } else {
        require(std::abs(got - want) <= 1e-12 * want, "step " + std::to_string(s) + ": norm " +
                                                           std::to_string(got) + " vs " + std::to_string(want));
      }
    }
    if (std::isinf(norm_type)) {
      require_identical(z, p, "ZeRO vs plain, clipped by the max norm");
    } else {
      for (const auto& [key, t] : p) require_close(z.at(key), t, 1e-6, key + ": ZeRO vs plain");
    }
    dist::shutdown();
  });
}
}  // namespace

TEST(ZeroRedundancyOptimizer, ClipGradNormOverTheSlabsEqualsThePlainOneForTheMaxNorm) { clip_matches_plain(INFINITY); }
TEST(ZeroRedundancyOptimizer, ClipGradNormOverTheSlabsEqualsThePlainOneForTheTwoNorm) { clip_matches_plain(2.0); }
TEST(ZeroRedundancyOptimizer, ClipGradNormEqualsThePlainOneWithTheGatherBeforeUse) {
  clip_matches_plain(INFINITY, dist::ParameterGather::BeforeUse);
}

// Uneven inputs under ZeRO: dist::Join(ddp, optimizer). Ranks 0, 1, 2 have batches[r] batches
// of 4 samples. A joined rank contributes zero gradients (the average still divides by the world
// size, as PyTorch's Join) and shadows the optimizer's step: it updates its own slabs and takes
// part in the all-gather. So step b of every rank is one step of the plain optimizer on the union
// of the samples present, with the loss scaled by their count / 12 — and the model and the
// (consolidated) momentum buffers at the end are those of that single-process run on every rank.
// A rank with no batch at all never had a gradient: its slabs are still updated.
namespace {
void join_takes_every_step(const std::array<int, 3>& batches,
                           dist::ParameterGather gather = dist::ParameterGather::AtStep) {
  const int steps = *std::max_element(batches.begin(), batches.end());
  auto batch_x = [](int r, int b) { return rand({4, 1, 28, 28}, RandomKey{90, static_cast<uint64_t>(10 * b + r)}); };
  auto batch_y = [](int r, int b) { return randint(0, 10, {4}, RandomKey{91, static_cast<uint64_t>(10 * b + r)}); };
  dist::spawn(3, [&](int rank) {
    init_world();
    auto ref = fresh_mlp();
    auto ref_opt = sgd_momentum()(optim::single_group(ref->parameters()));
    for (int b = 0; b < steps; ++b) {
      std::vector<Tensor> xs, ys;
      for (int r = 0; r < 3; ++r)
        if (b < batches[static_cast<size_t>(r)]) {
          xs.push_back(batch_x(r, b));
          ys.push_back(batch_y(r, b));
        }
      const Tensor x = cat(xs, 0), y = cat(ys, 0);
      ref_opt->zero_grad();
      mul(cross_entropy(ref->forward(Variable(x)), y), static_cast<double>(x.size(0)) / 12.0).backward();
      ref_opt->step();
    }

    auto model = fresh_mlp();
    dist::DistributedDataParallel ddp(*model);
    dist::ZeroRedundancyOptimizer opt(model->parameters(), sgd_momentum(), {.ddp = &ddp, .gather = gather});
    {
      dist::Join join(ddp, opt);
      for (int b = 0; b < batches[static_cast<size_t>(rank)]; ++b) {
        opt.zero_grad();
        cross_entropy(ddp.forward(Variable(batch_x(rank, b))), batch_y(rank, b)).backward();
        ddp.step(opt);
        if (b == 0) {  // the norm's all-reduce could not be shadowed: refused inside the scope
          std::string err;
          try {
            opt.clip_grad_norm(1.0);
          } catch (const std::logic_error& e) {
            err = e.what();
          }
          require(err.find("clip_grad_norm inside a dist::Join scope") != std::string::npos,
                  "clip_grad_norm refused in Join: got '" + err + "'");
        }
      }
    }
    const TensorMap want = ref->state_dict(), got = model->state_dict();
    for (const auto& [key, t] : want)
      require_close(got.at(key), t, 1e-5, "rank " + std::to_string(rank) + " " + key + " against the single process");
    opt.consolidate_state_dict(0);
    if (rank == 0) {
      const TensorMap want_state = ref_opt->state_dict(), got_state = opt.state_dict();
      int buffers = 0;
      for (const auto& [key, t] : want_state) {
        if (key.find("momentum_buffer") == std::string::npos) continue;
        ++buffers;
        require_close(got_state.at(key), t, 1e-5, key + " (momentum) against the single process");
      }
      require(buffers == 6, "the MLP's 6 momentum buffers compared, got " + std::to_string(buffers));
    }
    dist::shutdown();
  });
}
}  // namespace

TEST(ZeroRedundancyOptimizer, JoinWithTheOptimizerLetsRanksWithUnevenBatchesTakeEveryStep) {
  join_takes_every_step({2, 4, 3});
}
TEST(ZeroRedundancyOptimizer, JoinWithTheOptimizerUpdatesTheSlabsOfARankWithNoBatch) { join_takes_every_step({0, 3, 2}); }
// With the gather before use, the scope's end waits for the last all-gather: the model read right
// after it is whole.
TEST(ZeroRedundancyOptimizer, JoinWithTheGatherBeforeUseTakesEveryStepAndLeavesTheModelWhole) {
  join_takes_every_step({2, 4, 3}, dist::ParameterGather::BeforeUse);
}

TEST(ZeroRedundancyOptimizer, JoinRefusesAnOptimizerThatDoesNotShardThisDdp) {
  dist::spawn(2, [](int) {
    init_world();
    auto model = fresh_mlp();
    dist::DistributedDataParallel ddp(*model);
    dist::ZeroRedundancyOptimizer opt(model->parameters(), sgd_momentum());  // no .ddp
    std::string err;
    try {
      dist::Join join(ddp, opt);
    } catch (const std::invalid_argument& e) {
      err = e.what();
    }
    require(err.find("does not shard this DistributedDataParallel's gradients") != std::string::npos,
            "got '" + err + "'");
    dist::shutdown();
  });
}

// ---- the all-gather before use (ParameterGather::BeforeUse) ----
// step() starts the all-gathers and the next forward's pre-hooks wait for each bucket before the
// first module that uses it; every other reader waits first (wait_for_parameters()).
namespace {

std::unique_ptr<nn::Module> fresh(const std::string& name) {
  manual_seed(0);
  return nn::make_model(name);
}

// Small caps: the MLP's parameters fall into three buckets of two parameters each, and its 784x256
// weight is split over its bucket's slabs.
const dist::DDPOptions kSmallBuckets{.bucket_cap_mb = 0.1, .first_bucket_cap_mb = 0.001};

// N ranks, 4 steps of `make` under DDP with small buckets, three ways in the same ranks: the plain
// optimizer, ZeRO gathering at step, ZeRO gathering before use. The optimizer state (consolidated
// on rank 0 right after the last step) and the parameters (whole once the consolidation waited)
// are bit-identical.
void gathers_match_plain(int world, const Make& make, const std::string& model_name,
                         const std::string& backend = "shm") {
  dist::spawn(world, [&](int rank) {
    init_world(backend);
    auto plain_model = fresh(model_name);
    dist::DistributedDataParallel plain_ddp(*plain_model, kSmallBuckets);
    auto plain = make(optim::single_group(plain_model->parameters()));
    train(*plain_model, &plain_ddp, *plain, 0, 4);

    std::vector<TensorMap> states;
    for (const dist::ParameterGather gather : {dist::ParameterGather::AtStep, dist::ParameterGather::BeforeUse}) {
      auto model = fresh(model_name);
      dist::DistributedDataParallel ddp(*model, kSmallBuckets);
      dist::ZeroRedundancyOptimizer zero(model->parameters(), make, {.ddp = &ddp, .gather = gather});
      require(ddp.num_buckets() >= 3, "several buckets: " + std::to_string(ddp.num_buckets()));
      if (model_name == "cnn") {  // hooks on the modules with parameters only: the fused runs stay fused
        const nn::Sequential& features = static_cast<nn::CNN&>(*model).features;
        require(features[1].has_forward_pre_hooks() == (gather == dist::ParameterGather::BeforeUse) &&
                    !features[2].has_forward_pre_hooks(),
                "a hook on BatchNorm2d (with the gather before use), none on ReLU");
      }
      train(*model, &ddp, zero, 0, 4);
      zero.consolidate_state_dict(0);  // right after the step: it waits for the all-gathers itself
      const std::string what = gather == dist::ParameterGather::AtStep ? "gather at step" : "gather before use";
      require_identical(model->state_dict(), plain_model->state_dict(), what + " vs plain, parameters");
      if (rank == 0) {
        states.push_back(zero.state_dict());
        require_identical(states.back(), plain->state_dict(), what + " vs plain, optimizer state");
      }
    }
    if (rank == 0) require_identical(states[1], states[0], "before use vs at step, optimizer state");
    dist::shutdown();
  });
}

// The ranks' group, except that all_gather_into_tensor_async runs nothing until its Work is
// waited for (and then runs the collective, blocking): a read that does not wait sees the
// parameters of before the step, every time. With `fail`, that wait throws instead.
class GatherAtWaitGroup : public dist::ProcessGroup {
 public:
  explicit GatherAtWaitGroup(dist::ProcessGroup& inner, bool fail = false)
      : ProcessGroup(inner.rank(), inner.size()), inner_(inner), fail_(fail) {}
  std::string backend_name() const override { return "gather-at-wait(" + inner_.backend_name() + ")"; }
  std::shared_ptr<dist::Work> all_reduce_async(Tensor& t, dist::ReduceOp op) override {
    return inner_.all_reduce_async(t, op);
  }
  std::shared_ptr<dist::Work> broadcast_async(Tensor& t, int root) override { return inner_.broadcast_async(t, root); }
  std::shared_ptr<dist::Work> all_gather_async(const Tensor& t, std::vector<Tensor>& out) override {
    return inner_.all_gather_async(t, out);
  }
  std::shared_ptr<dist::Work> reduce_scatter_async(const Tensor& input, Tensor& out, dist::ReduceOp op) override {
    return inner_.reduce_scatter_async(input, out, op);
  }
  std::shared_ptr<dist::Work> barrier_async() override { return inner_.barrier_async(); }
  Tensor empty_symmetric(const Shape& shape, DType dtype, Device device) override {
    return inner_.empty_symmetric(shape, dtype, device);
  }
  std::shared_ptr<dist::Work> all_gather_into_tensor_async(Tensor& out, const Tensor& input) override {
    ++started;
    return std::make_shared<AtWait>(*this, out, input);
  }
  int started = 0;  // all-gathers started
  int run = 0;  // and run (waited for)

 private:
  struct AtWait : dist::Work {
    AtWait(GatherAtWaitGroup& g, Tensor out, Tensor input) : g(g), out(std::move(out)), input(std::move(input)) {}
    void wait() override {
      if (done) return;
      if (g.fail_) throw std::runtime_error("all_gather_into_tensor #" + std::to_string(g.run) + ": injected failure");
      g.inner_.all_gather_into_tensor(out, input);
      ++g.run;
      done = true;
    }
    bool is_completed() override { return done; }
    GatherAtWaitGroup& g;
    Tensor out, input;
    bool done = false;
  };
  dist::ProcessGroup& inner_;
  bool fail_;
};

}  // namespace

TEST(ZeroRedundancyOptimizer, GatherBeforeUseSgdMomentumTwoRanksBitIdenticalToGatherAtStepAndPlain) {
  gathers_match_plain(2, sgd_momentum(), "mlp");
}
TEST(ZeroRedundancyOptimizer, GatherBeforeUseAdamWThreeRanksBitIdenticalToGatherAtStepAndPlain) {
  gathers_match_plain(3, adamw(), "mlp");
}
TEST(ZeroRedundancyOptimizer, GatherBeforeUseSgdMomentumThreeRanksBitIdenticalToGatherAtStepAndPlain) {
  gathers_match_plain(3, sgd_momentum(), "mlp");
}
// Over Gloo an all_gather_into_tensor copies the gathered rows into the buffer at its wait().
TEST(ZeroRedundancyOptimizer, GatherBeforeUseAdamWThreeGlooRanksBitIdenticalToGatherAtStepAndPlain) {
  gathers_match_plain(3, adamw(), "mlp", "gloo");
}
// The CNN: fused BatchNorm runs in its Sequentials (their first child hooked), and buffers.
TEST(ZeroRedundancyOptimizer, GatherBeforeUseAdamWTwoRanksCnnBitIdenticalToGatherAtStepAndPlain) {
  gathers_match_plain(2, adamw(), "cnn");
}

// Over a group whose all-gathers run only when waited for: right after step() the parameters
// outside this rank's slabs are still the old ones; each forward's loss is plain DDP's, bit for
// bit (its pre-hooks waited for every bucket it read), and wait_for_parameters() makes the
// parameters plain DDP's. Without the waits the losses of steps 1 and 2 would differ.
TEST(ZeroRedundancyOptimizer, GatherBeforeUseWaitsInTheForwardAndInWaitForParameters) {
  dist::spawn(2, [](int) {
    init_world();
    auto losses = [](dist::DistributedDataParallel& ddp, optim::Optimizer& opt,
                     const std::function<void(int)>& after_step) {
      std::vector<double> out;
      for (int s = 0; s < 3; ++s) {
        const Tensor x = rand({6, 1, 28, 28}, RandomKey{60, static_cast<uint64_t>(2 * s + dist::rank())});
        const Tensor y = randint(0, 10, {6}, RandomKey{61, static_cast<uint64_t>(2 * s + dist::rank())});
        opt.zero_grad();
        Variable loss = cross_entropy(ddp.forward(Variable(x)), y);
        out.push_back(loss.item());
        loss.backward();
        ddp.step(opt);
        after_step(s);
      }
      return out;
    };
    auto plain_model = fresh("mlp");
    dist::DistributedDataParallel plain_ddp(*plain_model, kSmallBuckets);
    auto plain = sgd_momentum()(optim::single_group(plain_model->parameters()));
    std::vector<TensorMap> plain_after;  // the parameters after each step (copies)
    const std::vector<double> want = losses(plain_ddp, *plain, [&](int) {
      TensorMap copy;
      for (const auto& [k, t] : plain_model->state_dict()) copy[k] = t.clone();
      plain_after.push_back(copy);
    });

    GatherAtWaitGroup group(dist::default_group());
    auto model = fresh("mlp");
    dist::DistributedDataParallel ddp(*model, kSmallBuckets);
    dist::ZeroRedundancyOptimizer zero(model->parameters(), sgd_momentum(),
                                       {.group = &group, .ddp = &ddp, .gather = dist::ParameterGather::BeforeUse});
    const int buckets = static_cast<int>(ddp.num_buckets());
    const std::vector<double> got = losses(ddp, zero, [&](int s) {
      require(group.started == buckets * (s + 1), "step " + std::to_string(s) + " started every bucket's all-gather");
      require(group.run == buckets * s, "and ran none of them yet");
      bool stale = false;
      for (const auto& [k, t] : model->state_dict()) {
        const Tensor a = t.contiguous(), b = plain_after[static_cast<size_t>(s)].at(k).contiguous();
        stale = stale || std::memcmp(a.raw_data(), b.raw_data(), static_cast<size_t>(a.numel()) * 4) != 0;
      }
      require(stale, "before any wait some parameter is not yet the step's");
    });
    require(got == want, "every forward read whole parameters: losses " + std::to_string(got[1]) + ", " +
                             std::to_string(got[2]) + " vs " + std::to_string(want[1]) + ", " + std::to_string(want[2]));
    zero.wait_for_parameters();
    require(group.run == 3 * buckets, "every all-gather ran");
    require_identical(model->state_dict(), plain_model->state_dict(), "after wait_for_parameters()");
    dist::shutdown();
  });
}

// The destructor waits for the all-gathers still pending: over the group that runs them only
// when waited for, destroying the optimizer right after step() runs every one of them.
TEST(ZeroRedundancyOptimizer, GatherBeforeUseDestructorWaitsForThePendingAllGathers) {
  dist::spawn(2, [](int) {
    init_world();
    GatherAtWaitGroup group(dist::default_group());
    auto model = fresh("mlp");
    dist::DistributedDataParallel ddp(*model, kSmallBuckets);
    auto zero = std::make_unique<dist::ZeroRedundancyOptimizer>(
        model->parameters(), sgd_momentum(),
        dist::ZeroRedundancyOptimizerOptions{.group = &group, .ddp = &ddp, .gather = dist::ParameterGather::BeforeUse});
    cross_entropy(ddp.forward(Variable(rand({6, 1, 28, 28}, RandomKey{1, 2}))), randint(0, 10, {6}, RandomKey{3, 4}))
        .backward();
    ddp.step(*zero);
    const int buckets = static_cast<int>(ddp.num_buckets());
    require(group.started == buckets && group.run == 0, "started, none run");
    zero.reset();
    require(group.run == buckets, "the destructor ran every pending all-gather: " + std::to_string(group.run));
    dist::shutdown();
  });
}

// A failed all-gather surfaces from the wait that meets it — the forward's pre-hook, then
// wait_for_parameters() and the next step() — naming the optimizer, the bucket and the
// collective; it is never swallowed.
TEST(ZeroRedundancyOptimizer, GatherBeforeUseRethrowsAFailedAllGatherFromEveryWait) {
  dist::spawn(2, [](int) {
    init_world();
    GatherAtWaitGroup group(dist::default_group(), /*fail=*/true);
    auto model = fresh("mlp");
    dist::DistributedDataParallel ddp(*model, kSmallBuckets);
    dist::ZeroRedundancyOptimizer zero(model->parameters(), sgd_momentum(),
                                       {.group = &group, .ddp = &ddp, .gather = dist::ParameterGather::BeforeUse});
    cross_entropy(ddp.forward(Variable(rand({6, 1, 28, 28}, RandomKey{1, 2}))), randint(0, 10, {6}, RandomKey{3, 4}))
        .backward();
    ddp.step(zero);  // starts the all-gathers: nothing has failed yet
    auto message_of = [](const std::function<void()>& f) {
      try {
        f();
      } catch (const std::runtime_error& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    };
    const std::string in_forward = message_of([&] { (void)ddp.forward(Variable(rand({6, 1, 28, 28}, RandomKey{1, 3}))); });
    require(in_forward.find("ZeroRedundancyOptimizer(SGD): the all-gather of the parameters of bucket ") == 0 &&
                in_forward.find("(all_gather_into_tensor) failed: all_gather_into_tensor #0: injected failure") !=
                    std::string::npos,
            "the forward's wait: got '" + in_forward + "'");
    require(message_of([&] { zero.wait_for_parameters(); }) == in_forward, "wait_for_parameters() throws it again");
    require(message_of([&] { zero.step(); }) == in_forward, "and so does the next step()");
    dist::shutdown();
  });
}

TEST(ZeroRedundancyOptimizer, GatherBeforeUseNeedsTheModel) {
  dist::spawn(2, [](int) {
    init_world();
    auto model = fresh("mlp");
    std::string message;
    try {
      dist::ZeroRedundancyOptimizer zero(model->parameters(), adam(), {.gather = dist::ParameterGather::BeforeUse});
    } catch (const std::invalid_argument& e) {
      message = e.what();
    }
    require(message == "ZeroRedundancyOptimizer(Adam): ParameterGather::BeforeUse waits in the model's forward: give "
                       "the optimizer the model (.ddp or .module)",
            "got '" + message + "'");
    // with .module (gradients averaged by the caller) it is accepted
    dist::ZeroRedundancyOptimizer zero(model->parameters(), adam(),
                                       {.module = model.get(), .gather = dist::ParameterGather::BeforeUse});
    dist::shutdown();
  });
}
