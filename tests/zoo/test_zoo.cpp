// tests/zoo/test_zoo.cpp — the model zoo (examples/zoo/zoo.h): each model matches its PyTorch twin
// in tools/compare_pytorch.py in parameter count, number of parameter tensors, state_dict size and
// first / last state_dict keys (PyTorch 2.15's numbers: `compare_pytorch.py --describe` prints
// them), maps a batch of 2 to the expected output shape, gives every parameter a finite, non-zero
// gradient, and one plain SGD step lowers the loss on the same fixed batch.
#include <cmath>

#include "examples/zoo/tinygpt.h"
#include "examples/zoo/zoo.h"
#include "tests/common/testing.h"

using namespace minidl;

namespace {

struct Twin {
  std::string name;
  int64_t parameters;  // PyTorch: sum(p.numel() for p in model.parameters())
  size_t parameter_tensors, state_entries;  // len(list(model.parameters())), len(model.state_dict())
  std::string first_key, last_key;  // list(model.state_dict())[0], [-1]
  Shape output_for_2;  // model(batch of 2).shape
};

const std::vector<Twin>& twins() {
  static const std::vector<Twin> t = {
      {"resnet20", 272'474, 65, 128, "stem.0.weight", "fc.bias", {2, 10}},
      {"mobilenet", 274'250, 41, 80, "features.0.weight", "fc.bias", {2, 10}},
      {"unet", 117'226, 36, 36, "down1.0.weight", "fc.bias", {2, 10}},
      {"mixer", 294'990, 54, 54, "stem.weight", "head.bias", {2, 10}},
      {"tinygpt", 110'336, 28, 28, "pos", "ln_f.bias", {2, 64, 96}},
  };
  return t;
}

class Zoo : public ::testing::TestWithParam<Twin> {};

TEST_P(Zoo, HasThePyTorchTwinsParametersAndStateDict) {
  const Twin& want = GetParam();
  const zoo::ZooModel* z = zoo::find(want.name);
  ASSERT_NE(z, nullptr) << want.name;
  manual_seed(0);
  auto model = z->make();
  EXPECT_EQ(model->num_parameters(), want.parameters);
  EXPECT_EQ(model->parameters().size(), want.parameter_tensors);
  const TensorMap state = model->state_dict();
  ASSERT_EQ(state.size(), want.state_entries);
  const auto named = model->named_parameters();
  EXPECT_EQ(named.front().first, want.first_key);
  EXPECT_EQ(named.back().first, want.last_key);
}

TEST_P(Zoo, MapsABatchOfTwoToTheExpectedShape) {
  const Twin& want = GetParam();
  const zoo::ZooModel* z = zoo::find(want.name);
  manual_seed(0);
  auto model = z->make();
  const zoo::Batch b = z->random_batch(2, RandomKey{7, 0});
  EXPECT_EQ(b.x.shape()[0], 2);
  const Variable out = (*model)(Variable(b.x));
  EXPECT_EQ(out.shape(), want.output_for_2);
  model->eval();  // BatchNorm's running statistics: the same shape
  EXPECT_EQ((*model)(Variable(b.x)).shape(), want.output_for_2);
}

TEST_P(Zoo, BackwardReachesEveryParameterAndOneSgdStepLowersTheLoss) {
  const Twin& want = GetParam();
  const zoo::ZooModel* z = zoo::find(want.name);
  manual_seed(0);
  auto model = z->make();
  optim::SGD opt(model->parameters(), {.lr = 0.01});
  const zoo::Batch b = z->random_batch(8, RandomKey{3, 0});
  Variable loss = zoo::loss((*model)(Variable(b.x)), b.y);
  const double before = loss.item();
  ASSERT_TRUE(std::isfinite(before));
  loss.backward();
  for (const auto& [name, p] : model->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << want.name << ": no gradient for " << name;
    double largest = 0;
    for (float g : p.grad().to_vector<float>()) {
      ASSERT_TRUE(std::isfinite(g)) << want.name << ": non-finite gradient in " << name;
      largest = std::max(largest, std::abs(static_cast<double>(g)));
    }
    EXPECT_GT(largest, 0.0) << want.name << ": all-zero gradient for " << name;
  }
  opt.step();
  const double after = zoo::loss((*model)(Variable(b.x)), b.y).item();
  EXPECT_LT(after, before) << want.name;
}

INSTANTIATE_TEST_SUITE_P(Models, Zoo, ::testing::ValuesIn(twins()),
                         [](const ::testing::TestParamInfo<Twin>& info) { return info.param.name; });

TEST(ZooTable, ListsEveryModelWithATwinAndNothingElse) {
  EXPECT_EQ(zoo::names(), "resnet20, mobilenet, unet, mixer, tinygpt");
  EXPECT_EQ(zoo::find("resnet"), nullptr);
  EXPECT_EQ(zoo::find("cnn"), nullptr);  // the reference models live in nn/models.h
}

TEST(ZooTinyGPT, RejectsFloatInputAndSequencesLongerThanTheBlock) {
  manual_seed(0);
  zoo::TinyGPT gpt;
  EXPECT_THROW(
      {
        try {
          gpt(Variable(rand({2, 64})));
        } catch (const std::invalid_argument& e) {
          EXPECT_THAT(e.what(), ::testing::HasSubstr("TinyGPT: expected int64 token ids (N, T) with T <= 64"));
          throw;
        }
      },
      std::invalid_argument);
  EXPECT_THROW(gpt(Variable(randint(0, 96, {2, 65}))), std::invalid_argument);
  EXPECT_EQ(gpt(Variable(randint(0, 96, {2, 5}))).shape(), (Shape{2, 5, 96}));  // shorter sequences are fine
}

}  // namespace
