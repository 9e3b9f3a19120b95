// tests/optim/test_checkpoint.cpp — save_checkpoint / load_checkpoint (tensor/checkpoint.h) on a
// real training loop: model (with dropout, so the generator matters), SGD with momentum, StepLR,
// GradScaler, RandomSampler. Resuming from a checkpoint continues bit for bit; a damaged file or
// a missing part is refused by name.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "minidl/data/sampler.h"
#include "minidl/nn/nn_all.h"
#include "minidl/optim/optim_all.h"
#include "minidl/tensor/checkpoint.h"
#include "tests/common/temp_dir.h"
#include "tests/common/testing.h"

using namespace minidl;

namespace {

// 20 samples of 4 features, 3 classes: 5 steps of 4 per epoch
Tensor inputs(const Tensor& idx) { return index_select(randn({20, 4}, RandomKey{31, 0}), 0, idx); }
Tensor targets(const Tensor& idx) { return index_select(randint(0, 3, {20}, RandomKey{31, 1}), 0, idx); }

// Everything a run carries from step to step; built from the default generator (its weights).
struct TrainingRun {
  nn::Sequential model;
  std::unique_ptr<optim::SGD> opt;
  std::unique_ptr<optim::StepLR> sched;
  optim::GradScaler scaler{{.init_scale = 1024.0, .growth_interval = 2}};
  data::RandomSampler sampler{20, 5};
  TrainingRun() {
    model.push_back<nn::Linear>(nn::LinearOptions{.in = 4, .out = 8});
    model.push_back<nn::ReLU>();
    model.push_back<nn::Dropout>(nn::DropoutOptions{.p = 0.25});
    model.push_back<nn::Linear>(nn::LinearOptions{.in = 8, .out = 3});
    opt = std::make_unique<optim::SGD>(model.parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    sched = std::make_unique<optim::StepLR>(*opt, /*step_size=*/2, /*gamma=*/0.5);
  }
  TrainingState state() {
    return {.model = model,
            .optimizer = *opt,
            .scheduler = *sched,
            .scaler = scaler,
            .sampler = sampler,
            .rng_state = true};
  }
  // One step on the next 4 samples of the epoch (the sampler keeps the position).
  void step() {
    const std::vector<int64_t> order = sampler.indices();
    const Tensor idx = from_vector<int64_t>({order.begin(), order.begin() + 4}, {4});
    sampler.set_start_index(sampler.start_index() + 4);
    if (sampler.size() == 0) sampler.set_epoch(sampler.epoch() + 1);  // the next step starts a new epoch
    opt->zero_grad();
    Variable loss = cross_entropy(model(Variable(inputs(idx))), targets(idx));
    scaler.scale(loss).backward();
    scaler.step(*opt);
    scaler.update();
    sched->step();
  }
  // The bytes that must match: the weights, the optimizer's and the scheduler's state.
  std::vector<Tensor> bytes() const {
    std::vector<Tensor> out;
    for (const TensorMap& m : {model.state_dict(), opt->state_dict(), sched->state_dict(), scaler.state_dict()})
      for (const auto& [k, t] : m) out.push_back(t.clone());
    return out;
  }
};

std::string temp_path(const std::string& name) {
  static const minidl::testing::TempDir dir;  // removed when the test binary exits
  return dir.file(name);
}

void expect_same_bytes(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) minidl::testing::expect_equal(a[i], b[i]);
}

}  // namespace

TEST(Checkpoint, ResumingContinuesBitForBit) {
  const std::string path = temp_path("resume.safetensors");
  manual_seed(1);
  TrainingRun a;
  for (int i = 0; i < 3; ++i) a.step();
  save_checkpoint(path, a.state(), {{"epoch", "0"}});
  for (int i = 0; i < 3; ++i) a.step();  // the last one in epoch 1, on its new permutation
  EXPECT_EQ(a.sampler.epoch(), 1);
  EXPECT_EQ(a.sampler.start_index(), 4);
  EXPECT_NE(a.scaler.get_scale(), 1024.0);  // the scale moved: its state matters
  const Tensor a_rng = get_rng_state();

  manual_seed(999);  // another initialisation and generator: all of it must come from the file
  TrainingRun b;
  (void)rand({7});
  const Metadata meta = load_checkpoint(path, b.state());
  EXPECT_EQ(meta.at("epoch"), "0");
  EXPECT_EQ(meta.at("checkpoint_parts"), "model,optimizer,scheduler,scaler,sampler,rng_state");
  EXPECT_EQ(b.sampler.start_index(), 12);
  for (int i = 0; i < 3; ++i) b.step();
  expect_same_bytes(b.bytes(), a.bytes());
  minidl::testing::expect_equal(get_rng_state(), a_rng);  // the same dropout masks were drawn
  std::filesystem::remove(path);
}

TEST(Checkpoint, KeysUsePyTorchsPrefixes) {
  const std::string path = temp_path("keys.safetensors");
  manual_seed(2);
  TrainingRun a;
  a.step();
  save_checkpoint(path, a.state());
  const SafetensorsFile f = load(path);
  EXPECT_TRUE(f.tensors.count("model.0.weight"));
  EXPECT_TRUE(f.tensors.count("scheduler.last_epoch"));
  EXPECT_TRUE(f.tensors.count("scaler.scale"));
  EXPECT_TRUE(f.tensors.count("sampler.start_index"));
  EXPECT_TRUE(f.tensors.count("rng_state"));
  bool has_optimizer_key = false;
  for (const auto& [k, t] : f.tensors) has_optimizer_key |= k.rfind("optimizer.", 0) == 0;
  EXPECT_TRUE(has_optimizer_key);
  EXPECT_EQ(f.metadata.at("tensor_crc32").size(), 8u);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp." + std::to_string(::getpid())));  // renamed into place
  std::filesystem::remove(path);
}

TEST(Checkpoint, DamagedFilesAndMissingPartsAreRefusedByName) {
  const std::string path = temp_path("damaged.safetensors");
  manual_seed(3);
  TrainingRun a;
  a.step();
  save_checkpoint(path, {.model = a.model, .optimizer = *a.opt});
  TrainingRun b;
  // a part that was not saved: names the file and the part
  EXPECT_THROW_MSG(load_checkpoint(path, b.state()), std::runtime_error,
                   path + ": the checkpoint holds no 'scheduler' (its parts are model,optimizer)");
  // a model whose state_dict lacks a key of the object: names the file, the part and the key
  nn::Sequential bigger;
  bigger.push_back<nn::Linear>(nn::LinearOptions{.in = 4, .out = 8});
  bigger.push_back<nn::ReLU>();
  bigger.push_back<nn::Dropout>(nn::DropoutOptions{.p = 0.25});
  bigger.push_back<nn::Linear>(nn::LinearOptions{.in = 8, .out = 3});
  bigger.push_back<nn::Linear>(nn::LinearOptions{.in = 3, .out = 3});
  EXPECT_THROW_MSG(load_checkpoint(path, {.model = bigger}), std::runtime_error, path + ": cannot load 'model': ");
  EXPECT_THROW_MSG(load_checkpoint(path, {.model = bigger}), std::runtime_error, "4.weight");

  const std::string original = [&] {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  const auto write = [&](const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  };
  // one flipped bit in the last tensor's bytes: the CRC-32 no longer matches
  std::string flipped = original;
  flipped.back() = static_cast<char>(flipped.back() ^ 1);
  write(flipped);
  EXPECT_THROW_MSG(load_checkpoint(path, {.model = b.model}), std::runtime_error,
                   path + " is corrupt: its tensor bytes have CRC-32 ");
  // truncated: the safetensors reader names the file
  write(original.substr(0, original.size() - 10));
  EXPECT_THROW_MSG(load_checkpoint(path, {.model = b.model}), std::runtime_error, path);
  // a plain safetensors file is not a checkpoint
  save({{"w", ones({2})}}, path);
  EXPECT_THROW_MSG(load_checkpoint(path, {.model = b.model}), std::runtime_error,
                   path + " is not a checkpoint: its metadata lacks 'checkpoint_parts'");
  // b's model is untouched by the refused loads
  write(original);
  EXPECT_NO_THROW(load_checkpoint(path, {.model = b.model, .optimizer = *b.opt}));
  minidl::testing::expect_equal(b.model.state_dict().at("0.weight"), a.model.state_dict().at("0.weight"));
  std::filesystem::remove(path);
}

TEST(Checkpoint, ReservedMetadataAndEmptyStatesAreRefused) {
  TrainingRun a;
  EXPECT_THROW_MSG(save_checkpoint(temp_path("x"), a.state(), {{"tensor_crc32", "0"}}), std::invalid_argument,
                   "'tensor_crc32' is the checkpoint's own");
  EXPECT_THROW_MSG(save_checkpoint(temp_path("x"), {}), std::invalid_argument, "no part to save");
  const TrainingRun& c = a;
  const std::string path = temp_path("const.safetensors");
  save_checkpoint(path, {.model = c.model});  // a const object can be saved ...
  EXPECT_THROW_MSG(load_checkpoint(path, {.model = c.model}), std::invalid_argument, "given as a const object");
  std::filesystem::remove(path);
}
