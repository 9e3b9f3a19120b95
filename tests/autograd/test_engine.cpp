// tests/autograd/test_engine.cpp — the backward engine: accumulation, errors, retain_graph,
// no_grad, detach, post-accumulate hooks, and a custom Function checked with gradcheck.
#include "tests/common/gradcheck.h"
#include "tests/common/testing.h"

using namespace minidl;
using minidl::testing::expect_close;

TEST(Engine, GradientOfSquareIsTwoX) {
  Variable x(from_vector<float>({1, -2, 3}), true);
  Variable y = sum(mul(x, x));
  y.backward();
  expect_close(x.grad(), from_vector<float>({2, -4, 6}), 0, 1e-6);
}

TEST(Engine, SharedSubexpressionAccumulatesBothPaths) {
  Variable x(from_vector<double>({2.0}), true);
  Variable a = mul(x, 3.0);  // 3x
  Variable y = add(mul(a, a), a);  // 9x^2 + 3x -> dy/dx = 18x + 3 = 39
  y.backward();
  EXPECT_DOUBLE_EQ(x.grad().item(), 39.0);
}

TEST(Engine, LeafGradAccumulatesAcrossBackwardCalls) {
  Variable x(from_vector<float>({1, 2}), true);
  sum(mul(x, 2.0)).backward();
  sum(mul(x, 2.0)).backward();
  expect_close(x.grad(), from_vector<float>({4, 4}), 0, 0);
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
}

TEST(Engine, NonScalarBackwardNeedsGradient) {
  Variable x(from_vector<float>({1, 2}), true);
  Variable y = mul(x, 2.0);
  EXPECT_THROW_MSG(y.backward(), std::logic_error, "grad can be implicitly created only for scalar outputs");
  y.backward(from_vector<float>({1, 10}));
  expect_close(x.grad(), from_vector<float>({2, 20}), 0, 0);
}

TEST(Engine, SecondBackwardWithoutRetainGraphFails) {
  Variable x(from_vector<float>({1, 2}), true);
  Variable y = sum(exp(x));
  y.backward();
  EXPECT_THROW_MSG(y.backward(), std::logic_error, "backward through the graph a second time");
}

TEST(Engine, RetainGraphAllowsSecondBackward) {
  Variable x(from_vector<float>({0, 1}), true);
  Variable y = sum(exp(x));
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  expect_close(x.grad(), from_vector<float>({2.0f, 2.0f * std::exp(1.0f)}), 1e-6, 1e-6);
}

TEST(Engine, NoGradRecordsNoGraph) {
  Variable x(from_vector<float>({1}), true);
  Variable y;
  {
    NoGradGuard ng;
    y = mul(x, 2.0);
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(y.is_leaf());
  EXPECT_THROW_MSG(y.backward(), std::logic_error, "does not require grad");
}

TEST(Engine, DetachCutsTheGraph) {
  Variable x(from_vector<float>({3}), true);
  Variable y = mul(x.detach(), x);  // d/dx = detached value = 3
  y.backward();
  EXPECT_FLOAT_EQ(static_cast<float>(x.grad().item()), 3.0f);
}

TEST(Engine, IntegerTensorsCannotRequireGrad) {
  EXPECT_THROW_MSG(Variable(arange(3), true), std::invalid_argument, "only floating tensors can require gradients");
}

TEST(Engine, PostAccumulateHookSeesTheFullGradientOncePerBackward) {
  Variable w(from_vector<float>({1, 1}), true);
  Variable x(from_vector<float>({2, 3}), false);
  std::vector<std::vector<float>> seen;
  w.register_post_accumulate_grad_hook([&](Tensor& g) { seen.push_back(g.to_vector<float>()); });
  // w is used twice: the hook must fire once, after both contributions (x + 1 per element)
  Variable y = sum(add(mul(w, x), w));
  y.backward();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (std::vector<float>{3, 4}));
}

TEST(Engine, HooksFireForLaterLayersFirst) {
  // y = w2 * relu(w1 * x): the hook of w2 (closer to the loss) runs before the hook of w1
  Variable w1(from_vector<float>({1}), true), w2(from_vector<float>({2}), true);
  Variable x(from_vector<float>({3}));
  std::vector<int> order;
  w1.register_post_accumulate_grad_hook([&](Tensor&) { order.push_back(1); });
  w2.register_post_accumulate_grad_hook([&](Tensor&) { order.push_back(2); });
  sum(mul(w2, relu(mul(w1, x)))).backward();
  EXPECT_EQ(order, (std::vector<int>{2, 1}));
}

namespace {
// y = x^3 as a custom Function (forward and backward written outside autograd/)
struct Cube : autograd::Function {
  Tensor x;
  std::string name() const override { return "CubeBackward"; }
  Tensor forward(const std::vector<Tensor>& in) override {
    x = in[0];
    return mul(mul(x, x), x);
  }
  std::vector<Tensor> backward(const Tensor& dy) override { return {mul(dy, mul(mul(x, x), 3.0))}; }
};
}  // namespace

// A leaf's gradient destination (DDP's bucket slot): linear writes dW there, and it becomes .grad
// with no copy — the same bits as a new gradient; a second contribution in the same pass (a weight
// used twice) is added as usual, and so is a gradient into a .grad that is already defined.
TEST(Engine, LinearWritesItsWeightGradientIntoTheDestination) {
  manual_seed(3);
  const Tensor x1 = randn({9, 5}), x2 = randn({9, 5});
  const auto run = [&](bool with_destination, bool twice, int backwards) {
    manual_seed(5);
    Variable w(randn({4, 5}), true);
    Variable b(zeros({4}), true);
    const Tensor dest = full({4, 5}, 99.0);  // stale contents
    if (with_destination) w.set_grad_destination(dest);
    for (int i = 0; i < backwards; ++i) {
      Variable y = linear(Variable(x1), w, b);
      if (twice) y = add(y, mul(linear(Variable(x2), w, b), 2.0));
      sum(mul(y, y)).backward();
    }
    return std::make_pair(w, dest);
  };
  for (bool twice : {false, true}) {
    for (int backwards : {1, 2}) {
      SCOPED_TRACE("twice " + std::to_string(twice) + ", backwards " + std::to_string(backwards));
      const auto [ref, unused] = run(false, twice, backwards);
      const auto [w, dest] = run(true, twice, backwards);
      minidl::testing::expect_equal(w.grad(), ref.grad(), "the same bits as a new gradient");
      // one contribution lands in the destination; a second one is added into a new tensor
      EXPECT_EQ(w.grad().is_same(dest), !twice);
    }
  }
  // after zero_grad (set to none) the next backward writes into the destination again
  auto [w, dest] = run(true, false, 1);
  w.zero_grad();
  sum(linear(Variable(x1), w, Variable())).backward();
  EXPECT_TRUE(w.grad().is_same(dest));
  expect_close(dest, sum(x1, {0}).unsqueeze(0).expand({4, 5}).contiguous(), 1e-5, 1e-5);  // dW of a sum
  w.set_grad_destination(Tensor());
  w.zero_grad();
  sum(linear(Variable(x1), w, Variable())).backward();
  EXPECT_FALSE(w.grad().storage() == dest.storage()) << "a removed destination is not written";

  Variable v(zeros({4, 5}), true);
  EXPECT_THROW_MSG(v.set_grad_destination(zeros({5, 4})), std::invalid_argument,
                   "set_grad_destination: got float32[5, 4] on cpu, expected a contiguous float32[4, 5] on cpu");
  EXPECT_THROW_MSG(v.set_grad_destination(zeros({5, 4}).t()), std::invalid_argument,
                   "set_grad_destination: got float32[4, 5] on cpu, expected a contiguous");
  EXPECT_THROW_MSG(mul(v, 2.0).set_grad_destination(zeros({4, 5})), std::logic_error,
                   "set_grad_destination: only leaf Variables have one");
}

TEST(Engine, CustomFunctionPassesGradcheck) {
  Tensor x = randn({2, 3}, RandomKey{1, 0}, DType::Float64);
  minidl::testing::gradcheck(
      [](const std::vector<Variable>& v) {
        return mul(autograd::Function::apply(std::make_shared<Cube>(), {v[0]}), v[0]);
      },
      {x}, "custom Cube * x");
}

TEST(Engine, CustomFunctionRecordsItsName) {
  Variable x(from_vector<float>({2}), true);
  Variable y = autograd::Function::apply(std::make_shared<Cube>(), {x});
  ASSERT_TRUE(y.grad_fn());
  EXPECT_EQ(y.grad_fn()->name, "CubeBackward");
  y.backward();
  EXPECT_FLOAT_EQ(static_cast<float>(x.grad().item()), 12.0f);
}
