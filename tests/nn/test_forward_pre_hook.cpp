// tests/nn/test_forward_pre_hook.cpp — Module::register_forward_pre_hook: hooks run before forward
// when a module is called as module(x), in registration order, with the module and its input;
// forward(x) runs none; the handle removes its hook (remove(), its destructor, after a move; a
// no-op once the module is gone). Sequential calls its children so that their hooks run, fused
// runs included, and TransformerEncoderLayer calls its attention the same way.
#include <memory>
#include <string>
#include <vector>

#include "minidl/nn/nn_all.h"
#include "tests/common/testing.h"

using namespace minidl;
using minidl::testing::expect_equal;

TEST(ForwardPreHook, RunsBeforeForwardInRegistrationOrderWithTheModuleAndItsInput) {
  nn::Linear fc({.in = 3, .out = 2});
  std::vector<std::string> log;
  const Variable x(randn({4, 3}));
  nn::RemovableHandle a = fc.register_forward_pre_hook([&](nn::Module& m, const Variable& in) {
    EXPECT_EQ(&m, &fc);
    EXPECT_TRUE(in.is_same(x));
    log.push_back("a");
  });
  nn::RemovableHandle b = fc.register_forward_pre_hook([&](nn::Module&, const Variable&) { log.push_back("b"); });
  EXPECT_TRUE(fc.has_forward_pre_hooks());
  const Variable y = fc(x);
  EXPECT_EQ(log, (std::vector<std::string>{"a", "b"}));
  expect_equal(y.data(), fc.forward(x).data(), "the hooks do not change the output");
  EXPECT_EQ(log.size(), 2u);  // forward(x) itself runs no hook
  a.remove();
  a.remove();  // twice: a no-op
  (void)fc(x);
  EXPECT_EQ(log, (std::vector<std::string>{"a", "b", "b"}));
}

TEST(ForwardPreHook, TheHandleRemovesItsHookWhenDestroyedOrMovedInto) {
  nn::ReLU relu;
  int calls = 0;
  const Variable x(randn({2}));
  {
    nn::RemovableHandle h = relu.register_forward_pre_hook([&](nn::Module&, const Variable&) { ++calls; });
    (void)relu(x);
  }
  (void)relu(x);
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(relu.has_forward_pre_hooks());

  nn::RemovableHandle first = relu.register_forward_pre_hook([&](nn::Module&, const Variable&) { calls += 10; });
  nn::RemovableHandle moved = std::move(first);  // the hook stays, owned by `moved`
  (void)relu(x);
  EXPECT_EQ(calls, 11);
  moved = relu.register_forward_pre_hook([&](nn::Module&, const Variable&) { calls += 100; });  // drops the +10
  (void)relu(x);
  EXPECT_EQ(calls, 111);
}

TEST(ForwardPreHook, AHandleOutlivingItsModuleIsHarmless) {
  nn::RemovableHandle h;
  {
    nn::ReLU relu;
    h = relu.register_forward_pre_hook([](nn::Module&, const Variable&) {});
  }
  h.remove();  // the module is gone: nothing to do
  SUCCEED();
}

TEST(ForwardPreHook, AHookMayThrowAndForwardDoesNotRun) {
  nn::Linear fc({.in = 3, .out = 2});
  nn::RemovableHandle h =
      fc.register_forward_pre_hook([](nn::Module&, const Variable&) { throw std::runtime_error("not yet"); });
  EXPECT_THROW((void)fc(Variable(randn({1, 3}))), std::runtime_error);
  EXPECT_THROW((void)fc.register_forward_pre_hook(nullptr), std::invalid_argument);
}

// Each child's hook sees the output of the child before it.
TEST(ForwardPreHook, SequentialCallsEachChildWithItsOwnInput) {
  manual_seed(1);
  nn::Sequential net;
  net.push_back<nn::Linear>(nn::LinearOptions{.in = 3, .out = 4});
  net.push_back<nn::ReLU>();
  net.push_back<nn::Linear>(nn::LinearOptions{.in = 4, .out = 2});
  std::vector<Tensor> seen(3);
  std::vector<nn::RemovableHandle> hs;
  for (size_t i = 0; i < 3; ++i)
    hs.push_back(net[i].register_forward_pre_hook([&seen, i](nn::Module&, const Variable& in) { seen[i] = in.data(); }));
  const Variable x(randn({5, 3}));
  (void)net(x);
  const Variable h1 = net[0](x), h2 = net[1](h1);
  expect_equal(seen[0], x.data(), "input of child 0");
  expect_equal(seen[1], h1.data(), "input of child 1");
  expect_equal(seen[2], h2.data(), "input of child 2");
}

// A fused BatchNorm2d + ReLU + MaxPool2d run: the first child's hook runs before the fused call
// (which stays fused); a hook on a later child needs that child's own input, so the run's children
// are then called one by one — that hook sees BatchNorm's output — with the same values.
TEST(ForwardPreHook, AFusedRunCallsItsFirstChildsHooksOrRunsUnfusedForALaterChilds) {
  nn::Sequential net;
  net.push_back<nn::BatchNorm2d>(nn::BatchNormOptions{.num_features = 2});
  net.push_back<nn::ReLU>();
  net.push_back<nn::MaxPool2d>(nn::Pool2dOptions{.kernel = 2});
  ASSERT_EQ(nn::fuse_for_training(net), 1);
  const Variable x(randn({2, 2, 4, 4}));
  int bn_calls = 0;
  nn::RemovableHandle on_bn = net[0].register_forward_pre_hook([&](nn::Module&, const Variable& in) {
    EXPECT_TRUE(in.is_same(x));
    ++bn_calls;
  });
  const Variable fused = net(x);
  EXPECT_EQ(bn_calls, 1);
  EXPECT_EQ(fused.grad_fn()->name, "BatchNormReluMaxPool2dBackward");

  Tensor relu_input;
  nn::RemovableHandle on_relu =
      net[1].register_forward_pre_hook([&](nn::Module&, const Variable& in) { relu_input = in.data(); });
  const Variable unfused = net(x);
  EXPECT_EQ(bn_calls, 2);
  EXPECT_EQ(unfused.grad_fn()->name, "MaxPool2dBackward");
  expect_equal(relu_input, net[0](x).data(), "ReLU's hook sees BatchNorm's output");
  expect_equal(unfused.data(), fused.data(), "the same values unfused");

  on_relu.remove();
  EXPECT_EQ(net(x).grad_fn()->name, "BatchNormReluMaxPool2dBackward");  // fused again
}

// The attention of a TransformerEncoderLayer is called as self_attn(q, k, v): its hooks run,
// given the query (the normalised input).
TEST(ForwardPreHook, TransformerEncoderLayerCallsItsAttentionsHooks) {
  nn::TransformerEncoderLayer layer({.d_model = 8, .nhead = 2, .dim_feedforward = 16, .dropout = 0.0});
  const Variable x(randn({2, 5, 8}));
  Tensor query;
  nn::RemovableHandle h =
      layer.self_attn.register_forward_pre_hook([&](nn::Module&, const Variable& in) { query = in.data(); });
  (void)layer(x);
  ASSERT_TRUE(query.defined());
  expect_equal(query, layer.norm1(x).data(), "the query: norm1(x)");
}
