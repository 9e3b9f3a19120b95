// tests/nn/test_averaged_model.cpp — AveragedModel against averages worked out by hand over three
// updates: the equal average (SWA), the EMA with ema_avg_fn, buffers kept or averaged, the copy
// made at construction, state_dict names, and the errors.
#include <algorithm>

#include "minidl/nn/nn_all.h"
#include "tests/common/testing.h"

using namespace minidl;
using minidl::testing::expect_close;
using minidl::testing::expect_equal;

namespace {

// y = x * w; one parameter w (2), one buffer buf (1)
struct Tiny : nn::Module {
  Variable w{zeros({2}), true};
  Tensor buf = zeros({1});
  Tiny() {
    register_parameter("w", w);
    register_buffer("buf", buf);
  }
  Variable forward(const Variable& x) override { return mul(x, w); }
  void set(float w0, float w1, float b) {
    w.data().copy_(from_vector<float>({w0, w1}, {2}));
    buf.fill_(b);
  }
};

std::shared_ptr<nn::Module> make_tiny() { return std::make_shared<Tiny>(); }

// Three models: w = (1, 2), (3, 6), (5, -2) and buf = 10, 20, 30, each folded into `avg`.
void three_updates(Tiny& model, nn::AveragedModel& avg) {
  const float w[3][2] = {{1, 2}, {3, 6}, {5, -2}};
  for (int k = 0; k < 3; ++k) {
    model.set(w[k][0], w[k][1], 10.0f * static_cast<float>(k + 1));
    avg.update_parameters(model);
  }
}

}  // namespace

TEST(AveragedModel, EqualAverageOfThreeModels) {
  Tiny model;
  model.set(9, 9, 7);
  nn::AveragedModel swa(model, make_tiny);
  Tiny& avg = swa.module_as<Tiny>();
  expect_equal(avg.w.data(), from_vector<float>({9, 9}, {2}), "copied at construction");
  EXPECT_EQ(swa.n_averaged(), 0);
  three_updates(model, swa);
  EXPECT_EQ(swa.n_averaged(), 3);
  // ((1 + 3 + 5) / 3, (2 + 6 - 2) / 3); the buffer keeps the value copied at construction
  expect_close(avg.w.data(), from_vector<float>({3, 2}, {2}), 0, 1e-6, "SWA weights");
  expect_equal(avg.buf, full({1}, 7.0), "buffer not averaged");
  // the average has its own storage and forwards through the averaged module
  model.set(100, 100, 100);
  expect_close(swa(Variable(ones({2}))).data(), from_vector<float>({3, 2}, {2}), 0, 1e-6, "forward");
}

TEST(AveragedModel, ExponentialMovingAverageWithBuffers) {
  Tiny model;
  nn::AveragedModel ema(model, make_tiny, {.avg_fn = nn::ema_avg_fn(0.75), .use_buffers = true});
  three_updates(model, ema);
  // first update copies (1, 2, 10); then avg = 0.75 avg + 0.25 current:
  //   (1.5, 3, 12.5), then (0.75 * 1.5 + 0.25 * 5, 0.75 * 3 - 0.25 * 2, 0.75 * 12.5 + 0.25 * 30)
  const Tiny& avg = ema.module_as<Tiny>();
  expect_close(avg.w.data(), from_vector<float>({2.375f, 1.75f}, {2}), 0, 1e-6, "EMA weights");
  expect_close(avg.buf, full({1}, 16.875), 0, 1e-5, "EMA buffer");
}

TEST(AveragedModel, EqualAverageOfBuffersWhenAsked) {
  Tiny model;
  nn::AveragedModel swa(model, make_tiny, {.use_buffers = true});
  three_updates(model, swa);
  expect_close(swa.module_as<Tiny>().buf, full({1}, 20.0), 0, 1e-5, "(10 + 20 + 30) / 3");
}

TEST(AveragedModel, BatchNormBuffersAveragedAndItsCounterCopied) {
  auto make = [] { return std::make_shared<nn::BatchNorm2d>(nn::BatchNormOptions{.num_features = 2}); };
  auto bn = make();
  nn::AveragedModel swa(*bn, make, {.use_buffers = true});
  for (int k = 1; k <= 3; ++k) {
    bn->running_mean.fill_(static_cast<double>(k));
    bn->num_batches_tracked.fill_(static_cast<double>(10 * k));
    swa.update_parameters(*bn);
  }
  auto& avg = swa.module_as<nn::BatchNorm2d>();
  expect_close(avg.running_mean, full({2}, 2.0), 0, 1e-6, "(1 + 2 + 3) / 3");
  EXPECT_EQ(avg.num_batches_tracked.item<int64_t>(), 30) << "an integer buffer is copied, not averaged";
}

TEST(AveragedModel, StateDictNamesAsPyTorch) {
  Tiny model;
  nn::AveragedModel swa(model, make_tiny);
  std::vector<std::string> keys;
  for (const auto& [k, v] : swa.state_dict()) keys.push_back(k);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"module.buf", "module.w", "n_averaged"}));
}

TEST(AveragedModel, Errors) {
  auto model = std::make_shared<Tiny>();
  EXPECT_THROW_MSG(nn::AveragedModel(*model, [&] { return model; }), std::invalid_argument,
                   "make_model must build a new model");
  EXPECT_THROW_MSG(nn::AveragedModel(*model, nullptr), std::invalid_argument, "make_model is empty");
  nn::AveragedModel swa(*model, make_tiny);
  nn::Linear other({.in = 2, .out = 1, .bias = false});
  EXPECT_THROW_MSG(swa.update_parameters(other), std::invalid_argument, "does not match the averaged 'w'");
  EXPECT_THROW_MSG(swa.module_as<nn::Linear>(), std::invalid_argument, "the averaged module is a Tiny");
  EXPECT_THROW_MSG(nn::ema_avg_fn(1.5), std::invalid_argument, "decay must be in [0, 1]");
}
