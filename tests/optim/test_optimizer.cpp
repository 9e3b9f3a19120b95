// tests/optim/test_optimizer.cpp — optimizer behaviour: param groups, parameters without a
// gradient, zero_grad, state_dict round trip (save, load into a fresh optimizer, continue ==
// uninterrupted), errors for bad state dicts and bad options, and the fused update kernels
// against the same update composed from tensor ops, at any thread count.
#include <cmath>
#include <memory>

#include "minidl/autograd/variable.h"
#include "minidl/kernels/cpu/parallel.h"
#include "minidl/optim/optim_all.h"
#include "minidl/tensor/ops.h"
#include "tests/common/testing.h"

namespace minidl::optim {
namespace {

using minidl::testing::expect_close;
using minidl::testing::expect_equal;

// A deterministic, step-dependent gradient for parameter i (no RNG needed).
Tensor fake_grad(const Shape& shape, int step, int i) {
  Tensor g = empty(shape);
  float* d = g.data<float>();
  for (int64_t j = 0; j < g.numel(); ++j) d[j] = std::sin(0.7f * j + 1.3f * step + 0.5f * i) * (1.0f + 0.1f * step);
  return g;
}

std::vector<Variable> make_params() {
  return {Variable(from_vector<float>({0.5f, -1.0f, 2.0f, 0.25f, -0.75f, 1.5f}, {2, 3}), true),
          Variable(from_vector<float>({0.1f, -0.2f, 0.3f}), true)};
}

void set_grads(std::vector<Variable>& params, int step) {
  for (size_t i = 0; i < params.size(); ++i)
    params[i].set_grad(fake_grad(params[i].shape(), step, static_cast<int>(i)));
}

// ---------------------------------------------------------------- groups and skipping

TEST(Optimizer, EachParamGroupUsesItsOwnLrAndWeightDecay) {
  Variable a(from_vector<float>({1.0f}), true), b(from_vector<float>({1.0f}), true);
  SGD sgd({{.params = {a}}, {.params = {b}, .lr = 0.01, .weight_decay = 0.5}}, {.lr = 0.1});
  a.set_grad(from_vector<float>({1.0f}));
  b.set_grad(from_vector<float>({1.0f}));
  sgd.step();
  EXPECT_FLOAT_EQ(a.data().item(), 0.9f);  // 1 - 0.1 * 1
  EXPECT_FLOAT_EQ(b.data().item(), 1.0f - 0.01f * 1.5f);  // 1 - 0.01 * (1 + 0.5 * 1)
  ASSERT_EQ(sgd.param_groups().size(), 2u);
  EXPECT_EQ(sgd.param_groups()[0].lr, 0.1);
  EXPECT_EQ(sgd.param_groups()[0].weight_decay, 0.0);
  EXPECT_EQ(sgd.param_groups()[1].lr, 0.01);
  EXPECT_EQ(sgd.param_groups()[1].weight_decay, 0.5);
}

TEST(Optimizer, NoWeightDecayGroupForNormsAndBiasesWithAdamW) {
  Variable weight(from_vector<float>({2.0f}), true), bias(from_vector<float>({2.0f}), true);
  AdamW adamw({{.params = {weight}}, {.params = {bias}, .weight_decay = 0.0}}, {.lr = 0.1, .weight_decay = 0.5});
  weight.set_grad(from_vector<float>({0.0f}));  // zero gradient: only the decay moves the weight
  bias.set_grad(from_vector<float>({0.0f}));
  adamw.step();
  EXPECT_FLOAT_EQ(weight.data().item(), 2.0f * (1.0f - 0.1f * 0.5f));
  EXPECT_FLOAT_EQ(bias.data().item(), 2.0f);
}

TEST(Optimizer, ParametersWithoutGradAreSkipped) {
  for (int kind = 0; kind < 2; ++kind) {
    std::vector<Variable> ps = make_params();
    std::unique_ptr<Optimizer> opt;
    if (kind == 0)
      opt = std::make_unique<SGD>(ps, SGDOptions{.lr = 0.1, .momentum = 0.9});
    else
      opt = std::make_unique<Adam>(ps, AdamOptions{.lr = 0.1});
    const Tensor before = ps[1].data().clone();
    ps[0].set_grad(fake_grad(ps[0].shape(), 1, 0));  // ps[1] has no grad
    opt->step();
    expect_equal(ps[1].data(), before, opt->name() + ": untouched without a grad");
    EXPECT_FALSE(opt->state(0).empty());
    EXPECT_TRUE(opt->state(1).empty()) << opt->name() << ": no state for a parameter never updated";
    const TensorMap sd = opt->state_dict();
    for (const auto& [key, t] : sd) EXPECT_NE(key.rfind("state.1.", 0), 0u) << key;
  }
}

TEST(Optimizer, ZeroGradSetsToNoneOrFillsZeros) {
  std::vector<Variable> ps = make_params();
  SGD sgd(ps, {.lr = 0.1});
  set_grads(ps, 1);
  sgd.zero_grad(/*set_to_none=*/false);
  expect_equal(ps[0].grad(), zeros({2, 3}));
  sgd.zero_grad();
  EXPECT_FALSE(ps[0].grad().defined());
  EXPECT_FALSE(ps[1].grad().defined());
}

TEST(Optimizer, StepUpdatesTheParameterStorageInPlace) {
  std::vector<Variable> ps = make_params();
  const Tensor alias = ps[0].data();  // shares the storage
  SGD sgd(ps, {.lr = 0.5});
  set_grads(ps, 1);
  sgd.step();
  expect_equal(alias, ps[0].data());
  EXPECT_TRUE(alias.is_same(ps[0].data()));
}

TEST(Optimizer, StepRecordsNoGraph) {
  std::vector<Variable> ps = make_params();
  Adam adam(ps, {.lr = 0.1});
  set_grads(ps, 1);
  adam.step();
  EXPECT_TRUE(ps[0].is_leaf());
  EXPECT_TRUE(ps[0].requires_grad());
  EXPECT_TRUE(is_grad_enabled()) << "grad mode restored after step";
}

TEST(Optimizer, Float64ParametersAreUpdatedInDouble) {
  Variable p(from_vector<double>({1.0, 2.0}), true);
  SGD sgd({p}, {.lr = 0.1, .momentum = 0.5});
  p.set_grad(from_vector<double>({1.0, -1.0}));
  sgd.step();  // buf = g; p = p - 0.1 g
  sgd.step();  // buf = 0.5 g + g; p -= 0.1 * 1.5 g
  expect_equal(p.data(), from_vector<double>({1.0 - 0.1 - 0.15, 2.0 + 0.1 + 0.15}));
}

// ---------------------------------------------------------------- state_dict

using Make = std::function<std::unique_ptr<Optimizer>(const std::vector<Variable>&)>;

// Runs 6 steps straight, and 3 steps + state_dict -> bytes -> fresh optimizer + load + 3 steps:
// the parameters must be bit-identical.
void expect_resume_is_exact(const Make& make) {
  std::vector<Variable> straight = make_params();
  auto opt = make(straight);
  for (int s = 1; s <= 6; ++s) {
    set_grads(straight, s);
    opt->step();
  }

  std::vector<Variable> first = make_params();
  auto opt1 = make(first);
  for (int s = 1; s <= 3; ++s) {
    set_grads(first, s);
    opt1->step();
  }
  // through the safetensors bytes, as a checkpoint would go
  const SafetensorsFile saved = deserialize(serialize(opt1->state_dict()));
  std::vector<Variable> resumed = make_params();
  for (size_t i = 0; i < resumed.size(); ++i) resumed[i].data().copy_(first[i].data());
  auto opt2 = make(resumed);
  opt2->param_groups()[0].lr = 99.0;  // the saved lr must win
  opt2->load_state_dict(saved.tensors);
  for (int s = 4; s <= 6; ++s) {
    set_grads(resumed, s);
    opt2->step();
  }
  for (size_t i = 0; i < resumed.size(); ++i)
    expect_equal(resumed[i].data(), straight[i].data(), opt->name() + " param " + std::to_string(i));
}

TEST(OptimizerStateDict, SgdMomentumResumesExactly) {
  expect_resume_is_exact([](const auto& ps) {
    return std::make_unique<SGD>(ps, SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-3});
  });
}
TEST(OptimizerStateDict, SgdNesterovResumesExactly) {
  expect_resume_is_exact([](const auto& ps) {
    return std::make_unique<SGD>(ps, SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
  });
}
TEST(OptimizerStateDict, AdamAmsgradResumesExactly) {
  expect_resume_is_exact([](const auto& ps) {
    return std::make_unique<Adam>(ps, AdamOptions{.lr = 0.05, .weight_decay = 1e-2, .amsgrad = true});
  });
}
TEST(OptimizerStateDict, AdamWResumesExactly) {
  expect_resume_is_exact([](const auto& ps) { return std::make_unique<AdamW>(ps, AdamWOptions{.lr = 0.05}); });
}

TEST(OptimizerStateDict, AdamKeysAndValuesFollowPyTorchNames) {
  std::vector<Variable> ps = make_params();
  Adam adam(ps, {.lr = 0.01, .amsgrad = true});
  set_grads(ps, 1);
  adam.step();
  adam.step();
  const TensorMap sd = adam.state_dict();
  std::vector<std::string> keys;
  for (const auto& [k, t] : sd) keys.push_back(k);
  EXPECT_THAT(
      keys, ::testing::ElementsAre("param_groups.0.lr", "param_groups.0.num_params", "param_groups.0.weight_decay",
                                   "state.0.exp_avg", "state.0.exp_avg_sq", "state.0.max_exp_avg_sq", "state.0.step",
                                   "state.1.exp_avg", "state.1.exp_avg_sq", "state.1.max_exp_avg_sq", "state.1.step"));
  EXPECT_EQ(sd.at("state.0.step").item(), 2.0);
  EXPECT_EQ(sd.at("state.0.step").dim(), 0);
  EXPECT_EQ(sd.at("param_groups.0.lr").dtype(), DType::Float64);
  EXPECT_EQ(sd.at("param_groups.0.lr").item(), 0.01);
  EXPECT_EQ(sd.at("param_groups.0.num_params").item(), 2.0);
  EXPECT_EQ(sd.at("state.1.exp_avg").shape(), Shape({3}));
}

TEST(OptimizerStateDict, StateDictIsACopy) {
  std::vector<Variable> ps = make_params();
  SGD sgd(ps, {.lr = 0.1, .momentum = 0.9});
  set_grads(ps, 1);
  sgd.step();
  const TensorMap sd = sgd.state_dict();
  const Tensor saved = sd.at("state.0.momentum_buffer").clone();
  sgd.step();
  expect_equal(sd.at("state.0.momentum_buffer"), saved);
}

// A valid SGD-with-momentum state dict for make_params(), to be spoiled by each error test.
TensorMap sgd_state_dict() {
  std::vector<Variable> ps = make_params();
  SGD sgd(ps, {.lr = 0.1, .momentum = 0.9});
  set_grads(ps, 1);
  sgd.step();
  return sgd.state_dict();
}

struct BadStateDict : ::testing::Test {
  std::vector<Variable> ps = make_params();
  SGD sgd{ps, {.lr = 0.1, .momentum = 0.9}};
  TensorMap sd = sgd_state_dict();
};

TEST_F(BadStateDict, AdamStateInSgdNamesTheKey) {
  std::vector<Variable> qs = make_params();
  Adam adam(qs, {});
  set_grads(qs, 1);
  adam.step();
  EXPECT_THROW_MSG(sgd.load_state_dict(adam.state_dict()), std::invalid_argument, "'state.0.exp_avg'");
  EXPECT_THROW_MSG(sgd.load_state_dict(adam.state_dict()), std::invalid_argument, "SGD keeps no state named 'exp_avg'");
}

TEST_F(BadStateDict, WrongShapeNamesTheKeyAndShapes) {
  sd["state.1.momentum_buffer"] = zeros({4});
  EXPECT_THROW_MSG(sgd.load_state_dict(sd), std::invalid_argument, "'state.1.momentum_buffer'");
  EXPECT_THROW_MSG(sgd.load_state_dict(sd), std::invalid_argument, "[3]");
  EXPECT_THROW_MSG(sgd.load_state_dict(sd), std::invalid_argument, "[4]");
}

TEST_F(BadStateDict, ParameterIndexOutOfRange) {
  sd["state.2.momentum_buffer"] = zeros({3});
  EXPECT_THROW_MSG(sgd.load_state_dict(sd), std::invalid_argument,
                   "'state.2.momentum_buffer': parameter index 2 out of range");
}

TEST_F(BadStateDict, MissingGroupOption) {
  sd.erase("param_groups.0.lr");
  EXPECT_THROW_MSG(sgd.load_state_dict(sd), std::invalid_argument, "missing key 'param_groups.0.lr'");
}

TEST_F(BadStateDict, MoreGroupsThanTheOptimizer) {
  sd["param_groups.1.lr"] = scalar_tensor(0.1, DType::Float64);
  EXPECT_THROW_MSG(sgd.load_state_dict(sd), std::invalid_argument, "'param_groups.1.lr': group index 1 out of range");
}

TEST_F(BadStateDict, GroupOfAnotherSize) {
  sd["param_groups.0.num_params"] = scalar_tensor(3.0, DType::Float64);
  EXPECT_THROW_MSG(sgd.load_state_dict(sd), std::invalid_argument, "'param_groups.0.num_params'");
}

TEST_F(BadStateDict, IncompleteAdamState) {
  std::vector<Variable> qs = make_params();
  Adam adam(qs, {});
  set_grads(qs, 1);
  adam.step();
  TensorMap asd = adam.state_dict();
  asd.erase("state.1.exp_avg_sq");
  std::vector<Variable> rs = make_params();
  Adam fresh(rs, {});
  EXPECT_THROW_MSG(fresh.load_state_dict(asd), std::invalid_argument, "missing key 'state.1.exp_avg_sq'");
}

TEST_F(BadStateDict, UnknownAndMalformedKeys) {
  TensorMap a = sd, b = sd, c = sd;
  a["foo"] = scalar_tensor(1.0);
  b["state.x.momentum_buffer"] = zeros({3});
  c["param_groups.0.betas"] = scalar_tensor(0.9, DType::Float64);
  EXPECT_THROW_MSG(sgd.load_state_dict(a), std::invalid_argument, "key 'foo'");
  EXPECT_THROW_MSG(sgd.load_state_dict(b), std::invalid_argument, "key 'state.x.momentum_buffer'");
  EXPECT_THROW_MSG(sgd.load_state_dict(c), std::invalid_argument, "unknown param group option 'betas'");
}

TEST_F(BadStateDict, NonScalarGroupOption) {
  sd["param_groups.0.lr"] = zeros({2});
  EXPECT_THROW_MSG(sgd.load_state_dict(sd), std::invalid_argument,
                   "'param_groups.0.lr': expected a 0-d floating tensor");
}

TEST_F(BadStateDict, AFailedLoadLeavesTheOptimizerUnchanged) {
  sgd.load_state_dict(sd);
  const TensorMap before = sgd.state_dict();
  TensorMap bad = sd;
  bad["param_groups.0.lr"] = scalar_tensor(5.0, DType::Float64);
  bad["state.1.momentum_buffer"] = zeros({7});
  EXPECT_THROW(sgd.load_state_dict(bad), std::invalid_argument);
  const TensorMap after = sgd.state_dict();
  ASSERT_EQ(before.size(), after.size());
  for (const auto& [k, t] : before) expect_equal(after.at(k), t, k);
}

// ---------------------------------------------------------------- option errors

TEST(OptimizerOptions, NesterovWithoutMomentumThrows) {
  std::vector<Variable> ps = make_params();
  EXPECT_THROW_MSG(SGD(ps, {.lr = 0.1, .nesterov = true}), std::invalid_argument,
                   "Nesterov momentum requires a momentum > 0 and zero dampening");
  EXPECT_THROW_MSG(SGD(ps, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}), std::invalid_argument,
                   "zero dampening");
}

TEST(OptimizerOptions, BadOptionsThrow) {
  std::vector<Variable> ps = make_params();
  EXPECT_THROW_MSG(SGD(ps, {.lr = -0.1}), std::invalid_argument, "invalid learning rate");
  EXPECT_THROW_MSG(SGD(ps, {.lr = 0.1, .momentum = -1.0}), std::invalid_argument, "invalid momentum");
  EXPECT_THROW_MSG(Adam(ps, {.beta1 = 1.0}), std::invalid_argument, "invalid beta1");
  EXPECT_THROW_MSG(AdamW(ps, {.weight_decay = -1.0}), std::invalid_argument, "invalid weight_decay");
  EXPECT_THROW_MSG(SGD({{.params = ps, .lr = -1.0}}, {.lr = 0.1}), std::invalid_argument,
                   "param group 0: invalid learning rate");
}

TEST(OptimizerOptions, EmptyOrDuplicateParametersThrow) {
  std::vector<Variable> ps = make_params();
  EXPECT_THROW_MSG(SGD(std::vector<Variable>{}, {.lr = 0.1}), std::invalid_argument, "empty parameter list");
  EXPECT_THROW_MSG(SGD({{.params = ps}, {.params = {ps[0]}}}, {.lr = 0.1}), std::invalid_argument,
                   "param group 1: parameter 0 appears more than once");
  EXPECT_THROW_MSG(SGD({Variable(arange(3))}, {.lr = 0.1}), std::invalid_argument, "only floating tensors");
}

TEST(OptimizerOptions, GradientOfAnotherShapeThrowsAtStep) {
  std::vector<Variable> ps = make_params();
  SGD sgd(ps, {.lr = 0.1});
  ps[1].set_grad(zeros({4}));
  EXPECT_THROW_MSG(sgd.step(), std::invalid_argument,
                   "SGD.step: parameter 1 (float32[3] on cpu): its gradient is float32[4]");
}

TEST(OptimizerOptions, NonContiguousGradientIsAccepted) {
  Variable p(zeros({2, 3}), true);
  SGD sgd({p}, {.lr = 1.0});
  const Tensor g = from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  p.set_grad(g.t());  // (2, 3) view with strides (1, 2)
  sgd.step();
  expect_equal(p.data(), from_vector<float>({-1, -3, -5, -2, -4, -6}, {2, 3}));
}

// ---------------------------------------------------------------- fused kernels

// The fused Adam update against the same update composed from tensor ops (the reference).
TEST(OptimKernels, FusedAdamMatchesComposedTensorOps) {
  const int64_t n = 1000;
  Variable p(empty({n}), true);
  for (int64_t j = 0; j < n; ++j) p.data().data<float>()[j] = std::cos(0.1f * j);
  const Tensor p0 = p.data().clone();
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
  AdamW adamw({p}, {.lr = lr, .weight_decay = wd});

  Tensor q = p0.clone(), m = zeros({n}), v = zeros({n});
  for (int step = 1; step <= 5; ++step) {
    const Tensor g = fake_grad({n}, step, 0);
    p.set_grad(g.clone());
    adamw.step();
    mul_(q, 1.0 - lr * wd);
    mul_(m, b1);
    add_(m, g, 1.0 - b1);
    mul_(v, b2);
    addcmul_(v, g, g, 1.0 - b2);
    const double bc1 = 1.0 - std::pow(b1, step), bc2 = 1.0 - std::pow(b2, step);
    const Tensor denom = sqrt(v) / std::sqrt(bc2) + eps;
    addcdiv_(q, m, denom, -lr / bc1);
  }
  expect_close(p.data(), q, 1e-6, 1e-7, "fused vs composed AdamW");
}

TEST(OptimKernels, FusedSgdMatchesComposedTensorOps) {
  const int64_t n = 1000;
  Variable p(empty({n}), true);
  for (int64_t j = 0; j < n; ++j) p.data().data<float>()[j] = std::cos(0.1f * j);
  Tensor q = p.data().clone(), buf;
  const double lr = 0.1, mom = 0.9, damp = 0.2, wd = 1e-2;
  SGD sgd({p}, {.lr = lr, .momentum = mom, .dampening = damp, .weight_decay = wd});
  for (int step = 1; step <= 5; ++step) {
    const Tensor g = fake_grad({n}, step, 0);
    p.set_grad(g.clone());
    sgd.step();
    Tensor d = g.clone();
    add_(d, q, wd);
    if (step == 1) {
      buf = d.clone();
    } else {
      mul_(buf, mom);
      add_(buf, d, 1.0 - damp);
    }
    add_(q, buf, -lr);
  }
  expect_close(p.data(), q, 1e-6, 1e-7, "fused vs composed SGD");
}

// Elements are independent: the same bits with 1 thread and with several (many chunks).
TEST(OptimKernels, UpdateIsTheSameWhateverTheThreadCount) {
  const int64_t n = 200000;  // several kOptimChunk chunks
  auto run = [&](int threads) {
    const int saved = kernels::cpu::get_num_threads();
    kernels::cpu::set_num_threads(threads);
    Variable p(zeros({n}), true);
    Adam adam({p}, {.lr = 0.01, .amsgrad = true});
    for (int step = 1; step <= 3; ++step) {
      p.set_grad(fake_grad({n}, step, 0));
      adam.step();
    }
    kernels::cpu::set_num_threads(saved);
    return p.data();
  };
  expect_equal(run(1), run(2));
  expect_equal(run(1), run(3));
}

}  // namespace
}  // namespace minidl::optim
