// tests/autograd/test_autocast.cpp — autocast (autograd/autocast.h): the thread-local, nestable
// guard; under it linear / matmul / conv2d / scaled-dot-product attention compute the float32 op
// on bfloat16- (or float16-) rounded operands, and their backward is that of the same composition
// written by hand with the differentiable cast `to`, giving float32 gradients to float32
// parameters; outside the guard nothing changes.
#include <thread>

#include "minidl/autograd/autograd_all.h"
#include "tests/common/testing.h"

using namespace minidl;
using minidl::testing::expect_equal;

namespace {

Tensor sample(const Shape& shape, uint32_t seed) {
  return from_vector(minidl::testing::values(static_cast<size_t>(shape_numel(shape)), seed), shape);
}
Variable param(const Shape& shape, uint32_t seed) { return Variable(sample(shape, seed), true); }
// x rounded to dtype and widened back: the operand autocast feeds the float32 kernel
Tensor rounded(const Tensor& x, DType dtype = DType::BFloat16) { return x.to(dtype).to(DType::Float32); }
Variable round_trip(const Variable& x, DType dtype = DType::BFloat16) { return to(to(x, dtype), DType::Float32); }

}  // namespace

TEST(Autocast, GuardIsNestableAndRestoresWhatItFound) {
  EXPECT_FALSE(is_autocast_enabled());
  EXPECT_EQ(autocast_dtype(), DType::Float32);
  {
    autocast outer(DType::BFloat16);
    EXPECT_TRUE(is_autocast_enabled());
    EXPECT_EQ(autocast_dtype(), DType::BFloat16);
    {
      autocast off(DType::Float32);
      EXPECT_FALSE(is_autocast_enabled());
      {
        autocast fp16(DType::Float16);
        EXPECT_EQ(autocast_dtype(), DType::Float16);
      }
      EXPECT_FALSE(is_autocast_enabled());
    }
    {
      autocast disabled(DType::BFloat16, /*enabled=*/false);
      EXPECT_FALSE(is_autocast_enabled());
    }
    EXPECT_TRUE(is_autocast_enabled());
    EXPECT_EQ(autocast_dtype(), DType::BFloat16);
  }
  EXPECT_FALSE(is_autocast_enabled());
  EXPECT_THROW_MSG(autocast(DType::Float64), std::invalid_argument, "autocast: expected bfloat16, float16 or float32");
}

TEST(Autocast, StateBelongsToTheCallingThread) {
  autocast guard(DType::BFloat16);
  bool other_enabled = true;
  std::thread([&] { other_enabled = is_autocast_enabled(); }).join();
  EXPECT_FALSE(other_enabled);
  EXPECT_TRUE(is_autocast_enabled());
}

TEST(Autocast, ToIsDifferentiableAndCastsTheGradientBack) {
  Variable x(from_vector<float>({1.0f + 1.0f / 256, 3.0f}), true);
  Variable y = to(x, DType::BFloat16);
  EXPECT_EQ(y.dtype(), DType::BFloat16);
  EXPECT_EQ(y.data().to_vector<float>(), (std::vector<float>{1.0f, 3.0f}));
  sum(mul(to(y, DType::Float32), Variable(from_vector<float>({0.5f, 1.0f / 3})))).backward();
  ASSERT_EQ(x.grad().dtype(), DType::Float32);
  // the gradient passed through bfloat16: 1/3 rounds to 0.333984375
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{0.5f, 0.333984375f}));
}

TEST(Autocast, LinearIsTheFloat32OpOnRoundedOperands) {
  const Variable x = param({5, 7}, 1), w = param({3, 7}, 2), b = param({3}, 3);
  Variable y;
  {
    autocast guard(DType::BFloat16);
    y = linear(x, w, b);
  }
  ASSERT_EQ(y.dtype(), DType::Float32);
  const Tensor expect = addmm(rounded(b.data()), rounded(x.data()), rounded(w.data()).t());
  expect_equal(y.data(), expect, "autocast linear forward");
  // and not the unrounded float32 result (the inputs are not bfloat16 numbers)
  EXPECT_GT(minidl::testing::max_abs_diff(y.data(), addmm(b.data(), x.data(), w.data().t())), 1e-4);

  // backward: the same as the composition by hand, float32 gradients on the float32 leaves
  const Tensor g = sample({5, 3}, 4);
  y.backward(g);
  const Variable x2(x.data(), true), w2(w.data(), true), b2(b.data(), true);
  linear(round_trip(x2), round_trip(w2), round_trip(b2)).backward(g);
  for (const auto& [got, want, name] : {std::tuple{x, x2, "dx"}, std::tuple{w, w2, "dW"}, std::tuple{b, b2, "db"}}) {
    ASSERT_EQ(got.grad().dtype(), DType::Float32) << name;
    expect_equal(got.grad(), want.grad(), name);
  }
}

TEST(Autocast, MatmulAndAttentionRoundTheirOperands) {
  const Variable a = param({2, 4, 6}, 5), b = param({2, 6, 3}, 6);
  autocast guard(DType::BFloat16);
  const Variable y = matmul(a, b);
  expect_equal(y.data(), matmul(rounded(a.data()), rounded(b.data())), "autocast matmul (batched)");
  // attention: softmax(q k^T * scale) v with both products on rounded operands, softmax in float32
  const Variable q = param({2, 3, 4}, 7), k = param({2, 5, 4}, 8), v = param({2, 5, 4}, 9);
  const Variable out = scaled_dot_product_attention(q, k, v);
  ASSERT_EQ(out.dtype(), DType::Float32);
  const Tensor scores = mul(matmul(rounded(q.data()), rounded(k.data()).transpose(-1, -2)), 0.5);
  const Tensor expect = matmul(rounded(softmax(scores, -1)), rounded(v.data()));
  expect_equal(out.data(), expect, "autocast attention");
}

TEST(Autocast, Conv2dIsTheFloat32OpOnRoundedOperandsAndItsBackwardToo) {
  const Variable x = param({2, 3, 6, 6}, 10), w = param({4, 3, 3, 3}, 11), b = param({4}, 12);
  const Conv2dParams p{.stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1};
  Variable y;
  {
    autocast guard(DType::BFloat16);
    y = conv2d(x, w, b, p);
  }
  expect_equal(y.data(), conv2d_forward(rounded(x.data()), rounded(w.data()), rounded(b.data()), p),
               "autocast conv2d forward");
  const Tensor g = sample(y.shape(), 13);
  y.backward(g);
  const Variable x2(x.data(), true), w2(w.data(), true), b2(b.data(), true);
  conv2d(round_trip(x2), round_trip(w2), round_trip(b2), p).backward(g);
  expect_equal(x.grad(), x2.grad(), "dx");
  expect_equal(w.grad(), w2.grad(), "dw");
  expect_equal(b.grad(), b2.grad(), "db");
  EXPECT_EQ(w.grad().dtype(), DType::Float32);
}

TEST(Autocast, Float16RoundsToFloat16) {
  const Variable x = param({3, 4}, 14), w = param({2, 4}, 15);
  autocast guard(DType::Float16);
  expect_equal(linear(x, w, Variable()).data(),
               mm(rounded(x.data(), DType::Float16), rounded(w.data(), DType::Float16).t()), "float16 linear");
}

TEST(Autocast, NothingChangesOutsideTheGuardOrForOtherOps) {
  const Variable x = param({4, 5}, 16), w = param({3, 5}, 17);
  { autocast guard(DType::BFloat16); }
  expect_equal(linear(x, w, Variable()).data(), mm(x.data(), w.data().t()), "linear after the guard");
  autocast guard(DType::BFloat16);
  // element-wise ops, softmax and losses stay float32 on unrounded values
  expect_equal(softmax(x, 1).data(), softmax(x.data(), 1), "softmax under autocast");
  expect_equal(mul(x, x).data(), mul(x.data(), x.data()), "mul under autocast");
  // float64 operands are left alone
  const Variable xd(x.data().to(DType::Float64)), wd(w.data().to(DType::Float64));
  expect_equal(linear(xd, wd, Variable()).data(), mm(xd.data(), wd.data().t()), "float64 linear");
}
