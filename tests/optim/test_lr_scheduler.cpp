// tests/optim/test_lr_scheduler.cpp — LR scheduler behaviour beyond the PyTorch curves
// (test_optim_golden.cpp): every param group is scheduled from its own initial lr, state_dict
// round trip, warm-up without a following schedule, and errors for bad options and state.
#include <memory>

#include "minidl/autograd/variable.h"
#include "minidl/optim/optim_all.h"
#include "tests/common/testing.h"

namespace minidl::optim {
namespace {

struct Scheduler : ::testing::Test {
  Variable a{zeros({2}), true};
  Variable b{zeros({3}), true};
  SGD sgd{std::vector<ParamGroupSpec>{{.params = {a}}, {.params = {b}, .lr = 0.01}}, SGDOptions{.lr = 0.1}};
};

TEST_F(Scheduler, EveryParamGroupFollowsTheScheduleFromItsOwnInitialLr) {
  StepLR sched(sgd, /*step_size=*/2, /*gamma=*/0.5);
  for (int e = 0; e < 3; ++e) sched.step();  // epoch 3: one decay
  EXPECT_EQ(sched.last_epoch(), 3);
  EXPECT_DOUBLE_EQ(sgd.param_groups()[0].lr, 0.05);
  EXPECT_DOUBLE_EQ(sgd.param_groups()[1].lr, 0.005);
  EXPECT_THAT(sched.get_last_lr(), ::testing::ElementsAre(::testing::DoubleEq(0.05), ::testing::DoubleEq(0.005)));
  EXPECT_EQ(*sgd.param_groups()[0].initial_lr, 0.1);
  EXPECT_EQ(*sgd.param_groups()[1].initial_lr, 0.01);
}

TEST_F(Scheduler, ConstructionSetsEpochZeroLr) {
  LinearWarmup sched(sgd, /*warmup_steps=*/4, /*start_factor=*/0.25);
  EXPECT_EQ(sched.last_epoch(), 0);
  EXPECT_DOUBLE_EQ(sgd.param_groups()[0].lr, 0.025);
  EXPECT_DOUBLE_EQ(sgd.param_groups()[1].lr, 0.0025);
}

TEST_F(Scheduler, WarmupWithoutAFollowingScheduleStaysAtTheBaseLr) {
  LinearWarmup sched(sgd, /*warmup_steps=*/2, /*start_factor=*/0.5);
  std::vector<double> lrs;
  for (int e = 0; e < 5; ++e) {
    lrs.push_back(sched.get_last_lr()[0]);
    sched.step();
  }
  using ::testing::DoubleEq;
  EXPECT_THAT(lrs,
              ::testing::ElementsAre(DoubleEq(0.05), DoubleEq(0.075), DoubleEq(0.1), DoubleEq(0.1), DoubleEq(0.1)));
}

TEST_F(Scheduler, StateDictRoundTripResumesTheSchedule) {
  CosineAnnealingLR sched(sgd, /*T_max=*/10, /*eta_min=*/0.001);
  for (int e = 0; e < 4; ++e) sched.step();
  const TensorMap sd = sched.state_dict();
  EXPECT_EQ(sd.at("last_epoch").item(), 4.0);
  EXPECT_EQ(sd.at("base_lrs.1").item(), 0.01);

  Variable c(zeros({2}), true), d(zeros({3}), true);
  SGD other({{.params = {c}}, {.params = {d}, .lr = 0.01}}, {.lr = 0.1});
  CosineAnnealingLR resumed(other, /*T_max=*/10, /*eta_min=*/0.001);
  resumed.load_state_dict(sd);
  EXPECT_EQ(resumed.last_epoch(), 4);
  EXPECT_EQ(other.param_groups()[0].lr, sgd.param_groups()[0].lr);
  for (int e = 0; e < 3; ++e) {
    sched.step();
    resumed.step();
    EXPECT_EQ(resumed.get_last_lr(), sched.get_last_lr());
  }
}

TEST_F(Scheduler, BadStateDictNamesTheKey) {
  StepLR sched(sgd, /*step_size=*/2);
  TensorMap sd = sched.state_dict();
  TensorMap missing = sd, extra = sd, negative = sd;
  missing.erase("base_lrs.1");
  extra["base_lrs.2"] = scalar_tensor(0.1, DType::Float64);
  negative["last_epoch"] = scalar_tensor(-3.0, DType::Float64);
  EXPECT_THROW_MSG(sched.load_state_dict(missing), std::invalid_argument, "missing key 'base_lrs.1'");
  EXPECT_THROW_MSG(sched.load_state_dict(extra), std::invalid_argument, "unexpected key 'base_lrs.2'");
  EXPECT_THROW_MSG(sched.load_state_dict(negative), std::invalid_argument, "key 'last_epoch'");
}

TEST_F(Scheduler, BadOptionsThrow) {
  EXPECT_THROW_MSG(StepLR(sgd, /*step_size=*/0), std::invalid_argument, "StepLR: step_size must be >= 1");
  EXPECT_THROW_MSG(CosineAnnealingLR(sgd, /*T_max=*/0), std::invalid_argument, "T_max must be >= 1");
  EXPECT_THROW_MSG(LinearWarmup(sgd, /*warmup_steps=*/0), std::invalid_argument, "warmup_steps must be >= 1");
  EXPECT_THROW_MSG(LinearWarmup(sgd, /*warmup_steps=*/2, /*start_factor=*/0.0), std::invalid_argument,
                   "start_factor must be in (0, 1]");
  Variable c(zeros({1}), true);
  SGD other({c}, {.lr = 0.1});
  EXPECT_THROW_MSG(
      LinearWarmup(sgd, /*warmup_steps=*/2, /*start_factor=*/0.5, std::make_unique<StepLR>(other, /*step_size=*/1)),
      std::invalid_argument, "schedules another optimizer");
}

TEST_F(Scheduler, OptimizerStateDictCarriesInitialLr) {
  StepLR sched(sgd, /*step_size=*/1, /*gamma=*/0.5);
  sched.step();
  const TensorMap sd = sgd.state_dict();
  EXPECT_EQ(sd.at("param_groups.0.initial_lr").item(), 0.1);
  EXPECT_EQ(sd.at("param_groups.0.lr").item(), 0.05);
}

}  // namespace
}  // namespace minidl::optim
