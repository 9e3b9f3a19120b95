// tests/autograd/test_gradcheck_api.cpp — the activations, losses (with their options), attention
// and padding ops of the wider API against central differences in float64. Inputs near a kink
// (relu-like activations, |x|, smooth L1) are moved away from it so the differences are smooth.
#include <limits>

#include "tests/common/gradcheck.h"
#include "tests/common/testing.h"

using namespace minidl;
using minidl::testing::gradcheck;
using V = std::vector<Variable>;

namespace {
Tensor rn(const Shape& s, uint64_t stream) { return randn(s, RandomKey{4242, stream}, DType::Float64); }
Tensor unif(const Shape& s, uint64_t stream) { return rand(s, RandomKey{4242, stream}, DType::Float64); }
// values at least `gap` away from each of the points (kinks)
Tensor away_from(Tensor x, std::vector<double> points, double gap) {
  auto v = x.to_vector<double>();
  for (double& e : v)
    for (double p : points)
      if (std::abs(e - p) < gap) e = p + (e < p ? -gap : gap);
  return from_vector(v, x.shape());
}
}  // namespace

TEST(GradcheckApi, Activations) {
  gradcheck([](const V& v) { return silu(v[0]); }, {mul(rn({3, 4}, 1), 3.0)}, "silu");
  gradcheck([](const V& v) { return leaky_relu(v[0], 0.2); }, {away_from(rn({3, 4}, 2), {0.0}, 1e-3)}, "leaky_relu");
  gradcheck([](const V& v) { return elu(v[0], 0.7); }, {away_from(rn({3, 4}, 3), {0.0}, 1e-3)}, "elu");
  gradcheck([](const V& v) { return softplus(v[0], 2.0, 5.0); }, {away_from(mul(rn({3, 4}, 4), 3.0), {2.5}, 1e-3)},
            "softplus beta 2 threshold 5");
  gradcheck([](const V& v) { return softplus(v[0], 1.0, std::numeric_limits<double>::infinity()); },
            {mul(rn({3, 4}, 5), 30.0)}, "softplus without threshold, large |x|");
  gradcheck([](const V& v) { return hardswish(v[0]); }, {away_from(mul(rn({3, 4}, 6), 3.0), {-3.0, 3.0}, 1e-3)},
            "hardswish");
  gradcheck([](const V& v) { return abs(v[0]); }, {away_from(rn({3, 4}, 7), {0.0}, 1e-3)}, "abs");
}

TEST(GradcheckApi, ClassIndexLosses) {
  const Tensor t = from_vector<int64_t>({1, -100, 3, 0, 3}, {5});
  const Tensor w = add(unif({4}, 8), 0.5);
  for (Reduction red : {Reduction::None, Reduction::Sum, Reduction::Mean}) {
    gradcheck([&](const V& v) { return cross_entropy(v[0], t, {.weight = w, .reduction = red}); }, {rn({5, 4}, 9)},
              "cross_entropy weight + ignore_index, reduction " + std::to_string(static_cast<int>(red)));
    gradcheck([&](const V& v) { return nll_loss(log_softmax(v[0], 1), t, {.weight = w, .reduction = red}); },
              {rn({5, 4}, 10)}, "nll_loss weight + ignore_index");
  }
  gradcheck([&](const V& v) { return cross_entropy(v[0], t, {.weight = w, .label_smoothing = 0.3}); }, {rn({5, 4}, 11)},
            "cross_entropy label smoothing + weight + ignore_index");
  const Tensor t3 = from_vector<int64_t>({0, 2, 1, 2, -100, 0}, {2, 3});
  gradcheck([&](const V& v) { return cross_entropy(v[0], t3, {.reduction = Reduction::None}); }, {rn({2, 3, 3}, 12)},
            "cross_entropy (N, C, d)");
}

TEST(GradcheckApi, ElementwiseLosses) {
  gradcheck([](const V& v) { return binary_cross_entropy_with_logits(v[0], v[1]); },
            {mul(rn({3, 4}, 13), 3.0), unif({3, 4}, 14)}, "bce_with_logits (input and target)");
  const Tensor w = unif({1, 4}, 15), pw = mul(unif({4}, 16), 3.0);
  gradcheck(
      [&](const V& v) {
        return binary_cross_entropy_with_logits(v[0], v[1],
                                                {.weight = w, .pos_weight = pw, .reduction = Reduction::Sum});
      },
      {rn({3, 4}, 17), unif({3, 4}, 18)}, "bce_with_logits weight + pos_weight");
  gradcheck([](const V& v) { return mse_loss(v[0], v[1], Reduction::None); }, {rn({2, 3}, 19), rn({2, 3}, 20)},
            "mse none");
  const Tensor a = rn({3, 4}, 21), b = rn({3, 4}, 22);
  const Tensor b_l1 = sub(a, away_from(sub(a, b), {0.0}, 1e-3));  // a - b kept away from 0
  gradcheck([](const V& v) { return l1_loss(v[0], v[1], Reduction::Sum); }, {a, b_l1}, "l1_loss");
  const Tensor b_s = sub(a, away_from(sub(a, b), {-0.5, 0.0, 0.5}, 1e-3));
  gradcheck([](const V& v) { return smooth_l1_loss(v[0], v[1], Reduction::Mean, 0.5); }, {a, b_s},
            "smooth_l1_loss beta 0.5");
}

TEST(GradcheckApi, ScaledDotProductAttention) {
  const Tensor q = rn({2, 3, 4}, 23), k = rn({2, 5, 4}, 24), v = rn({2, 5, 3}, 25);
  gradcheck([](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2]); }, {q, k, v}, "sdpa");
  gradcheck([](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], {.is_causal = true}); }, {q, k, v},
            "sdpa causal");
  std::vector<uint8_t> allowed(15, 1);
  allowed[1] = allowed[7] = allowed[14] = 0;
  const Tensor mask = from_vector(allowed, {3, 5});
  gradcheck(
      [mask](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], {.attn_mask = mask, .scale = 0.7}); },
      {q, k, v}, "sdpa boolean mask, scale 0.7");
  const Tensor additive = rn({2, 3, 5}, 26);
  gradcheck([additive](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], {.attn_mask = additive}); },
            {q, k, v}, "sdpa float mask");
}

TEST(GradcheckApi, PadModesAndCeilModePooling) {
  const Tensor x = rn({1, 2, 4, 5}, 27);
  gradcheck([](const V& v) { return pad(v[0], {2, 1, 3, 1}, PadMode::Reflect); }, {x}, "pad reflect");
  gradcheck([](const V& v) { return pad(v[0], {1, 3, 2, 0}, PadMode::Replicate); }, {x}, "pad replicate");
  gradcheck([](const V& v) { return pad(v[0], {2, 2, 1, 3}, PadMode::Circular); }, {x}, "pad circular");
  gradcheck([](const V& v) { return pad(v[0], {1, 0, 0, 2}, PadMode::Constant, 0.5); }, {x}, "pad constant");
  Pool2dParams ceil{.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .ceil_mode = true};
  gradcheck([ceil](const V& v) { return avg_pool2d(v[0], ceil); }, {rn({1, 2, 7, 6}, 28)}, "avg_pool2d ceil_mode");
  gradcheck([ceil](const V& v) { return max_pool2d(v[0], ceil); }, {rn({1, 2, 7, 6}, 29)}, "max_pool2d ceil_mode");
}
