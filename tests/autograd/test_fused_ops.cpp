// tests/autograd/test_fused_ops.cpp — the fused differentiable ops against the composed ops they
// replace (the composed versions stay in the code base as the reference), and what the engine
// keeps alive: packed self-attention, unmasked and causal, against slice + reshape + permute +
// attention_with_weights (with causal_mask) (values, the gradient, float64 finite differences, the
// same bits for 1 and 2 threads), and MultiheadAttention's fast path (unmasked and causal) against
// its composed path; linear against matmul + add; batch norm + ReLU (and Sequential's use of it)
// against the two ops; batch norm + ReLU + 2x2 max-pool (and Sequential's use of it, and where it
// falls back) against the three ops; batch norm + residual + ReLU (and
// BatchNorm2d::forward_add_relu) against the three ops; group norm + ReLU (and Sequential's use
// of it) against the two ops, bit for bit; the graph holding no
// intermediate results, and a leaf's first gradient kept without a copy only when nothing else
// holds it.
#include <cmath>
#include <memory>

#include "minidl/autograd/ops.h"
#include "minidl/kernels/cpu/parallel.h"
#include "minidl/nn/attention.h"
#include "minidl/nn/batchnorm.h"
#include "minidl/nn/conv.h"
#include "minidl/nn/fuse.h"
#include "minidl/nn/layers.h"
#include "minidl/nn/sequential.h"
#include "tests/common/gradcheck.h"
#include "tests/common/testing.h"

using namespace minidl;
using minidl::testing::expect_close;
using minidl::testing::expect_equal;

namespace {

// The composed reference: q, k, v sliced out of qkv (B, L, 3E), split into heads, attended (with
// the additive causal mask when causal), merged.
Variable composed_attention(const Variable& qkv, int64_t H, double scale, bool causal = false) {
  const int64_t B = qkv.size(0), L = qkv.size(1), E = qkv.size(2) / 3, D = E / H;
  auto head = [&](int64_t i) {
    return permute(reshape(slice(qkv, 2, i * E, (i + 1) * E), {B, L, H, D}), {0, 2, 1, 3});
  };
  const Tensor mask = causal ? causal_mask(L, L, qkv.dtype()) : Tensor();
  AttentionResult a = attention_with_weights(head(0), head(1), head(2), mask, scale, 0.0, false);
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
  EXPECT_TRUE(
      minidl::testing::gradcheck([&](const std::vector<Variable>& in) { return packed_self_attention(in[0], H, 0.7); },
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

TEST(FusedOps, PackedCausalAttentionMatchesMaskedComposedFloat64) {
  manual_seed(6);
  for (const int64_t H : {1, 3}) {
    const int64_t B = 2, L = 9, D = 5, E = H * D;
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    const Tensor qkv = randn({B, L, 3 * E}, DType::Float64), w = randn({B, L, E}, DType::Float64);
    const OutAndGrad fast = run([&](const Variable& x) { return packed_self_attention(x, H, scale, true); }, qkv, w);
    const OutAndGrad ref = run([&](const Variable& x) { return composed_attention(x, H, scale, true); }, qkv, w);
    const std::string heads = std::to_string(H) + " heads";
    expect_close(fast.out, ref.out, 1e-12, 1e-12, "output, " + heads);
    expect_close(fast.grad, ref.grad, 1e-12, 1e-12, "dqkv, " + heads);
    EXPECT_TRUE(minidl::testing::gradcheck(
        [&](const std::vector<Variable>& in) { return packed_self_attention(in[0], H, 0.7, true); },
        {randn({1, 5, 3 * E}, DType::Float64)}, "causal packed_self_attention"));
  }
}

// Rows of 4 vectors (63 tokens: the register path) and of 5 (65: the scratch rows).
TEST(FusedOps, PackedCausalAttentionFloat32MatchesComposedAndIgnoresThreadCount) {
  manual_seed(7);
  for (const auto& [L, heads] : {std::pair<int64_t, int64_t>{63, 4}, {65, 2}}) {
    const int64_t H = heads;  // a plain variable: the lambdas below capture it
    const int64_t B = 2, D = 16, E = H * D;
    const Tensor qkv = randn({B, L, 3 * E}), w = randn({B, L, E});
    const int saved = kernels::cpu::get_num_threads();
    OutAndGrad by_threads[2];
    for (int t : {1, 2}) {
      kernels::cpu::set_num_threads(t);
      by_threads[t - 1] = run([&](const Variable& x) { return packed_self_attention(x, H, 0.25, true); }, qkv, w);
    }
    kernels::cpu::set_num_threads(saved);
    const std::string what = "L = " + std::to_string(L);
    expect_equal(by_threads[0].out, by_threads[1].out, "output, 1 vs 2 threads, " + what);
    expect_equal(by_threads[0].grad, by_threads[1].grad, "dqkv, 1 vs 2 threads, " + what);
    const OutAndGrad ref = run([&](const Variable& x) { return composed_attention(x, H, 0.25, true); }, qkv, w);
    expect_close(by_threads[0].out, ref.out, 1e-5, 1e-6, "output, " + what);
    expect_close(by_threads[0].grad, ref.grad, 1e-4, 1e-5, "dqkv, " + what);
  }
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
  auto grads = [&](bool need_weights, bool causal) {
    mha.zero_grad();
    Variable in(x.clone(), true);
    Variable out = mha.forward(in, in, in, {.need_weights = need_weights, .is_causal = causal}).output;
    sum(mul(out, Variable(w))).backward();
    std::vector<Tensor> g{out.data(), in.grad()};
    for (auto& [name, p] : mha.named_parameters()) g.push_back(p.grad());
    return g;
  };
  const std::vector<Tensor> fast = grads(false, false), ref = grads(true, false);
  ASSERT_EQ(fast.size(), ref.size());
  // atol: 1e-6 of each tensor's largest entry (here 12 to 223), a few float ulps of the terms its
  // entries sum; those sums cancel (the key bias's gradient is zero in exact arithmetic), and the
  // two paths' softmax sums round differently (float lanes against double)
  for (size_t i = 0; i < fast.size(); ++i)
    expect_close(fast[i], ref[i], 1e-4, 1e-6 * max(abs(ref[i])).item<double>(), "tensor " + std::to_string(i));
  // is_causal without a mask tensor takes the fused causal kernel; with need_weights, the composed path
  const std::vector<Tensor> fast_causal = grads(false, true), ref_causal = grads(true, true);
  for (size_t i = 0; i < fast_causal.size(); ++i)
    expect_close(fast_causal[i], ref_causal[i], 1e-4, 1e-6 * max(abs(ref_causal[i])).item<double>(),
                 "causal tensor " + std::to_string(i));
  EXPECT_GT(max(abs(sub(fast_causal[0], fast[0]))).item<double>(), 0.1);  // the mask did something
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
        expect_close(fast[i], ref[i], tol, tol,
                     std::string(training ? "training" : "eval") + ", tensor " + std::to_string(i));
    }
  }
  EXPECT_TRUE(minidl::testing::gradcheck(
      [](const std::vector<Variable>& in) {
        return batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], true, 0.1, 1e-5, true);
      },
      {randn({3, 2, 2, 2}, DType::Float64), randn({2}, DType::Float64), randn({2}, DType::Float64)},
      "batch_norm relu"));

  nn::Sequential net;
  net.push_back<nn::BatchNorm2d>(nn::BatchNormOptions{.num_features = 3});
  net.push_back<nn::ReLU>();
  for (auto& [name, p] : net.named_parameters()) p.data().copy_(randn(p.shape()));
  ASSERT_EQ(nn::fuse_for_training(net), 1);
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
  for (size_t i = 0; i < fast.size(); ++i)
    expect_close(fast[i], ref[i], 1e-5, 1e-6, "Sequential, tensor " + std::to_string(i));
}

namespace {

// Values on a coarse grid (k / 2, |k| <= 4): many exact ties inside the 2x2 windows, and after
// the ReLU many windows with several zeros.
Tensor tied_values(const Shape& shape, DType dt) {
  const std::vector<double> k = randint(-8, 9, shape).to_vector<double>();
  std::vector<double> v(k.size());
  for (size_t i = 0; i < k.size(); ++i) v[i] = k[i] / 2;
  return from_vector(v, shape, dt);
}

const Pool2dParams kPool2{.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2};

// pooled output, dx, dweight, dbias, running mean, running var of batch norm (training, batch
// statistics) + ReLU + max_pool2d, fused or composed, for the loss sum(out * r).
std::vector<Tensor> bn_relu_pool(bool fused, const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& r,
                                 const Pool2dParams& p = kPool2) {
  Variable x(x0.clone(), true), w, b;
  if (w0.defined()) {
    w = Variable(w0.clone(), true);
    b = Variable(b0.clone(), true);
  }
  Tensor m = zeros({x0.size(1)}, x0.dtype()), v = ones({x0.size(1)}, x0.dtype());
  Variable y = fused ? batch_norm_relu_max_pool2d(x, m, v, w, b, true, 0.1, 1e-5, p)
                     : max_pool2d(batch_norm(x, m, v, w, b, true, 0.1, 1e-5, true), p);
  EXPECT_EQ(y.grad_fn()->name, fused && p.kernel_h == 2 ? "BatchNormReluMaxPool2dBackward" : "MaxPool2dBackward");
  sum(mul(y, Variable(r))).backward();
  return {y.data(), x.grad(), w0.defined() ? w.grad() : Tensor(), w0.defined() ? b.grad() : Tensor(), m, v};
}

}  // namespace

// The fused node against batch_norm(relu) -> max_pool2d on tied, negative-heavy input, odd sizes
// (a dropped last row / column), with and without affine. The output, which window element
// wins, the running statistics and therefore everything per element are the same bits; the
// per-channel sums of the backward add the same terms in double in another order (only the
// windows' winners instead of every element, the others being exact zeros), so dx, dweight and
// dbias agree to the rounding of those sums: 1e-12 in float64, and in float32 (where the sums
// are rounded to float before dx, as the composed pieces pass them) to a few float ulps.
TEST(FusedOps, GroupNormReluIsGroupNormThenReluBitForBit) {
  // The fused node computes the same values as the two ops, in float32 (the fast kernels) and
  // float64 (the reference loops), with and without the affine, for 1 and 2 threads; exact zeros
  // in the input put values on the ReLU's edge.
  manual_seed(11);
  const int saved = kernels::cpu::get_num_threads();
  for (DType dt : {DType::Float32, DType::Float64})
    for (bool affine : {true, false})
      for (int threads : {1, 2}) {
        kernels::cpu::set_num_threads(threads);
        Tensor x0 = randn({5, 6, 7, 3}, dt);
        x0.narrow(0, 0, 1).fill_(0.0);  // a constant group: every normalised value is 0
        const Tensor w0 = randn({6}, dt), b0 = randn({6}, dt), r = randn({5, 6, 7, 3}, dt);
        auto grads = [&](bool fused) {
          Variable x(x0.clone(), true), w(w0.clone(), true), b(b0.clone(), true);
          const Variable wv = affine ? w : Variable(), bv = affine ? b : Variable();
          Variable y = fused ? group_norm_relu(x, 3, wv, bv) : relu(group_norm(x, 3, wv, bv));
          sum(mul(y, Variable(r))).backward();
          std::vector<Tensor> out{y.data(), x.grad()};
          if (affine) out.insert(out.end(), {w.grad(), b.grad()});
          return out;
        };
        const auto fast = grads(true), ref = grads(false);
        ASSERT_EQ(fast.size(), ref.size());
        for (size_t i = 0; i < fast.size(); ++i)
          expect_equal(fast[i], ref[i],
                       std::string(dtype_name(dt)) + (affine ? " affine" : "") + ", " + std::to_string(threads) +
                           " threads, tensor " + std::to_string(i));
      }
  kernels::cpu::set_num_threads(saved);
  EXPECT_TRUE(minidl::testing::gradcheck(
      [](const std::vector<Variable>& in) { return group_norm_relu(in[0], 2, in[1], in[2]); },
      {randn({3, 4, 2, 2}, DType::Float64), randn({4}, DType::Float64), randn({4}, DType::Float64)},
      "group_norm_relu"));
  EXPECT_THROW(group_norm_relu(Variable(randn({2, 6, 3})), 4, Variable(), Variable()), std::invalid_argument);

  // Sequential runs a GroupNorm + ReLU as the fused node after fuse_for_training: the same bits
  nn::Sequential net;
  net.push_back<nn::Conv2d>(nn::Conv2dOptions{.in = 2, .out = 8, .kernel = 3, .padding = 1});
  net.push_back<nn::GroupNorm>(nn::GroupNormOptions{.num_groups = 4, .num_channels = 8});
  net.push_back<nn::ReLU>();
  for (auto& [name, p] : net.named_parameters()) p.data().copy_(randn(p.shape()));
  const Tensor x0 = randn({3, 2, 6, 6}), r = randn({3, 8, 6, 6});
  auto run_net = [&](std::string* node) {
    net.zero_grad();
    Variable x(x0.clone(), true);
    Variable y = net.forward(x);
    *node = y.grad_fn() ? y.grad_fn()->name : "";
    sum(mul(y, Variable(r))).backward();
    return std::vector<Tensor>{y.data(), x.grad(), net[1].named_parameters()[0].second.grad().clone()};
  };
  std::string plain_node, fused_node;
  const auto plain = run_net(&plain_node);
  ASSERT_EQ(nn::fuse_for_training(net), 1);
  ASSERT_EQ(net.fused_runs().size(), 1u);
  EXPECT_EQ(net.fused_runs()[0].name, "GroupNorm+ReLU");
  const auto fused = run_net(&fused_node);
  EXPECT_EQ(plain_node, "ReluBackward");
  EXPECT_EQ(fused_node, "GroupNormReluBackward");
  for (size_t i = 0; i < plain.size(); ++i) expect_equal(fused[i], plain[i], "Sequential, tensor " + std::to_string(i));
}

TEST(FusedOps, BatchNormAddReluMatchesTheThreeOps) {
  // relu(batch_norm(x) + residual): the same bits as the three ops, forward and backward (the
  // backward runs the same pieces on the same dz), and the same running statistics
  manual_seed(11);
  for (bool training : {true, false}) {
    for (DType dt : {DType::Float64, DType::Float32}) {
      const Tensor x0 = randn({4, 3, 5, 5}, dt), res0 = randn({4, 3, 5, 5}, dt), w0 = randn({3}, dt),
                   b0 = randn({3}, dt), r = randn({4, 3, 5, 5}, dt);
      const Tensor rm = randn({3}, dt), rv = rand({3}, dt) + 0.5;
      auto grads = [&](bool fused) {
        Variable x(x0.clone(), true), res(res0.clone(), true), w(w0.clone(), true), b(b0.clone(), true);
        Tensor m = rm.clone(), v = rv.clone();
        Variable y = fused ? batch_norm_add_relu(x, res, m, v, w, b, training, 0.1, 1e-5)
                           : relu(batch_norm(x, m, v, w, b, training, 0.1, 1e-5) + res);
        sum(mul(y, Variable(r))).backward();
        return std::vector<Tensor>{y.data(), x.grad(), res.grad(), w.grad(), b.grad(), m, v};
      };
      const auto fast = grads(true), ref = grads(false);
      for (size_t i = 0; i < fast.size(); ++i) {
        SCOPED_TRACE(std::string(training ? "training" : "eval") + ", tensor " + std::to_string(i));
        expect_equal(fast[i], ref[i]);
      }
    }
  }
  EXPECT_TRUE(minidl::testing::gradcheck(
      [](const std::vector<Variable>& in) {
        return batch_norm_add_relu(in[0], in[1], Tensor(), Tensor(), in[2], in[3], true, 0.1, 1e-5);
      },
      {randn({3, 2, 2, 2}, DType::Float64), randn({3, 2, 2, 2}, DType::Float64), randn({2}, DType::Float64),
       randn({2}, DType::Float64)},
      "batch_norm_add_relu"));

  // the layer's opt-in: BatchNorm2d::forward_add_relu against relu(bn(x) + residual), running stats included
  nn::BatchNorm2d fused({.num_features = 3}), plain({.num_features = 3});
  const Tensor w1 = randn({3}), b1 = randn({3});
  for (auto* bn : {&fused, &plain}) {
    bn->weight.data().copy_(w1);
    bn->bias.data().copy_(b1);
  }
  const Tensor x0 = randn({4, 3, 6, 6}), res0 = randn({4, 3, 6, 6});
  for (bool train : {true, false}) {
    fused.train(train);
    plain.train(train);
    expect_equal(fused.forward_add_relu(Variable(x0), Variable(res0)).data(),
                 relu(plain(Variable(x0)) + Variable(res0)).data());
    expect_equal(fused.running_mean, plain.running_mean);
    expect_equal(fused.running_var, plain.running_var);
  }
}

TEST(FusedOps, BatchNormReluMaxPoolMatchesTheComposedOps) {
  manual_seed(11);
  for (DType dt : {DType::Float64, DType::Float32}) {
    for (const Shape& shape : {Shape{4, 3, 6, 8}, Shape{3, 2, 7, 5}, Shape{2, 2, 6, 39}}) {
      for (bool affine : {true, false}) {
        const Shape pooled{shape[0], shape[1], shape[2] / 2, shape[3] / 2};
        const Tensor x0 = tied_values(shape, dt), r = randn(pooled, dt);
        const Tensor w0 = affine ? randn({shape[1]}, dt) : Tensor(), b0 = affine ? randn({shape[1]}, dt) : Tensor();
        const auto fast = bn_relu_pool(true, x0, w0, b0, r), ref = bn_relu_pool(false, x0, w0, b0, r);
        const std::string what =
            std::string(dt == DType::Float64 ? "float64 " : "float32 ") + shape_str(shape) + (affine ? " affine" : "");
        expect_equal(fast[0], ref[0], what + " output");
        expect_equal(fast[4], ref[4], what + " running_mean");
        expect_equal(fast[5], ref[5], what + " running_var");
        const double tol = dt == DType::Float64 ? 1e-12 : 1e-6;
        for (size_t i = 1; i < (affine ? 4u : 2u); ++i)
          expect_close(fast[i], ref[i], tol, tol, what + " gradient " + std::to_string(i));
      }
    }
  }
  EXPECT_TRUE(minidl::testing::gradcheck(
      [](const std::vector<Variable>& in) {
        return batch_norm_relu_max_pool2d(in[0], Tensor(), Tensor(), in[1], in[2], true, 0.1, 1e-5, kPool2);
      },
      {randn({2, 2, 4, 6}, DType::Float64), randn({2}, DType::Float64), randn({2}, DType::Float64)},
      "batch_norm relu max_pool2d"));
}

// The node's backward needs x, the winners' places with the ReLU's mask, and x at the winners, not
// the output: the output's storage is referenced by the result alone, so that under autocast the
// float32 output is freed once the next layer has its 16-bit copy.
TEST(FusedOps, BatchNormReluMaxPoolDoesNotKeepItsOutput) {
  manual_seed(15);
  Variable x(randn({2, 3, 4, 6}), true), w(randn({3}), true), b(randn({3}), true);
  Variable y = batch_norm_relu_max_pool2d(x, Tensor(), Tensor(), w, b, true, 0.1, 1e-5, kPool2);
  ASSERT_EQ(y.grad_fn()->name, "BatchNormReluMaxPool2dBackward");
  EXPECT_EQ(y.data().storage().use_count(), 1);
  Variable ref = max_pool2d(batch_norm(x, Tensor(), Tensor(), w, b, true, 0.1, 1e-5, true), kPool2);
  sum(y).backward();
  const Tensor dx = x.grad().clone();
  x.zero_grad();
  sum(ref).backward();
  expect_close(dx, x.grad(), 1e-6, 1e-6, "dx without the saved output");
}

// Big enough that every pass splits over 2 threads: the same bits with 1 and 2 threads.
TEST(FusedOps, BatchNormReluMaxPoolSameBitsForOneAndTwoThreads) {
  manual_seed(12);
  const Tensor x0 = tied_values({8, 64, 16, 16}, DType::Float32), r = randn({8, 64, 8, 8});
  const Tensor w0 = randn({64}), b0 = randn({64});
  const int saved = kernels::cpu::get_num_threads();
  kernels::cpu::set_num_threads(1);
  const auto one = bn_relu_pool(true, x0, w0, b0, r);
  kernels::cpu::set_num_threads(2);
  const auto two = bn_relu_pool(true, x0, w0, b0, r);
  kernels::cpu::set_num_threads(saved);
  for (size_t i = 0; i < one.size(); ++i) expect_equal(one[i], two[i], "tensor " + std::to_string(i));
}

// Other windows run the composed ops (the same result as calling them).
TEST(FusedOps, BatchNormReluMaxPoolFallsBackForOtherPools) {
  manual_seed(13);
  const Pool2dParams p3{.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1};
  const Tensor x0 = randn({2, 3, 6, 6}), r = randn({2, 3, 3, 3}), w0 = randn({3}), b0 = randn({3});
  const auto fast = bn_relu_pool(true, x0, w0, b0, r, p3), ref = bn_relu_pool(false, x0, w0, b0, r, p3);
  for (size_t i = 0; i < fast.size(); ++i) expect_equal(fast[i], ref[i], "tensor " + std::to_string(i));
}

// Sequential runs BatchNorm2d + ReLU + MaxPool2d(2) as the fused node in training, and as the
// modules one by one in eval and under a forward override (what dist::convert_sync_batchnorm
// installs); the values match running the modules one by one.
TEST(FusedOps, SequentialFusesBatchNormReluMaxPool) {
  manual_seed(14);
  nn::Sequential net;
  net.push_back<nn::BatchNorm2d>(nn::BatchNormOptions{.num_features = 3});
  net.push_back<nn::ReLU>();
  net.push_back<nn::MaxPool2d>(nn::Pool2dOptions{.kernel = 2});
  for (auto& [name, p] : net.named_parameters()) p.data().copy_(randn(p.shape()));
  ASSERT_EQ(nn::fuse_for_training(net), 1);
  const Tensor x0 = tied_values({4, 3, 6, 6}, DType::Float32), r = randn({4, 3, 3, 3});
  auto run_net = [&](bool whole, const char* node) {
    net.zero_grad();
    Variable x(x0.clone(), true);
    Variable y = whole ? net.forward(x) : net[2].forward(net[1].forward(net[0].forward(x)));
    EXPECT_EQ(y.grad_fn()->name, node);
    sum(mul(y, Variable(r))).backward();
    auto& bn = static_cast<nn::BatchNorm2d&>(net[0]);
    return std::vector<Tensor>{y.data(), x.grad(), bn.weight.grad().clone(), bn.running_mean.clone()};
  };
  {
    const auto fast = run_net(true, "BatchNormReluMaxPool2dBackward");
    const auto ref = run_net(false, "MaxPool2dBackward");
    expect_equal(fast[0], ref[0], "training output");
    for (size_t i = 1; i < 3; ++i) expect_close(fast[i], ref[i], 1e-6, 1e-6, "training, tensor " + std::to_string(i));
    // the running mean moved twice, by the same batch statistics each time
    expect_close(fast[3], mul(ref[3], 1.0 / 1.9), 1e-6, 1e-6, "running_mean after the first step");
  }
  net.eval();
  {
    const auto fast = run_net(true, "MaxPool2dBackward"), ref = run_net(false, "MaxPool2dBackward");
    for (size_t i = 0; i < fast.size(); ++i) expect_equal(fast[i], ref[i], "eval, tensor " + std::to_string(i));
  }
  net.train();
  auto& bn = static_cast<nn::BatchNorm2d&>(net[0]);
  bn.set_forward_override([](nn::BatchNormBase& m, const Variable& x) { return m.local_forward(x); }, "Overridden",
                          false);
  run_net(true, "MaxPool2dBackward");
  EXPECT_EQ(net[0].type_name(), "Overridden");
}
