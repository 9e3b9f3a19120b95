// examples/trainer/test_step.cpp — unit tests of the trainer's step (trainer/step.h): a training
// step reads nothing back to the host (tensor/tensor.h's host_read_count() stays put over K steps
// of the MLP and the CNN, ordinary and --deterministic, in float32 and under bf16 autocast, and
// moves when a check reads the sums or the watch; bf16 keeps float32 parameters and gradients); a
// NaN loss between two checks is reported at its own step, with its value; under fp16 a planted
// overflow on one of two ranks makes both skip the step and halve the loss scale. Built as
// `test_trainer_step`, run by ctest. Each case runs in a forked world-1 process group (DDP needs
// one) and returns its findings as text.
#include <cmath>
#include <cstdio>
#include <gtest/gtest.h>
#include <limits>
#include <memory>

#include "examples/trainer/step.h"
#include "minidl/dist/ddp.h"
#include "minidl/dist/deterministic_ddp.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/grad_scaler_sync.h"
#include "minidl/dist/spawn.h"
#include "minidl/dist/sync_batchnorm.h"
#include "minidl/nn/nn_all.h"
#include "minidl/optim/optim_all.h"
#include "minidl/tensor/tensor_all.h"

namespace dist = minidl::dist;
using minidl::Tensor;

namespace {

// Batch `i` of a fixed stream: inputs (B, 1, 28, 28) in [0, 1), targets (B) in [0, 10).
struct Batch {
  Tensor x, y;
};
Batch make_batch(int64_t i, int64_t B) {
  minidl::manual_seed(1000 + static_cast<uint64_t>(i));
  Tensor x = minidl::rand({B, 1, 28, 28});
  std::vector<int64_t> y(static_cast<size_t>(B));
  for (int64_t j = 0; j < B; ++j) y[static_cast<size_t>(j)] = (i * 7 + j * 3) % 10;
  return {x, minidl::from_vector<int64_t>(y, {B})};
}

// K steps of `model` with SGD (momentum) or AdamW (ordinary, or --deterministic with micro-shards
// of 4) at a TRAIN.PRECISION: the host reads made by the steps themselves, then by the reads at a
// check, and whether the parameters and their gradients are all float32 afterwards.
std::string count_reads(const std::string& name, bool deterministic, bool adamw,
                        const std::string& precision = "fp32") {
  dist::init({.backend = "gloo", .timeout = std::chrono::seconds(30)});
  std::unique_ptr<minidl::nn::Module> model = minidl::nn::make_model(name);
  if (deterministic) dist::convert_sync_batchnorm(*model);
  std::unique_ptr<dist::DataParallel> ddp;
  if (deterministic)
    ddp = std::make_unique<dist::DeterministicDDP>(*model);
  else
    ddp = std::make_unique<dist::DistributedDataParallel>(*model);
  std::unique_ptr<minidl::optim::Optimizer> opt;
  if (adamw)
    opt = std::make_unique<minidl::optim::AdamW>(model->parameters(), minidl::optim::AdamWOptions{.lr = 1e-3});
  else
    opt = std::make_unique<minidl::optim::SGD>(model->parameters(), minidl::optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  const std::unique_ptr<minidl::optim::GradScaler> scaler = trainer::make_grad_scaler(precision);
  trainer::TrainConfig cfg;
  cfg.global_batch_size = 16;
  cfg.micro_batch = 4;
  cfg.precision = precision;
  ddp->train();
  trainer::DeviceTotals totals(minidl::Device::cpu());
  trainer::OrderedTotals ordered;
  trainer::NonFiniteWatch watch(minidl::Device::cpu());
  constexpr int64_t K = 5;
  std::vector<Batch> batches;
  for (int64_t i = 0; i < K; ++i) batches.push_back(make_batch(i, 16));
  const uint64_t before = minidl::host_read_count();
  for (int64_t i = 0; i < K; ++i) {
    if (deterministic) {
      trainer::deterministic_step(*ddp, *opt, *scaler, cfg, 0, i, i + 1, batches[i].x, batches[i].y, ordered, watch);
    } else {
      minidl::manual_seed(trainer::step_seed(0, 0, i, 0));
      trainer::train_step(*ddp, *opt, *scaler, batches[i].x, batches[i].y, i + 1, totals, watch,
                          trainer::autocast_dtype_of(precision));
    }
  }
  const uint64_t in_steps = minidl::host_read_count() - before;
  const bool finite = !watch.first().has_value();
  const trainer::Totals t = deterministic ? ordered.fold() : totals.read();
  const uint64_t at_check = minidl::host_read_count() - before - in_steps;
  bool float32 = true;
  for (const minidl::Variable& p : model->parameters())
    float32 = float32 && p.dtype() == minidl::DType::Float32 && p.grad().defined() &&
              p.grad().dtype() == minidl::DType::Float32;
  char buf[160];
  std::snprintf(buf, sizeof buf, "steps %llu, check %s, finite %d, count %g, loss %s, float32 %d",
                static_cast<unsigned long long>(in_steps), at_check > 0 ? "reads" : "reads nothing", finite ? 1 : 0,
                t.count, std::isfinite(t.loss()) && t.loss() > 0 ? "> 0" : "bad", float32 ? 1 : 0);
  dist::shutdown();
  return buf;
}

}  // namespace

// The reference models with the optimizers of their recipes (configs/*.yaml) and the other one.
struct Case {
  const char* model;
  bool adamw;
};
constexpr Case kCases[] = {{"mlp", true}, {"mlp", false}, {"cnn", false}, {"cnn", true}, {"vit", true}};

TEST(TrainerStep, OrdinaryStepsMakeNoHostReadUntilACheck) {
  for (const Case& c : kCases) {
    const auto r = dist::spawn_with_results(1, [&](int) { return count_reads(c.model, false, c.adamw); });
    EXPECT_EQ(r[0], "steps 0, check reads, finite 1, count 80, loss > 0, float32 1")
        << c.model << (c.adamw ? " adamw" : " sgd");
  }
}

TEST(TrainerStep, DeterministicStepsMakeNoHostReadUntilACheck) {
  for (const Case& c : kCases) {
    const auto r = dist::spawn_with_results(1, [&](int) { return count_reads(c.model, true, c.adamw); });
    EXPECT_EQ(r[0], "steps 0, check reads, finite 1, count 80, loss > 0, float32 1")
        << c.model << (c.adamw ? " adamw" : " sgd");
  }
}

TEST(TrainerStep, Bfloat16StepsMakeNoHostReadAndKeepFloat32ParametersAndGradients) {
  for (const Case& c : kCases)
    for (bool deterministic : {false, true}) {
      const auto r =
          dist::spawn_with_results(1, [&](int) { return count_reads(c.model, deterministic, c.adamw, "bf16"); });
      EXPECT_EQ(r[0], "steps 0, check reads, finite 1, count 80, loss > 0, float32 1")
          << c.model << (c.adamw ? " adamw" : " sgd") << (deterministic ? " deterministic" : "");
    }
}

TEST(TrainerStep, WatchKeepsTheFirstNonFiniteLossWithoutReadingIt) {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor input = minidl::zeros({2, 3}), clean_logits = minidl::zeros({2, 4});
  const Tensor bad_logits = minidl::from_vector<float>({0, inf, 1, 2, NAN, 3, -inf, 4}, {2, 4});  // 3 of 8
  trainer::NonFiniteWatch watch(minidl::Device::cpu());
  const uint64_t before = minidl::host_read_count();
  watch.add(minidl::scalar_tensor(0.5), input, clean_logits, 1);
  watch.add(minidl::scalar_tensor(inf), input, bad_logits, 2);
  watch.add(minidl::scalar_tensor(NAN), minidl::full({2, 3}, NAN), clean_logits, 3);
  watch.add(minidl::scalar_tensor(0.25), input, clean_logits, 4);
  EXPECT_EQ(minidl::host_read_count(), before) << "add() must not read the loss back";
  const auto found = watch.first();
  EXPECT_EQ(minidl::host_read_count(), before + 1) << "first() is the one read";
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->step, 2);
  EXPECT_EQ(found->loss, std::numeric_limits<double>::infinity());
  EXPECT_EQ(found->input_bad, 0);
  EXPECT_EQ(found->input_numel, 6);
  EXPECT_EQ(found->logits_bad, 3);
  EXPECT_EQ(found->logits_numel, 8);
  trainer::NonFiniteWatch clean(minidl::Device::cpu());
  clean.add(minidl::scalar_tensor(3e38f), input, clean_logits, 1);  // large but finite
  clean.add(minidl::scalar_tensor(1.0f), minidl::full({2, 3}, NAN), clean_logits, 2);  // a finite loss: not recorded
  EXPECT_FALSE(clean.first().has_value());
}

TEST(TrainerStep, NanBetweenChecksIsReportedAtItsOwnStep) {
  // Checks every 5 steps; step 7's batch holds a NaN pixel, so its loss (and, through the
  // update, every later one) is NaN. The check at 5 finds nothing, the one at 10 says step 7.
  const auto r = dist::spawn_with_results(1, [](int) {
    dist::init({.backend = "gloo", .timeout = std::chrono::seconds(30)});
    minidl::nn::MLP model;
    dist::DistributedDataParallel ddp(model);
    minidl::optim::SGD opt(model.parameters(), {.lr = 0.05});
    minidl::optim::GradScaler off({.enabled = false});
    trainer::DeviceTotals totals(minidl::Device::cpu());
    trainer::NonFiniteWatch watch(minidl::Device::cpu());
    std::string seen;
    for (int64_t step = 1; step <= 10; ++step) {
      Batch b = make_batch(step, 8);
      if (step == 7) b.x.narrow(0, 3, 1).narrow(2, 4, 1).narrow(3, 5, 2).fill_(NAN);  // 2 pixels of image 3
      trainer::train_step(ddp, opt, off, b.x, b.y, step, totals, watch, minidl::DType::Float32);
      if (step % 5 == 0) {
        const auto bad = watch.first();
        seen += "check " + std::to_string(step) + ": ";
        if (bad)
          seen += "step " + std::to_string(bad->step) + (std::isnan(bad->loss) ? " nan" : " not nan") + ", input " +
                  std::to_string(bad->input_bad) + "/" + std::to_string(bad->input_numel) + ", logits " +
                  std::to_string(bad->logits_bad) + "/" + std::to_string(bad->logits_numel);
        else
          seen += "none";
        seen += "; ";
      }
    }
    dist::shutdown();
    return seen;
  });
  // step 7: 2 of 8 x 784 input values, and image 3's 10 logits (one row of 80), are NaN
  EXPECT_EQ(r[0], "check 5: none; check 10: step 7 nan, input 2/6272, logits 10/80; ");
}

TEST(TrainerStep, Float16OverflowSkipsTheStepOnEveryRank) {
  // Two ranks train the MLP under fp16 autocast with a loss scaler synchronised over the ranks
  // (make_grad_scaler's sync, here with a scale of 1024 to start). At step 2 one pixel of rank
  // 1's batch is 1e5, past float16's largest finite 65504: rank 1's forward overflows, its
  // gradients are not finite, and both ranks skip the step (the parameters stay as they were)
  // and halve the scale; steps 1 and 3 are clean and step on both ranks.
  const auto r = dist::spawn_with_results(2, [](int rank) {
    dist::init({.backend = "gloo", .timeout = std::chrono::seconds(30)});
    minidl::nn::MLP model;
    dist::DistributedDataParallel ddp(model);
    minidl::optim::SGD opt(model.parameters(), {.lr = 0.05});
    minidl::optim::GradScaler scaler({.init_scale = 1024.0});
    dist::sync_grad_scaler(scaler);
    trainer::DeviceTotals totals(minidl::Device::cpu());
    trainer::NonFiniteWatch watch(minidl::Device::cpu());
    std::string seen;
    for (int64_t step = 1; step <= 3; ++step) {
      Batch b = make_batch(10 * step + rank, 8);
      if (step == 2 && rank == 1) b.x.narrow(0, 5, 1).narrow(2, 9, 1).narrow(3, 9, 1).fill_(1e5);
      const std::vector<float> before = model.parameters()[0].data().to_vector<float>();
      trainer::train_step(ddp, opt, scaler, b.x, b.y, step, totals, watch, minidl::DType::Float16);
      const bool stepped = model.parameters()[0].data().to_vector<float>() != before;
      seen += "step " + std::to_string(step) + (stepped ? " stepped" : " skipped") + ", scale " +
              std::to_string(static_cast<int>(scaler.get_scale())) + "; ";
    }
    dist::shutdown();
    return seen;
  });
  const std::string expected = "step 1 stepped, scale 1024; step 2 skipped, scale 512; step 3 stepped, scale 512; ";
  EXPECT_EQ(r[0], expected);
  EXPECT_EQ(r[1], expected);
}
