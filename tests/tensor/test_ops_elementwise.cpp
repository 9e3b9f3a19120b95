// tests/tensor/test_ops_elementwise.cpp — element-wise ops: broadcasting, scalars, unary math,
// activation backward helpers, in-place updates, sum_to, non-contiguous inputs, int64, errors.
#include <cmath>

#include "tests/common/testing.h"

using namespace minidl;
using minidl::testing::expect_close;
using minidl::testing::expect_equal;

namespace {
Tensor f32(std::vector<float> v, Shape s = {}) { return from_vector<float>(v, s); }
Tensor f64(std::vector<double> v, Shape s = {}) { return from_vector<double>(v, s); }
Tensor i64(std::vector<int64_t> v, Shape s = {}) { return from_vector<int64_t>(v, s); }
}  // namespace

TEST(BroadcastShapes, RightAlignedWithOnes) {
  EXPECT_EQ(broadcast_shapes({2, 1, 4}, {3, 1}, "add"), (Shape{2, 3, 4}));
  EXPECT_EQ(broadcast_shapes({}, {5}, "add"), (Shape{5}));
  EXPECT_THROW_MSG(broadcast_shapes({2, 3}, {4}, "add"), std::invalid_argument,
                   "add: shapes [2, 3] and [4] cannot be broadcast");
}

TEST(Elementwise, AddSameShape) { expect_equal(add(f32({1, 2, 3}), f32({10, 20, 30})), f32({11, 22, 33})); }

TEST(Elementwise, SubMulDivBroadcastRowAndColumn) {
  Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor row = f32({1, 2, 3}, {3});
  Tensor col = f32({10, 100}, {2, 1});
  expect_equal(sub(a, row), f32({0, 0, 0, 3, 3, 3}, {2, 3}));
  expect_equal(mul(a, col), f32({10, 20, 30, 400, 500, 600}, {2, 3}));
  expect_equal(div(a, row), f32({1, 1, 1, 4, 2.5f, 2}, {2, 3}));
  // (2, 1) op (1, 3) -> (2, 3)
  expect_equal(add(col, row.view({1, 3})), f32({11, 12, 13, 101, 102, 103}, {2, 3}));
}

TEST(Elementwise, ZeroDimScalarTensorBroadcasts) {
  expect_equal(mul(f64({1, 2}), scalar_tensor(3.0, DType::Float64)), f64({3, 6}));
}

TEST(Elementwise, NonContiguousTransposedAndSlicedInputs) {
  Tensor a = arange(0, 6, 1, DType::Float32).reshape({2, 3});
  Tensor t = a.t();  // (3, 2) strides (1, 3)
  Tensor b = arange(0, 6, 1, DType::Float32).reshape({3, 2});
  expect_equal(add(t, b), f32({0, 4, 3, 7, 6, 10}, {3, 2}));
  Tensor s = arange(0, 10, 1, DType::Float32).slice(0, 1, 10, 3);  // [1, 4, 7]
  expect_equal(mul(s, s), f32({1, 16, 49}));
}

TEST(Elementwise, LargeContiguousAndBroadcastMatchScalarLoop) {
  Tensor a = randn({300, 257}), b = randn({257});
  Tensor c = add(a, b);
  auto va = a.to_vector<float>(), vb = b.to_vector<float>(), vc = c.to_vector<float>();
  for (int64_t i = 0; i < 300; ++i)
    for (int64_t j = 0; j < 257; ++j) ASSERT_EQ(vc[i * 257 + j], va[i * 257 + j] + vb[j]);
}

// A transposed operand (innermost stride 37) is made contiguous by the tiled copy before the
// loop: whole and partial 16 x 16 tiles, beside a broadcast row and under a unary op.
TEST(Elementwise, LargeTransposedOperandMatchesScalarLoop) {
  Tensor a = randn({3, 37, 49}), b = randn({3, 49, 37}), row = randn({37});
  Tensor t = b.transpose(1, 2);  // (3, 37, 49), strides (1813, 1, 37)
  auto va = a.to_vector<float>(), vb = b.to_vector<float>(), vr = row.to_vector<float>();
  auto vc = add(a, t).to_vector<float>(), vd = mul(t, row.view({37, 1})).to_vector<float>(),
       ve = neg(t).to_vector<float>();
  for (int64_t n = 0; n < 3; ++n)
    for (int64_t i = 0; i < 37; ++i)
      for (int64_t j = 0; j < 49; ++j) {
        const int64_t e = (n * 37 + i) * 49 + j;
        const float bt = vb[(n * 49 + j) * 37 + i];
        ASSERT_EQ(vc[e], va[e] + bt);
        ASSERT_EQ(vd[e], bt * vr[i]);
        ASSERT_EQ(ve[e], -bt);
      }
}

TEST(Elementwise, Int64Arithmetic) {
  Tensor a = i64({5, -2, 7}), b = i64({3, 4, 7});
  expect_equal(add(a, b), i64({8, 2, 14}));
  expect_equal(sub(a, b), i64({2, -6, 0}));
  expect_equal(mul(a, b), i64({15, -8, 49}));
  expect_equal(maximum(a, b), i64({5, 4, 7}));
  expect_equal(minimum(a, b), i64({3, -2, 7}));
  expect_equal(eq(a, b), i64({0, 0, 1}));
  expect_equal(gt(a, b), i64({1, 0, 0}));
  expect_equal(lt(a, b), i64({0, 1, 0}));
  expect_equal(a + 1.0, i64({6, -1, 8}));
  expect_equal(a * 2.0, i64({10, -4, 14}));
}

TEST(Elementwise, ComparisonsGiveOnesAndZerosInInputDtype) {
  Tensor a = f32({1, 2, 3}), b = f32({3, 2, 1});
  expect_equal(eq(a, b), f32({0, 1, 0}));
  expect_equal(gt(a, b), f32({0, 0, 1}));
  expect_equal(lt(a, b), f32({1, 0, 0}));
}

TEST(Elementwise, IsFiniteIsZeroOnNanAndInfOnly) {
  const float inf = INFINITY;
  expect_equal(isfinite(f32({1, -inf, NAN, inf, 0, -3e38f, 1e-45f})), f32({1, 0, 0, 0, 1, 1, 1}));
  expect_equal(isfinite(f64({NAN, 1e308, -INFINITY})), f64({0, 1, 0}));
  expect_equal(isfinite(i64({-5, 0, 7})), i64({1, 1, 1}));  // integers are always finite
  expect_equal(isfinite(f32({1, NAN, 3, inf}, {2, 2}).transpose(0, 1)), f32({1, 1, 0, 0}, {2, 2}));
}

TEST(Elementwise, WherePicksAWhereCondIsNonZeroAndBroadcastsAllThree) {
  expect_equal(where(f32({1, 0, 2, 0}), f32({10, 20, 30, 40}), f32({-1, -2, -3, -4})), f32({10, -2, 30, -4}));
  // cond (2, 1), a (1, 3), b 0-d -> (2, 3); NaN in the unpicked operand does not leak
  expect_equal(where(f32({0, 1}, {2, 1}), f32({1, NAN, 3}, {1, 3}), f32({7})), f32({7, 7, 7, 1, NAN, 3}, {2, 3}));
  expect_equal(where(f32({0, 1}), f32({NAN, 1}), f32({5, NAN})), f32({5, 1}));
  expect_equal(where(i64({0, 3}), i64({1, 2}), i64({8, 9})), i64({8, 2}));
  EXPECT_THROW(where(f64({1}), f32({1}), f32({2})), std::invalid_argument);  // cond in the operands' dtype
  EXPECT_THROW(where(f32({1, 0}), f32({1, 2, 3}), f32({2})), std::invalid_argument);  // shapes
}

TEST(Elementwise, ScalarOperators) {
  Tensor a = f32({2, 4});
  expect_equal(a + 1.0, f32({3, 5}));
  expect_equal(a - 1.0, f32({1, 3}));
  expect_equal(a * 3.0, f32({6, 12}));
  expect_equal(3.0 * a, f32({6, 12}));
  expect_equal(a / 4.0, f32({0.5f, 1}));
  expect_equal(-a, f32({-2, -4}));
  expect_equal(a + a, f32({4, 8}));
  expect_equal(a - a, f32({0, 0}));
  expect_equal(a * a, f32({4, 16}));
  expect_equal(a / a, f32({1, 1}));
}

TEST(Elementwise, UnaryMath) {
  Tensor x = f64({-1.0, 0.0, 2.0});
  expect_close(exp(x), f64({std::exp(-1.0), 1.0, std::exp(2.0)}), 1e-15, 0);
  expect_close(log(f64({1.0, std::exp(1.0)})), f64({0.0, 1.0}), 1e-15, 1e-15);
  expect_close(sqrt(f64({4.0, 9.0})), f64({2.0, 3.0}), 0, 0);
  expect_close(rsqrt(f64({4.0, 0.25})), f64({0.5, 2.0}), 0, 0);
  expect_equal(abs(x), f64({1.0, 0.0, 2.0}));
  expect_equal(neg(x), f64({1.0, -0.0, -2.0}));
  expect_close(tanh(x), f64({std::tanh(-1.0), 0.0, std::tanh(2.0)}), 1e-15, 0);
  expect_close(sigmoid(f64({0.0, 2.0, -800.0})), f64({0.5, 1.0 / (1.0 + std::exp(-2.0)), 0.0}), 1e-15, 0);
  expect_equal(relu(x), f64({0.0, 0.0, 2.0}));
  expect_close(pow(f64({2.0, 3.0}), 3.0), f64({8.0, 27.0}), 1e-15, 0);
  expect_equal(pow(f64({-3.0}), 2.0), f64({9.0}));
}

TEST(Elementwise, GeluExactAndTanhApproximation) {
  // torch.nn.functional.gelu(torch.tensor([-1., 0., 1.5], dtype=torch.float64))
  expect_close(gelu(f64({-1.0, 0.0, 1.5})), f64({-0.15865525393145707, 0.0, 1.399789198096713}), 1e-14, 1e-15);
  // approximate='tanh'
  expect_close(gelu(f64({-1.0, 0.0, 1.5}), true), f64({-0.15880800939172324, 0.0, 1.3995715769802328}), 1e-14, 1e-15);
}

TEST(Elementwise, UnaryOnNonContiguousInput) {
  Tensor a = f32({1, -2, 3, -4, 5, -6}, {2, 3}).t();
  expect_equal(relu(a), f32({1, 0, 0, 5, 3, 0}, {3, 2}));
}

TEST(Elementwise, BackwardHelpers) {
  Tensor x = f64({-1.0, 0.5}), dy = f64({2.0, 3.0});
  expect_equal(relu_backward(x, dy), f64({0.0, 3.0}));
  Tensor y = tanh(x);
  auto vy = y.to_vector<double>();
  expect_close(tanh_backward(y, dy), f64({2 * (1 - vy[0] * vy[0]), 3 * (1 - vy[1] * vy[1])}), 1e-15, 0);
  Tensor s = sigmoid(x);
  auto vs = s.to_vector<double>();
  expect_close(sigmoid_backward(s, dy), f64({2 * vs[0] * (1 - vs[0]), 3 * vs[1] * (1 - vs[1])}), 1e-15, 0);
  // central differences of gelu
  for (bool approx : {false, true}) {
    const double h = 1e-6;
    auto gp = gelu(x + h, approx).to_vector<double>(), gm = gelu(x - h, approx).to_vector<double>();
    expect_close(gelu_backward(x, dy, approx), f64({2 * (gp[0] - gm[0]) / (2 * h), 3 * (gp[1] - gm[1]) / (2 * h)}),
                 1e-7, 1e-8);
  }
}

TEST(Elementwise, UnaryMathRejectsIntegers) {
  EXPECT_THROW_MSG(exp(i64({1})), std::invalid_argument, "exp: expected a floating dtype");
}

TEST(Elementwise, DtypeMismatchIsAnError) {
  EXPECT_THROW_MSG(add(f32({1}), f64({1})), std::invalid_argument, "add: dtype mismatch float32 vs float64");
}

TEST(Elementwise, ShapeMismatchIsAnError) {
  EXPECT_THROW_MSG(mul(zeros({2, 3}), zeros({4})), std::invalid_argument,
                   "mul: shapes [2, 3] and [4] cannot be broadcast");
}

TEST(InPlace, AddWithAlphaBroadcastsIntoA) {
  Tensor a = f32({1, 2, 3, 4}, {2, 2});
  Tensor& r = add_(a, f32({10, 20}), 0.5);
  EXPECT_TRUE(r.is_same(a));
  expect_equal(a, f32({6, 12, 8, 14}, {2, 2}));
}

TEST(InPlace, WritesThroughANonContiguousView) {
  Tensor base = zeros({2, 3});
  Tensor v = base.t();  // (3, 2)
  add_(v, f32({1, 2, 3, 4, 5, 6}, {3, 2}));
  expect_equal(base, f32({1, 3, 5, 2, 4, 6}, {2, 3}));
}

TEST(InPlace, MulLerpAxpbyAddcmulAddcdiv) {
  Tensor a = f64({1.0, 2.0});
  mul_(a, 3.0);
  expect_equal(a, f64({3.0, 6.0}));
  mul_(a, f64({2.0, 0.5}));
  expect_equal(a, f64({6.0, 3.0}));
  lerp_(a, f64({10.0, 5.0}), 0.25);  // a + 0.25 (b - a)
  expect_equal(a, f64({7.0, 3.5}));
  axpby_(a, 0.5, f64({2.0, 4.0}), 2.0);  // a * 0.5 + b * 2
  expect_equal(a, f64({7.5, 9.75}));
  addcmul_(a, f64({1.0, 2.0}), f64({3.0, 4.0}), 0.5);  // + 0.5 * b * c
  expect_equal(a, f64({9.0, 13.75}));
  addcdiv_(a, f64({1.0, 2.0}), f64({4.0, 8.0}), -2.0);  // - 2 * b / c
  expect_equal(a, f64({8.5, 13.25}));
}

TEST(InPlace, Int64AddAndMul) {
  Tensor a = i64({1, 2});
  add_(a, i64({3, 4}));
  mul_(a, 2.0);
  expect_equal(a, i64({8, 12}));
}

TEST(InPlace, ErrorsNameTheOp) {
  Tensor a = zeros({2});
  EXPECT_THROW_MSG(add_(a, zeros({2, 2})), std::invalid_argument, "add_: shape [2, 2] cannot be broadcast");
  EXPECT_THROW_MSG(add_(a, zeros({2}, DType::Float64)), std::invalid_argument, "add_: dtype mismatch");
  Tensor e = zeros({1}).expand({3});
  EXPECT_THROW_MSG(mul_(e, 2.0), std::invalid_argument, "mul_: cannot write in place into an expanded");
}

TEST(SumTo, InvertsBroadcasting) {
  Tensor g = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  expect_equal(sum_to(g, {3}), f32({5, 7, 9}));
  expect_equal(sum_to(g, {2, 1}), f32({6, 15}, {2, 1}));
  expect_equal(sum_to(g, {1, 1}), f32({21}, {1, 1}));
  expect_equal(sum_to(g, {}), scalar_tensor(21));
  EXPECT_TRUE(sum_to(g, {2, 3}).is_same(g));
  EXPECT_THROW_MSG(sum_to(g, {4}), std::invalid_argument, "sum_to");
}
