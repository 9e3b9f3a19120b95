// tests/autograd/test_fused_ops.cpp — the fused differentiable ops against the composed ops they
// replace (the composed versions stay in the code base as the reference), and what the engine
// keeps alive: packed self-attention against slice + reshape + permute + attention_with_weights
// (values, the gradient, float64 finite differences, the same bits for 1 and 2 threads), and
// MultiheadAttention's fast path against its composed path; linear against matmul + add; batch
// norm + ReLU (and Sequential's use of it) against the two ops; the graph holding no
// intermediate results, and a leaf's first gradient kept without a copy only when nothing else
// holds it.
#include <cmath>
#include <memory>

#include "minidl/autograd/ops.h"
#include "minidl/kernels/cpu/parallel.h"
#include "minidl/nn/attention.h"
#include "minidl/nn/batchnorm.h"
#include "minidl/nn/layers.h"
#include "minidl/nn/sequential.h"
#include "tests/common/gradcheck.h"
#include "tests/common/testing.h"

using namespace minidl;
using minidl::testing::expect_close;
using minidl::testing::expect_equal;

namespace {

// The composed reference: q, k, v sliced out of qkv (B, L, 3E), split into heads, attended, merged.
Variable composed_attention(const Variable& qkv, int64_t H, double scale) {
  const int64_t B = qkv.size(0), L = qkv.size(1), E = qkv.size(2) / 3, D = E / H;
  auto head = [&](int64_t i) { return permute(reshape(slice(qkv, 2, i * E, (i + 1) * E), {B, L, H, D}), {0, 2, 1, 3}); };
  AttentionResult a = attention_with_weights(head(0), head(1), head(2), Tensor(), scale, 0.0, false);
  return reshape(permute(a.output, {0, 2, 1, 3}), {B, L, E});
}

struct OutAndGrad {
  Tensor out, grad;
};

// out = f(qkv) and d sum(out * w) / d qkv
template <class F> OutAndGrad run(F f, const Tensor& qkv_data, const Tensor& w) {
  Variable qkv(qkv_data.clone(), true);
  Variable out = f(qkv);
  sum(mul(out, Variable(w))).backward();
  return {out.data(), qkv.grad()};
}

}  // namespace

TEST(FusedOps, PackedAttentionMatchesComposedFloat64) {
  manual_seed(3);
  const int64_t B = 3, L = 7, H = 2, D = 4, E = H * D;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const Tensor qkv = randn({B, L, 3 * E}, DType::Float64), w = randn({B, L, E}, DType::Float64);
  const OutAndGrad fast = run([&](const Variable& x) { return packed_self_attention(x, H, scale); }, qkv, w);
  const OutAndGrad ref = run([&](const Variable& x) { return composed_attention(x, H, scale); }, qkv, w);
  expect_close(fast.out, ref.out, 1e-12, 1e-12, "output");
  expect_close(fast.grad, ref.grad, 1e-12, 1e-12, "dqkv");
  EXPECT_TRUE(minidl::testing::gradcheck([&](const std::vector<Variable>& in) { return packed_self_attention(in[0], H, 0.7); },
                                         {randn({1, 3, 3 * E}, DType::Float64)}, "packed_self_attention"));
}

TEST(FusedOps, PackedAttentionFloat32MatchesComposedAndIgnoresThreadCount) {
  manual_seed(4);
  const int64_t B = 2, L = 50, H = 4, D = 16, E = H * D;
  const Tensor qkv = randn({B, L, 3 * E}), w = randn({B, L, E});
  const int saved = kernels::cpu::get_num_threads();
  OutAndGrad by_threads[2];
  for (int t : {1, 2}) {
    kernels::cpu::set_num_threads(t);
    by_threads[t - 1] = run([&](const Variable& x) { return packed_self_attention(x, H, 0.25); }, qkv, w);
  }
  kernels::cpu::set_num_threads(saved);
  expect_equal(by_threads[0].out, by_threads[1].out, "output, 1 vs 2 threads");
  expect_equal(by_threads[0].grad, by_threads[1].grad, "dqkv, 1 vs 2 threads");
  const OutAndGrad ref = run([&](const Variable& x) { return composed_attention(x, H, 0.25); }, qkv, w);
  expect_close(by_threads[0].out, ref.out, 1e-5, 1e-6, "output");
  expect_close(by_threads[0].grad, ref.grad, 1e-4, 1e-5, "dqkv");
}

TEST(FusedOps, PackedAttentionRejectsBadInput) {
  EXPECT_THROW_MSG(packed_self_attention(Variable(randn({2, 3, 10})), 4, 1.0), std::invalid_argument,
                   "divisible by 4 heads");
  EXPECT_THROW_MSG(packed_attention_backward(randn({2, 3, 12}), randn({2, 4, 3, 2}), randn({2, 3, 4}), 4, 1.0),
                   std::invalid_argument, "do not match qkv");
}

// need_weights = true takes the composed path; false (no mask, no dropout, CPU) the fused one.
TEST(FusedOps, MultiheadAttentionFastPathMatchesComposedPath) {
  manual_seed(5);
  nn::MultiheadAttention mha({.embed_dim = 16, .num_heads = 4});
  for (auto& [name, p] : mha.named_parameters()) p.data().copy_(randn(p.shape()));
  const Tensor x = randn({3, 6, 16}), w = randn({3, 6, 16});
  auto grads = [&](bool need_weights) {
    mha.zero_grad();
    Variable in(x.clone(), true);
    Variable out = mha.forward(in, in, in, {.need_weights = need_weights}).output;
    sum(mul(out, Variable(w))).backward();
    std::vector<Tensor> g{out.data(), in.grad()};
    for (auto& [name, p] : mha.named_parameters()) g.push_back(p.grad());
    return g;
  };
  const std::vector<Tensor> fast = grads(false), ref = grads(true);
  ASSERT_EQ(fast.size(), ref.size());
  for (size_t i = 0; i < fast.size(); ++i) expect_close(fast[i], ref[i], 1e-4, 1e-5, "tensor " + std::to_string(i));
}

// The graph keeps only what each backward saved: an intermediate nobody saved is freed as soon
// as its last handle goes, long before backward.
TEST(FusedOps, GraphKeepsNoIntermediateResults) {
  Variable x(randn({1000}), true);
  std::weak_ptr<Storage> y_storage;
  Variable z;
  {
    Variable y = add(x, 1.0);  // neither add's nor mul-by-scalar's backward saves y
    y_storage = y.data().storage();
    z = mul(y, 3.0);
  }
  EXPECT_TRUE(y_storage.expired());
  sum(z).backward();
  expect_close(x.grad(), full({1000}, 3.0), 0, 0, "dx");
}

// A leaf's first gradient becomes .grad without a copy only when no other tensor holds it.
TEST(FusedOps, FirstGradientIsNeverShared) {
  Variable x(randn({2, 3}), true);
  Tensor g = randn({6});
  reshape(x, {6}).backward(g);  // reshape's backward hands back a view of g
  EXPECT_NE(x.grad().storage(), g.storage());
  const Tensor expected = g.reshape({2, 3}).clone();
  g.fill_(7.0);
  expect_equal(x.grad(), expected, "x.grad after the caller's gradient changed");

  Variable a(randn({4}), true), b(randn({4}), true);
  sum(add(a, b)).backward();  // add hands the same tensor to both inputs
  EXPECT_NE(a.grad().storage(), b.grad().storage());
  a.grad().fill_(5.0);
  expect_equal(b.grad(), full({4}, 1.0), "b.grad after a.grad changed");
}

// linear (one node, bias added into the GEMM's output) against matmul(x, w^T) + b.
TEST(FusedOps, LinearMatchesMatmulPlusBias) {
  manual_seed(6);
  for (bool with_bias : {true, false}) {
    const Tensor x0 = randn({2, 5, 4}, DType::Float64), w0 = randn({3, 4}, DType::Float64);
    const Tensor b0 = randn({3}, DType::Float64), r = randn({2, 5, 3}, DType::Float64);
    auto grads = [&](bool fused) {
      Variable x(x0.clone(), true), w(w0.clone(), true), b(b0.clone(), true);
      Variable bias = with_bias ? b : Variable();
      Variable y = fused ? linear(x, w, bias) : matmul(x, transpose(w, 0, 1));
      if (!fused && with_bias) y = add(y, b);
      sum(mul(y, Variable(r))).backward();
      return std::vector<Tensor>{y.data(), x.grad(), w.grad(), with_bias ? b.grad() : Tensor()};
    };
    const auto fast = grads(true), ref = grads(false);
    for (size_t i = 0; i < 3; ++i) expect_close(fast[i], ref[i], 1e-12, 1e-12, "tensor " + std::to_string(i));
    if (with_bias) expect_close(fast[3], ref[3], 1e-12, 1e-12, "db");
  }
  EXPECT_TRUE(minidl::testing::gradcheck(
      [](const std::vector<Variable>& in) { return linear(in[0], in[1], in[2]); },
      {randn({3, 4}, DType::Float64), randn({2, 4}, DType::Float64), randn({2}, DType::Float64)}, "linear"));
}

// batch_norm(..., relu = true) against relu(batch_norm(...)), training and eval; and a Sequential's
// BatchNorm2d + ReLU (fused) against running its modules one by one (composed).
TEST(FusedOps, BatchNormReluMatchesBatchNormThenRelu) {
  manual_seed(7);
  for (bool training : {true, false}) {
    for (DType dt : {DType::Float64, DType::Float32}) {
      const Tensor x0 = randn({4, 3, 5, 5}, dt), w0 = randn({3}, dt), b0 = randn({3}, dt), r = randn({4, 3, 5, 5}, dt);
      const Tensor rm = randn({3}, dt), rv = rand({3}, dt) + 0.5;
      auto grads = [&](bool fused) {
        Variable x(x0.clone(), true), w(w0.clone(), true), b(b0.clone(), true);
        Tensor m = rm.clone(), v = rv.clone();
        Variable y = fused ? batch_norm(x, m, v, w, b, training, 0.1, 1e-5, true)
                           : relu(batch_norm(x, m, v, w, b, training, 0.1, 1e-5));
        sum(mul(y, Variable(r))).backward();
        return std::vector<Tensor>{y.data(), x.grad(), w.grad(), b.grad(), m, v};
      };
      const auto fast = grads(true), ref = grads(false);
      const double tol = dt == DType::Float64 ? 1e-12 : 1e-5;
      for (size_t i = 0; i < fast.size(); ++i)
        expect_close(fast[i], ref[i], tol, tol, std::string(training ? "training" : "eval") + ", tensor " + std::to_string(i));
    }
  }
  EXPECT_TRUE(minidl::testing::gradcheck(
      [](const std::vector<Variable>& in) {
        return batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], true, 0.1, 1e-5, true);
      },
      {randn({3, 2, 2, 2}, DType::Float64), randn({2}, DType::Float64), randn({2}, DType::Float64)}, "batch_norm relu"));

  nn::Sequential net;
  net.push_back<nn::BatchNorm2d>(nn::BatchNormOptions{.num_features = 3});
  net.push_back<nn::ReLU>();
  for (auto& [name, p] : net.named_parameters()) p.data().copy_(randn(p.shape()));
  const Tensor x0 = randn({4, 3, 6, 6}), r = randn({4, 3, 6, 6});
  auto run_net = [&](bool fused) {
    net.zero_grad();
    Variable x(x0.clone(), true);
    Variable y = fused ? net.forward(x) : net[1].forward(net[0].forward(x));
    EXPECT_EQ(y.grad_fn()->name, fused ? "BatchNormReluBackward" : "ReluBackward");
    sum(mul(y, Variable(r))).backward();
    return std::vector<Tensor>{y.data(), x.grad(), net[0].named_parameters()[0].second.grad().clone()};
  };
  const auto fast = run_net(true), ref = run_net(false);
  for (size_t i = 0; i < fast.size(); ++i) expect_close(fast[i], ref[i], 1e-5, 1e-6, "Sequential, tensor " + std::to_string(i));
}
