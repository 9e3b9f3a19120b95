// tests/optim/test_optim_golden.cpp — SGD, Adam, AdamW, the LR schedulers and clip_grad_norm
// against PyTorch. The fixture tests/optim/optim_golden.safetensors is written by
// tests/optim/make_optim_golden.py (python3-torch): the same initial parameters and the same 10
// gradients go through each optimizer, and the parameters after every step are compared; the
// hyperparameters below repeat those of the script.
#include <functional>
#include <memory>

#include "minidl/autograd/variable.h"
#include "minidl/optim/optim_all.h"
#include "tests/common/testing.h"

namespace minidl::optim {
namespace {

using minidl::testing::expect_close;

const TensorMap& golden() {
  static const TensorMap tensors =
      load(std::string(MINIDL_SOURCE_DIR) + "/tests/optim/optim_golden.safetensors").tensors;
  return tensors;
}

Tensor G(const std::string& key) {
  auto it = golden().find(key);
  if (it == golden().end()) throw std::runtime_error("optim_golden.safetensors has no tensor '" + key + "'");
  return it->second;
}

constexpr int kSteps = 10;
// float32 parameters after 10 steps: agreement to a few float ulps
constexpr double kRtol = 1e-6;
constexpr double kAtol = 1e-7;

using MakeOptimizer = std::function<std::unique_ptr<Optimizer>(const std::vector<Variable>&)>;

// Feeds the golden gradients to the optimizer `make` builds and compares after every step.
void expect_matches_pytorch(const std::string& name, const MakeOptimizer& make) {
  std::vector<Variable> params = {Variable(G("params/p0").clone(), true), Variable(G("params/p1").clone(), true)};
  std::unique_ptr<Optimizer> opt = make(params);
  for (int k = 1; k <= kSteps; ++k) {
    opt->zero_grad();
    for (size_t i = 0; i < params.size(); ++i)
      params[i].set_grad(G("grads/" + std::to_string(k) + "/p" + std::to_string(i)).clone());
    opt->step();
    for (size_t i = 0; i < params.size(); ++i) {
      const std::string key = name + "/" + std::to_string(k) + "/p" + std::to_string(i);
      expect_close(params[i].data(), G(key), kRtol, kAtol, key);
    }
  }
}

TEST(OptimGolden, SgdWithoutMomentumMatchesPyTorch) {
  expect_matches_pytorch("sgd_plain", [](const auto& ps) { return std::make_unique<SGD>(ps, SGDOptions{.lr = 0.1}); });
}

TEST(OptimGolden, SgdMomentumDampeningWeightDecayMatchesPyTorch) {
  expect_matches_pytorch("sgd_momentum", [](const auto& ps) {
    return std::make_unique<SGD>(ps, SGDOptions{.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 5e-4});
  });
}

TEST(OptimGolden, SgdNesterovMatchesPyTorch) {
  expect_matches_pytorch("sgd_nesterov", [](const auto& ps) {
    return std::make_unique<SGD>(ps, SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 5e-4, .nesterov = true});
  });
}

TEST(OptimGolden, SgdParamGroupsWithTheirOwnLrAndWeightDecayMatchPyTorch) {
  expect_matches_pytorch("sgd_groups", [](const auto& ps) {
    return std::make_unique<SGD>(
        std::vector<ParamGroupSpec>{{.params = {ps[0]}, .weight_decay = 1e-2}, {.params = {ps[1]}, .lr = 0.01}},
        SGDOptions{.lr = 0.1, .momentum = 0.9});
  });
}

TEST(OptimGolden, AdamMatchesPyTorch) {
  expect_matches_pytorch("adam", [](const auto& ps) { return std::make_unique<Adam>(ps, AdamOptions{.lr = 1e-2}); });
}

TEST(OptimGolden, AdamWithL2WeightDecayAndOtherBetasMatchesPyTorch) {
  expect_matches_pytorch("adam_wd", [](const auto& ps) {
    return std::make_unique<Adam>(
        ps, AdamOptions{.lr = 1e-2, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 1e-2});
  });
}

TEST(OptimGolden, AdamAmsgradMatchesPyTorch) {
  expect_matches_pytorch("adam_amsgrad", [](const auto& ps) {
    return std::make_unique<Adam>(ps, AdamOptions{.lr = 1e-2, .amsgrad = true});
  });
}

TEST(OptimGolden, AdamWMatchesPyTorch) {
  // weight_decay left at AdamW's default, 1e-2
  expect_matches_pytorch("adamw", [](const auto& ps) { return std::make_unique<AdamW>(ps, AdamWOptions{.lr = 1e-2}); });
}

TEST(OptimGolden, AdamWAmsgradMatchesPyTorch) {
  expect_matches_pytorch("adamw_amsgrad", [](const auto& ps) {
    return std::make_unique<AdamW>(ps, AdamWOptions{.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true});
  });
}

// ---- LR schedulers: the lr after 0..29 steps, base lr 0.1 ----

using MakeScheduler = std::function<std::unique_ptr<LRScheduler>(Optimizer&)>;

void expect_lr_curve(const std::string& name, const MakeScheduler& make) {
  Variable p(zeros({1}), true);
  SGD sgd({p}, {.lr = 0.1});
  std::unique_ptr<LRScheduler> sched = make(sgd);
  const Tensor expected = G("sched/" + name);
  std::vector<double> lrs;
  for (int64_t e = 0; e < expected.numel(); ++e) {
    lrs.push_back(sched->get_last_lr().at(0));
    EXPECT_EQ(sgd.param_groups()[0].lr, lrs.back()) << "the scheduler writes the group's lr";
    sched->step();
  }
  expect_close(from_vector(lrs), expected, 1e-12, 1e-15, "sched/" + name);
}

TEST(SchedulerGolden, StepLRTimesPoint3Every5EpochsMatchesPyTorch) {
  expect_lr_curve("step", [](Optimizer& o) { return std::make_unique<StepLR>(o, /*step_size=*/5, /*gamma=*/0.3); });
}

TEST(SchedulerGolden, MultiStepLRMatchesPyTorch) {
  expect_lr_curve("multistep", [](Optimizer& o) {
    return std::make_unique<MultiStepLR>(o, std::vector<int64_t>{15, 8, 25}, /*gamma=*/0.1);  // any order
  });
}

TEST(SchedulerGolden, CosineAnnealingLRMatchesPyTorchAlsoPastTMax) {
  expect_lr_curve("cosine",
                  [](Optimizer& o) { return std::make_unique<CosineAnnealingLR>(o, /*T_max=*/20, /*eta_min=*/1e-3); });
}

TEST(SchedulerGolden, LinearWarmupThenCosineMatchesPyTorchSequentialLR) {
  expect_lr_curve("warmup_cosine", [](Optimizer& o) {
    return std::make_unique<LinearWarmup>(o, /*warmup_steps=*/5, /*start_factor=*/0.1,
                                          std::make_unique<CosineAnnealingLR>(o, /*T_max=*/25, /*eta_min=*/0.0));
  });
}

TEST(SchedulerGolden, LinearWarmupThenStepLRMatchesPyTorchSequentialLR) {
  expect_lr_curve("warmup_step", [](Optimizer& o) {
    return std::make_unique<LinearWarmup>(o, /*warmup_steps=*/3, /*start_factor=*/0.25,
                                          std::make_unique<StepLR>(o, /*step_size=*/5, /*gamma=*/0.3));
  });
}

// ---- clip_grad_norm ----

void expect_clip_matches(const std::string& name, double max_norm, double norm_type) {
  std::vector<Variable> params;
  for (int i = 0; i < 2; ++i) {
    const Tensor g = G("clip/grads/p" + std::to_string(i));
    params.emplace_back(zeros_like(g), true);
    params.back().set_grad(g.clone());
  }
  const double total = clip_grad_norm(params, max_norm, norm_type);
  EXPECT_NEAR(total, G("clip/" + name + "/total_norm").item(), 1e-6 * total) << name;
  for (int i = 0; i < 2; ++i) {
    const std::string key = "clip/" + name + "/p" + std::to_string(i);
    expect_close(params[i].grad(), G(key), 1e-6, 1e-7, key);
  }
}

TEST(ClipGradGolden, L2NormClipsLikePyTorch) { expect_clip_matches("l2", 1.0, 2.0); }
TEST(ClipGradGolden, L2NormBelowMaxLeavesGradientsUnchanged) { expect_clip_matches("l2_noclip", 100.0, 2.0); }
TEST(ClipGradGolden, L1NormClipsLikePyTorch) { expect_clip_matches("l1", 3.0, 1.0); }
TEST(ClipGradGolden, InfNormClipsLikePyTorch) {
  expect_clip_matches("linf", 0.5, std::numeric_limits<double>::infinity());
}

}  // namespace
}  // namespace minidl::optim
