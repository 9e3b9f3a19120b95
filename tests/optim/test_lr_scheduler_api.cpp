// tests/optim/test_lr_scheduler_api.cpp — LinearLR, SequentialLR, OneCycleLR and ReduceLROnPlateau
// against PyTorch's lr sequences (tests/optim/sched_golden.safetensors, written by
// tests/optim/make_sched_golden.py), and their errors for bad options.
#include <cmath>
#include <memory>

#include "minidl/autograd/variable.h"
#include "minidl/optim/optim_all.h"
#include "minidl/tensor/serialize.h"
#include "tests/common/testing.h"

namespace minidl::optim {
namespace {

const SafetensorsFile& golden() {
  static const SafetensorsFile f = load(std::string(MINIDL_SOURCE_DIR) + "/tests/optim/sched_golden.safetensors");
  return f;
}
std::vector<double> seq(const std::string& key) { return golden().tensors.at(key).to_vector<double>(); }

struct Sched : ::testing::Test {
  Variable p{zeros({3}), true};
  SGD sgd{{p}, SGDOptions{.lr = 0.1, .momentum = 0.9}};

  // the lr after 0, 1, ... steps of `sched` equals PyTorch's sequence NAME/lr
  void expect_sequence(LRScheduler& sched, const std::string& name) {
    const auto want = seq(name + "/lr");
    ASSERT_GT(want.size(), 1u);
    for (size_t k = 0; k < want.size(); ++k) {
      if (k > 0) sched.step();
      EXPECT_NEAR(sgd.param_groups()[0].lr, want[k], 1e-12 + 1e-12 * want[k]) << name << " after " << k << " steps";
    }
  }
};

TEST_F(Sched, LinearLRMatchesPyTorch) {
  LinearLR sched(sgd, /*start_factor=*/0.25, /*end_factor=*/0.8, /*total_iters=*/6);
  expect_sequence(sched, "linear");
}

TEST_F(Sched, LinearLRDecayMatchesPyTorch) {
  LinearLR sched(sgd, /*start_factor=*/1.0, /*end_factor=*/0.1, /*total_iters=*/4);
  expect_sequence(sched, "linear_decay");
}

TEST_F(Sched, SequentialLinearThenCosineMatchesPyTorch) {
  std::vector<std::unique_ptr<LRScheduler>> s;
  s.push_back(std::make_unique<LinearLR>(sgd, /*start_factor=*/0.1, /*end_factor=*/1.0, /*total_iters=*/4));
  s.push_back(std::make_unique<CosineAnnealingLR>(sgd, /*T_max=*/10));
  SequentialLR sched(sgd, std::move(s), {4});
  expect_sequence(sched, "sequential_linear_cosine");
}

TEST_F(Sched, SequentialOfThreeMatchesPyTorch) {
  std::vector<std::unique_ptr<LRScheduler>> s;
  s.push_back(std::make_unique<LinearLR>(sgd, /*start_factor=*/0.5, /*end_factor=*/1.0, /*total_iters=*/3));
  s.push_back(std::make_unique<StepLR>(sgd, /*step_size=*/3, /*gamma=*/0.5));
  s.push_back(std::make_unique<MultiStepLR>(sgd, std::vector<int64_t>{2, 4}, /*gamma=*/0.3));
  SequentialLR sched(sgd, std::move(s), {3, 10});
  expect_sequence(sched, "sequential_three");
}

TEST_F(Sched, OneCycleCosineMatchesPyTorch) {
  OneCycleLR sched(sgd, {.max_lr = 0.5, .total_steps = 20, .cycle_momentum = false});
  EXPECT_DOUBLE_EQ(*sgd.param_groups()[0].initial_lr, 0.5 / 25);
  expect_sequence(sched, "onecycle_cos");
  EXPECT_THROW_MSG(sched.step(), std::invalid_argument,
                   "tried to step 21 times; the specified number of total steps is 20");
}

TEST_F(Sched, OneCycleLinearThreePhaseMatchesPyTorch) {
  OneCycleLR sched(sgd, {.max_lr = 1.0,
                         .total_steps = 25,
                         .pct_start = 0.2,
                         .cos_anneal = false,
                         .div_factor = 10,
                         .final_div_factor = 100,
                         .three_phase = true,
                         .cycle_momentum = false});
  expect_sequence(sched, "onecycle_linear_three_phase");
  EXPECT_FALSE(sgd.param_groups()[0].momentum.has_value());
}

// lr and momentum after 0, 1, ... steps against PyTorch's NAME/lr and NAME/momentum
void expect_lr_and_momentum(Optimizer& opt, LRScheduler& sched, const std::string& name) {
  const auto lr = seq(name + "/lr"), momentum = seq(name + "/momentum");
  ASSERT_EQ(lr.size(), momentum.size());
  for (size_t k = 0; k < lr.size(); ++k) {
    if (k > 0) sched.step();
    const ParamGroup& g = opt.param_groups()[0];
    EXPECT_NEAR(g.lr, lr[k], 1e-12 + 1e-12 * lr[k]) << name << " lr after " << k << " steps";
    ASSERT_TRUE(g.momentum.has_value());
    EXPECT_NEAR(*g.momentum, momentum[k], 1e-12) << name << " momentum after " << k << " steps";
  }
}

TEST_F(Sched, OneCycleCyclesSgdMomentumAsPyTorch) {
  OneCycleLR sched(sgd, {.max_lr = 0.5, .total_steps = 20});
  expect_lr_and_momentum(sgd, sched, "onecycle_momentum_sgd");
  // the state_dict carries the group's momentum, and a load restores it
  const TensorMap saved = sgd.state_dict();
  ASSERT_TRUE(saved.count("param_groups.0.momentum"));
  Variable q{zeros({3}), true};
  SGD again{{q}, SGDOptions{.lr = 0.1, .momentum = 0.9}};
  again.load_state_dict(saved);
  EXPECT_DOUBLE_EQ(*again.param_groups()[0].momentum, *sgd.param_groups()[0].momentum);
  SGD plain{{q}, SGDOptions{.lr = 0.1}};
  EXPECT_THROW_MSG(plain.load_state_dict(saved), std::invalid_argument, "SGD here has no momentum to set");
}

TEST_F(Sched, OneCycleCyclesAdamBeta1ThreePhaseLinearAsPyTorch) {
  Adam adam{{p}, AdamOptions{.lr = 0.1, .beta2 = 0.99}};
  OneCycleLR sched(adam, {.max_lr = 1.0,
                          .total_steps = 25,
                          .pct_start = 0.2,
                          .cos_anneal = false,
                          .three_phase = true,
                          .base_momentum = 0.8,
                          .max_momentum = 0.9});
  expect_lr_and_momentum(adam, sched, "onecycle_momentum_adam_three_phase");
}

// The cycled momentum is the one the update uses: SGD steps with the group's momentum set to m
// give the same parameters as an SGD built with momentum m.
TEST_F(Sched, TheGroupMomentumIsTheOneSgdUses) {
  Variable a{from_vector<float>({1.0f, -2.0f, 0.5f}, {3}), true}, b{from_vector<float>({1.0f, -2.0f, 0.5f}, {3}), true};
  SGD cycled{{a}, SGDOptions{.lr = 0.1, .momentum = 0.9}}, fixed{{b}, SGDOptions{.lr = 0.1, .momentum = 0.6}};
  cycled.param_groups()[0].momentum = 0.6;
  for (int s = 0; s < 3; ++s) {
    a.set_grad(from_vector<float>({0.3f, 0.1f * s, -1.0f}, {3}));
    b.set_grad(from_vector<float>({0.3f, 0.1f * s, -1.0f}, {3}));
    cycled.step();
    fixed.step();
  }
  minidl::testing::expect_close(a.data(), b.data(), 0, 0, "SGD with group momentum 0.6 vs SGD(momentum 0.6)");
  Variable c{from_vector<float>({1.0f, -2.0f, 0.5f}, {3}), true};
  SGD other{{c}, SGDOptions{.lr = 0.1, .momentum = 0.9}};
  for (int s = 0; s < 3; ++s) {
    c.set_grad(from_vector<float>({0.3f, 0.1f * s, -1.0f}, {3}));
    other.step();
  }
  EXPECT_GT(std::abs(c.data().to_vector<float>()[0] - a.data().to_vector<float>()[0]), 1e-3)
      << "momentum had no effect";
}

void expect_plateau(SGD& sgd, ReduceLROnPlateau& sched, const std::string& name) {
  const auto metric = seq(name + "/metric"), want = seq(name + "/lr");
  ASSERT_EQ(want.size(), metric.size() + 1);
  EXPECT_DOUBLE_EQ(sgd.param_groups()[0].lr, want[0]);
  for (size_t k = 0; k < metric.size(); ++k) {
    sched.step(metric[k]);
    EXPECT_NEAR(sgd.param_groups()[0].lr, want[k + 1], 1e-15) << name << " after metric " << k;
  }
}

TEST_F(Sched, ReduceLROnPlateauMinRelativeWithCooldownMatchesPyTorch) {
  ReduceLROnPlateau sched(sgd, {.factor = 0.5, .patience = 2, .threshold = 0.05, .cooldown = 1, .min_lr = 0.02});
  expect_plateau(sgd, sched, "plateau_min_rel");
}

TEST_F(Sched, ReduceLROnPlateauMaxAbsoluteMatchesPyTorch) {
  ReduceLROnPlateau sched(sgd,
                          {.mode_max = true, .factor = 0.3, .patience = 1, .threshold = 0.02, .threshold_abs = true});
  expect_plateau(sgd, sched, "plateau_max_abs");
}

// Stop after `split` metrics, keep only the two state_dicts (through a safetensors file, as a
// checkpoint would), rebuild optimizer and scheduler, and continue: the rest of PyTorch's
// sequence must follow. A fresh scheduler over the loaded optimizer alone must not (so the
// split point carries state that matters).
TEST_F(Sched, ReduceLROnPlateauResumesFromItsStateDict) {
  const auto metric = seq("plateau_min_rel/metric"), want = seq("plateau_min_rel/lr");
  const ReduceLROnPlateauOptions opts{.factor = 0.5, .patience = 2, .threshold = 0.05, .cooldown = 1, .min_lr = 0.02};
  size_t split = 0;
  TensorMap opt_state, sched_state;
  {
    ReduceLROnPlateau sched(sgd, opts);
    while (split < metric.size() && !(split > 2 && (sched.num_bad_epochs() > 0))) sched.step(metric[split++]);
    ASSERT_LT(split, metric.size()) << "no split point with pending bad epochs in the sequence";
    const std::string path = ::testing::TempDir() + "/plateau_state.safetensors";
    save(sched.state_dict(), path);
    sched_state = load(path).tensors;
    opt_state = sgd.state_dict();
  }
  auto continue_from = [&](bool load_scheduler) {
    Variable q{zeros({3}), true};
    SGD again{{q}, SGDOptions{.lr = 0.7, .momentum = 0.9}};
    again.load_state_dict(opt_state);
    ReduceLROnPlateau sched(again, opts);
    if (load_scheduler) sched.load_state_dict(sched_state);
    bool all_equal = true;
    for (size_t k = split; k < metric.size(); ++k) {
      sched.step(metric[k]);
      if (load_scheduler) {
        EXPECT_NEAR(again.param_groups()[0].lr, want[k + 1], 1e-15) << "after metric " << k;
      }
      all_equal = all_equal && std::abs(again.param_groups()[0].lr - want[k + 1]) <= 1e-15;
    }
    return all_equal;
  };
  EXPECT_TRUE(continue_from(true));
  EXPECT_FALSE(continue_from(false)) << "the sequence does not depend on the scheduler's state after metric " << split;

  ReduceLROnPlateau sched(sgd, opts);
  TensorMap bad = sched_state;
  bad.erase("cooldown_counter");
  EXPECT_THROW_MSG(sched.load_state_dict(bad), std::invalid_argument, "missing key 'cooldown_counter'");
  bad = sched_state;
  bad["num_bad_epochs"] = scalar_tensor(-1.0, DType::Float64);
  EXPECT_THROW_MSG(sched.load_state_dict(bad), std::invalid_argument, "key 'num_bad_epochs': invalid value");
  bad = sched_state;
  bad["patience"] = scalar_tensor(3.0, DType::Float64);
  EXPECT_THROW_MSG(sched.load_state_dict(bad), std::invalid_argument, "unexpected key 'patience'");
  EXPECT_EQ(sched.num_bad_epochs(), 0);  // unchanged by the failed loads
}

TEST_F(Sched, BadOptionsNameTheProblem) {
  EXPECT_THROW_MSG(LinearLR(sgd, /*start_factor=*/0.0), std::invalid_argument, "start_factor must be in (0, 1]");
  EXPECT_THROW_MSG(LinearLR(sgd, /*start_factor=*/0.5, /*end_factor=*/1.0, /*total_iters=*/0), std::invalid_argument,
                   "total_iters must be >= 1");
  EXPECT_THROW_MSG(OneCycleLR(sgd, {.total_steps = 0}), std::invalid_argument, "total_steps must be >= 1");
  SGD no_momentum{{p}, SGDOptions{.lr = 0.1}};
  EXPECT_THROW_MSG(OneCycleLR(no_momentum, {.total_steps = 5}), std::invalid_argument,
                   "cycle_momentum needs an optimizer with a momentum (SGD here has none");
  EXPECT_THROW_MSG(OneCycleLR(sgd, {.total_steps = 5, .max_momentum = 1.0}), std::invalid_argument,
                   "base_momentum and max_momentum must be in [0, 1)");
  EXPECT_THROW_MSG(ReduceLROnPlateau(sgd, {.factor = 1.0}), std::invalid_argument, "factor must be in [0, 1)");
  std::vector<std::unique_ptr<LRScheduler>> s;
  s.push_back(std::make_unique<LinearLR>(sgd));
  s.push_back(std::make_unique<StepLR>(sgd, /*step_size=*/1));
  EXPECT_THROW_MSG(SequentialLR(sgd, std::move(s), {}), std::invalid_argument,
                   "expected 1 milestones for 2 schedulers");
  Variable q{zeros({1}), true};
  SGD other{{q}, SGDOptions{.lr = 0.1}};
  std::vector<std::unique_ptr<LRScheduler>> t;
  t.push_back(std::make_unique<StepLR>(other, /*step_size=*/1));
  EXPECT_THROW_MSG(SequentialLR(sgd, std::move(t), {}), std::invalid_argument,
                   "scheduler 0 schedules another optimizer");
}

}  // namespace
}  // namespace minidl::optim
