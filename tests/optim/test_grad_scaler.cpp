// tests/optim/test_grad_scaler.cpp — GradScaler: the scale / skip / grow sequence against
// torch.amp.GradScaler on a planted overflow, skipped steps leaving parameters and optimizer
// state untouched, unscale_ on float32 and float64 gradients, state_dict round trip (a resumed
// run continues the identical sequence), the found_inf reducer, misuse and bad options.
#include <cmath>
#include <limits>
#include <vector>

#include "minidl/autograd/ops.h"
#include "minidl/optim/optim_all.h"
#include "minidl/tensor/creation.h"
#include "tests/common/testing.h"

namespace minidl::optim {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---------------------------------------------------------------- against PyTorch

// Printed by tests/optim/make_grad_scaler_golden.py (torch 2.15, CPU): w = [0.5, -0.25],
// loss = sum(w * x_k), SGD(lr=0.1, momentum=0.9), GradScaler(init_scale=2^16, growth_interval=3).
// x_k = [1 + 0.5 k, -2], except step 2: [1e35, 1] (the loss is finite, the scaled loss and its
// gradient overflow float32) and step 6: [nan, 1]. Values after each step() and update().
const std::vector<double> kScaleAfterUpdate = {65536.0, 65536.0, 32768.0, 32768.0, 32768.0,
                                               65536.0, 32768.0, 32768.0, 32768.0, 65536.0};
const std::vector<bool> kStepped = {true, true, false, true, true, true, false, true, true, true};
const std::vector<std::vector<float>> kParams = {
    {0.4000000059604645f, -0.04999999701976776f}, {0.1599999964237213f, 0.33000001311302185f},
    {0.1599999964237213f, 0.33000001311302185f},  {-0.3059999942779541f, 0.8720000386238098f},
    {-1.025399923324585f, 1.5598000288009644f},   {-2.022859811782837f, 2.3788199424743652f},
    {-2.022859811782837f, 2.3788199424743652f},   {-3.3705737590789795f, 3.3159379959106445f},
    {-5.0835161209106445f, 4.359344005584717f},   {-7.175164222717285f, 5.498409271240234f},
};
// The same run with init_scale=1e4, growth_factor=1.1, backoff_factor=0.3.
const std::vector<double> kOddScaleAfterUpdate = {10000.0, 10000.0, 3000.0, 3000.0, 3000.0,
                                                  3300.0,  990.0,   990.0,  990.0,  1089.0};

Tensor golden_input(int k) {
  if (k == 2) return from_vector<float>({1e35f, 1.0f});
  if (k == 6) return from_vector<float>({kNaN, 1.0f});
  return from_vector<float>({1.0f + 0.5f * static_cast<float>(k), -2.0f});
}

struct Trace {
  std::vector<double> scales;
  std::vector<bool> stepped;
  std::vector<std::vector<float>> params;
};

// Steps [first, last) of the golden loop on (w, opt, scaler).
void golden_steps(Variable& w, Optimizer& opt, GradScaler& scaler, int first, int last, Trace& run) {
  for (int k = first; k < last; ++k) {
    opt.zero_grad();
    scaler.scale(sum(mul(w, Variable(golden_input(k))))).backward();
    run.stepped.push_back(scaler.step(opt));
    scaler.update();
    run.scales.push_back(scaler.get_scale());
    run.params.push_back(w.data().to_vector<float>());
  }
}

Variable golden_param() { return Variable(from_vector<float>({0.5f, -0.25f}), true); }

TEST(GradScaler, MatchesPyTorchOnAPlantedOverflow) {
  Variable w = golden_param();
  SGD opt({w}, {.lr = 0.1, .momentum = 0.9});
  GradScaler scaler({.growth_interval = 3});
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  Trace run;
  golden_steps(w, opt, scaler, 0, 10, run);
  EXPECT_EQ(run.scales, kScaleAfterUpdate);
  EXPECT_EQ(run.stepped, kStepped);
  for (size_t k = 0; k < kParams.size(); ++k)
    for (size_t i = 0; i < 2; ++i)
      EXPECT_FLOAT_EQ(run.params[k][i], kParams[k][i]) << "step " << k << " w[" << i << "]";

  const TensorMap state = scaler.state_dict();  // torch: {'scale': 65536.0, ..., '_growth_tracker': 0}
  EXPECT_EQ(state.at("scale").item(), 65536.0);
  EXPECT_EQ(state.at("growth_factor").item(), 2.0);
  EXPECT_EQ(state.at("backoff_factor").item(), 0.5);
  EXPECT_EQ(state.at("growth_interval").item(), 3.0);
  EXPECT_EQ(state.at("_growth_tracker").item(), 0.0);
  EXPECT_EQ(state.size(), 5u);
}

TEST(GradScaler, MatchesPyTorchWithOtherFactors) {
  Variable w = golden_param();
  SGD opt({w}, {.lr = 0.1, .momentum = 0.9});
  GradScaler scaler({.init_scale = 1e4, .growth_factor = 1.1, .backoff_factor = 0.3, .growth_interval = 3});
  Trace run;
  golden_steps(w, opt, scaler, 0, 10, run);
  EXPECT_EQ(run.scales, kOddScaleAfterUpdate);
  EXPECT_EQ(run.stepped, kStepped);
}

TEST(GradScaler, ScaleMultipliesTheLossAndItsGradient) {
  GradScaler scaler({.init_scale = 1024.0});
  Variable x(from_vector<float>({3.0f}), true);
  Variable scaled = scaler.scale(sum(mul(x, 2.0)));
  EXPECT_EQ(scaled.data().item(), 6144.0);
  scaled.backward();
  EXPECT_EQ(x.grad().item(), 2048.0);
}

// ---------------------------------------------------------------- skipping

std::vector<Variable> two_params() {
  return {Variable(from_vector<float>({0.5f, -1.0f, 2.0f}), true), Variable(from_vector<float>({0.25f}), true)};
}

void set_scaled_grads(std::vector<Variable>& ps, double scale, float first) {
  ps[0].set_grad(from_vector<float>({first, 0.5f, -0.25f}) * scale);
  ps[1].set_grad(from_vector<float>({2.0f}) * scale);
}

TEST(GradScaler, SkipOnNanLeavesParamsAndMomentumUnchanged) {
  std::vector<Variable> ps = two_params();
  SGD opt(ps, {.lr = 0.1, .momentum = 0.9});
  GradScaler scaler({.init_scale = 8.0});
  set_scaled_grads(ps, 8.0, 1.0f);
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  const std::vector<float> p0 = ps[0].data().to_vector<float>(), p1 = ps[1].data().to_vector<float>();
  const std::vector<float> buf0 = opt.state(0).at("momentum_buffer").to_vector<float>();
  EXPECT_EQ(buf0, (std::vector<float>{1.0f, 0.5f, -0.25f}));  // the unscaled gradient

  set_scaled_grads(ps, 8.0, kNaN);
  EXPECT_FALSE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(ps[0].data().to_vector<float>(), p0);
  EXPECT_EQ(ps[1].data().to_vector<float>(), p1);
  EXPECT_EQ(opt.state(0).at("momentum_buffer").to_vector<float>(), buf0);
  EXPECT_EQ(scaler.get_scale(), 4.0);
}

TEST(GradScaler, SkipOnInfLeavesAdamStepCountAndMomentsUnchanged) {
  std::vector<Variable> ps = two_params();
  Adam adam(ps, {.lr = 0.01});
  GradScaler scaler({.init_scale = 8.0});
  set_scaled_grads(ps, 8.0, 1.0f);
  scaler.step(adam);
  scaler.update();
  const TensorMap before = adam.state_dict();
  const std::vector<float> p0 = ps[0].data().to_vector<float>();
  set_scaled_grads(ps, 8.0, kInf);
  EXPECT_FALSE(scaler.step(adam));
  scaler.update();
  EXPECT_EQ(ps[0].data().to_vector<float>(), p0);
  const TensorMap after = adam.state_dict();
  for (const auto& [key, t] : before) EXPECT_EQ(after.at(key).to_vector<double>(), t.to_vector<double>()) << key;
  EXPECT_EQ(after.at("state.0.step").item(), 1.0);
}

TEST(GradScaler, UnscaleDividesFloat32AndFloat64GradientsInPlace) {
  Variable a(from_vector<float>({1.0f, 2.0f}), true);
  Variable b(from_vector<double>({1.0, 2.0}), true);
  Variable no_grad(from_vector<float>({1.0f}), true);  // skipped, as in PyTorch
  SGD opt({a, b, no_grad}, {.lr = 1.0});
  GradScaler scaler({.init_scale = 4.0});
  a.set_grad(from_vector<float>({6.0f, -1.0f}));
  b.set_grad(from_vector<double>({0.5, 3.0}));
  const Tensor a_grad = a.grad();  // the same storage: unscale_ writes in place
  scaler.unscale_(opt);
  EXPECT_EQ(a_grad.to_vector<float>(), (std::vector<float>{1.5f, -0.25f}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{0.125, 0.75}));
  EXPECT_FALSE(no_grad.grad().defined());
  EXPECT_TRUE(scaler.step(opt));  // no second unscale: a = 1 - 1.5, not 1 - 1.5 / 4
  EXPECT_EQ(a.data().to_vector<float>(), (std::vector<float>{-0.5f, 2.25f}));

  scaler.update();
  b.set_grad(from_vector<double>({std::numeric_limits<double>::infinity(), 0.0}));
  EXPECT_FALSE(scaler.step(opt));  // an inf in a float64 gradient
}

TEST(GradScaler, UnscaleThenClipSeesTheTrueGradients) {
  Variable w(from_vector<float>({0.0f, 0.0f}), true);
  SGD opt({w}, {.lr = 1.0});
  GradScaler scaler({.init_scale = 1024.0});
  w.set_grad(from_vector<float>({3.0f * 1024.0f, 4.0f * 1024.0f}));
  scaler.unscale_(opt);
  EXPECT_FLOAT_EQ(static_cast<float>(clip_grad_norm({w}, 1.0)), 5.0f);
  EXPECT_TRUE(scaler.step(opt));
  const std::vector<float> got = w.data().to_vector<float>();
  EXPECT_NEAR(got[0], -0.6f, 1e-6);
  EXPECT_NEAR(got[1], -0.8f, 1e-6);
}

TEST(GradScaler, GrowthStopsWhereFloat32WouldOverflow) {
  Variable w(from_vector<float>({1.0f}), true);
  SGD opt({w}, {.lr = 0.0});
  GradScaler scaler({.init_scale = 3e38, .growth_interval = 1});
  w.set_grad(from_vector<float>({0.0f}));
  scaler.step(opt);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), static_cast<double>(3e38f));  // 6e38 is no float32: kept, as torch
  EXPECT_EQ(scaler.state_dict().at("_growth_tracker").item(), 0.0);
}

TEST(GradScaler, EachOptimizerDecidesItsStepAndUpdateBacksOffForAny) {
  Variable a(from_vector<float>({1.0f}), true), b(from_vector<float>({1.0f}), true);
  SGD opt_a({a}, {.lr = 1.0}), opt_b({b}, {.lr = 1.0});
  GradScaler scaler({.init_scale = 2.0});
  a.set_grad(from_vector<float>({kInf}));
  b.set_grad(from_vector<float>({1.0f}));
  EXPECT_FALSE(scaler.step(opt_a));
  EXPECT_TRUE(scaler.step(opt_b));
  scaler.update();
  EXPECT_EQ(a.data().item(), 1.0);
  EXPECT_EQ(b.data().item(), 0.5);
  EXPECT_EQ(scaler.get_scale(), 1.0);
}

TEST(GradScaler, UpdateWithANewScaleSetsIt) {
  GradScaler scaler;
  scaler.update(128.0);  // no step needed
  EXPECT_EQ(scaler.get_scale(), 128.0);
  EXPECT_THROW_MSG(scaler.update(0.0), std::invalid_argument, "new_scale must be a finite number > 0");
}

// ---------------------------------------------------------------- state_dict

TEST(GradScaler, StateDictRoundTripResumesTheIdenticalSequence) {
  Variable w0 = golden_param();
  SGD opt0({w0}, {.lr = 0.1, .momentum = 0.9});
  GradScaler whole({.growth_interval = 3});
  Trace uninterrupted;
  golden_steps(w0, opt0, whole, 0, 10, uninterrupted);

  Variable w1 = golden_param();
  SGD opt1({w1}, {.lr = 0.1, .momentum = 0.9});
  GradScaler first({.growth_interval = 3});
  Trace resumed;
  golden_steps(w1, opt1, first, 0, 4, resumed);  // ends with the growth tracker at 1
  EXPECT_EQ(first.state_dict().at("_growth_tracker").item(), 1.0);
  // through the checkpoint format, into a scaler made with other options
  const std::string scaler_bytes = serialize(first.state_dict()), opt_bytes = serialize(opt1.state_dict());
  const TensorMap params = {{"w", w1.data().clone()}};

  Variable w2(params.at("w"), true);
  SGD opt2({w2}, {.lr = 0.1, .momentum = 0.9});
  opt2.load_state_dict(deserialize(opt_bytes).tensors);
  GradScaler second({.init_scale = 1.0, .growth_factor = 4.0, .backoff_factor = 0.25, .growth_interval = 100});
  second.load_state_dict(deserialize(scaler_bytes).tensors);
  EXPECT_EQ(second.options().growth_factor, 2.0);
  EXPECT_EQ(second.options().backoff_factor, 0.5);
  EXPECT_EQ(second.options().growth_interval, 3);
  golden_steps(w2, opt2, second, 4, 10, resumed);

  EXPECT_EQ(resumed.scales, uninterrupted.scales);
  EXPECT_EQ(resumed.stepped, uninterrupted.stepped);
  EXPECT_EQ(resumed.params, uninterrupted.params);  // bit for bit
}

TEST(GradScaler, LoadStateDictRejectsBadDictsAndStaysUnchanged) {
  GradScaler scaler({.init_scale = 8.0});
  const TensorMap good = GradScaler({.growth_interval = 5}).state_dict();
  auto with = [&](const std::string& key, double v) {
    TensorMap d = good;
    d[key] = scalar_tensor(v, DType::Float64);
    return d;
  };
  EXPECT_THROW_MSG(scaler.load_state_dict({}), std::invalid_argument, "the state dict is empty");
  TensorMap missing = good;
  missing.erase("_growth_tracker");
  EXPECT_THROW_MSG(scaler.load_state_dict(missing), std::invalid_argument, "key '_growth_tracker' is missing");
  EXPECT_THROW_MSG(scaler.load_state_dict(with("momentum", 1.0)), std::invalid_argument, "unknown key 'momentum'");
  EXPECT_THROW_MSG(scaler.load_state_dict(with("scale", -1.0)), std::invalid_argument,
                   "key 'scale': init_scale must be a finite number > 0");
  EXPECT_THROW_MSG(scaler.load_state_dict(with("backoff_factor", 1.5)), std::invalid_argument, "key 'backoff_factor'");
  EXPECT_THROW_MSG(scaler.load_state_dict(with("growth_interval", 2.5)), std::invalid_argument,
                   "key 'growth_interval': expected an integer");
  EXPECT_THROW_MSG(scaler.load_state_dict(with("_growth_tracker", 5.0)), std::invalid_argument,
                   "expected 0 <= _growth_tracker < growth_interval (5)");
  TensorMap wrong_shape = good;
  wrong_shape["scale"] = from_vector<double>({1.0, 2.0});
  EXPECT_THROW_MSG(scaler.load_state_dict(wrong_shape), std::invalid_argument,
                   "key 'scale': expected a 0-d floating tensor");
  EXPECT_EQ(scaler.get_scale(), 8.0);
  EXPECT_EQ(scaler.options().growth_interval, 2000);
}

// ---------------------------------------------------------------- the reducer

TEST(GradScaler, TheReducerDecidesAndIsCalledOncePerUnscale) {
  Variable w(from_vector<float>({1.0f}), true);
  SGD opt({w}, {.lr = 1.0});
  GradScaler scaler({.init_scale = 2.0});
  std::vector<bool> seen;
  scaler.set_found_inf_reducer([&](bool local) {
    seen.push_back(local);
    return true;  // another rank overflowed
  });
  w.set_grad(from_vector<float>({2.0f}));
  EXPECT_FALSE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(w.data().item(), 1.0);
  EXPECT_EQ(scaler.get_scale(), 1.0);

  opt.zero_grad();  // no gradient at all: the reducer is still called (every rank must take part)
  EXPECT_FALSE(scaler.step(opt));
  EXPECT_EQ(seen, (std::vector<bool>{false, false}));
}

// ---------------------------------------------------------------- disabled, misuse, options

TEST(GradScaler, DisabledIsAPassThrough) {
  Variable w(from_vector<float>({1.0f}), true);
  SGD opt({w}, {.lr = 1.0});
  GradScaler scaler({.enabled = false});
  EXPECT_FALSE(scaler.is_enabled());
  Variable loss = mul(w, 3.0);
  EXPECT_EQ(scaler.scale(loss).data().item(), 3.0);
  EXPECT_EQ(scaler.get_scale(), 1.0);
  w.set_grad(from_vector<float>({kInf}));
  scaler.unscale_(opt);
  EXPECT_TRUE(scaler.step(opt));  // no check: the optimizer steps
  EXPECT_TRUE(std::isinf(w.data().item()));
  scaler.update();
  EXPECT_TRUE(scaler.state_dict().empty());
  scaler.load_state_dict({});  // a no-op, as in PyTorch
}

TEST(GradScaler, UnscaleAndStepAreOncePerUpdate) {
  Variable w(from_vector<float>({1.0f}), true);
  SGD opt({w}, {.lr = 1.0});
  GradScaler scaler;
  EXPECT_THROW_MSG(scaler.update(), std::logic_error, "update() found no inf checks since the last update()");
  w.set_grad(from_vector<float>({1.0f}));
  scaler.unscale_(opt);
  EXPECT_THROW_MSG(scaler.unscale_(opt), std::logic_error, "unscale_() has already been called on this optimizer");
  scaler.step(opt);
  EXPECT_THROW_MSG(scaler.unscale_(opt), std::logic_error, "unscale_() is being called after step()");
  EXPECT_THROW_MSG(scaler.step(opt), std::logic_error, "step() has already been called since the last update()");
  scaler.update();
  EXPECT_TRUE(scaler.step(opt));  // a new iteration
}

TEST(GradScaler, BadOptionsThrowNamingTheOption) {
  EXPECT_THROW_MSG(GradScaler({.init_scale = 0.0}), std::invalid_argument, "GradScaler: init_scale must be");
  EXPECT_THROW_MSG(GradScaler({.init_scale = -1.0}), std::invalid_argument, "init_scale must be a finite number > 0");
  EXPECT_THROW_MSG(GradScaler({.growth_factor = 1.0}), std::invalid_argument,
                   "growth_factor must be a finite number > 1");
  EXPECT_THROW_MSG(GradScaler({.growth_factor = 0.5}), std::invalid_argument, "growth_factor");
  EXPECT_THROW_MSG(GradScaler({.backoff_factor = 1.0}), std::invalid_argument,
                   "backoff_factor must be in (0, 1), got 1");
  EXPECT_THROW_MSG(GradScaler({.backoff_factor = 0.0}), std::invalid_argument,
                   "backoff_factor must be in (0, 1), got 0");
  EXPECT_THROW_MSG(GradScaler({.growth_interval = 0}), std::invalid_argument, "growth_interval must be >= 1, got 0");
  EXPECT_NO_THROW(
      GradScaler({.init_scale = 0.5, .growth_factor = 1.0001, .backoff_factor = 0.9999, .growth_interval = 1}));
}

}  // namespace
}  // namespace minidl::optim
