// tests/autograd/test_autocast.cpp — autocast (autograd/autocast.h): the thread-local, nestable
// guard; under it linear / matmul / conv2d / scaled-dot-product attention compute the float32 op
// on bfloat16- (or float16-) rounded operands — linear and matmul through the bfloat16 GEMM, equal
// to the float32 product of the rounded operands up to summation order and thread-count
// independent — and their backward is that of the same composition written with the rounded
// operands and the rounded dy, giving float32 gradients to float32 parameters; outside the guard
// nothing changes.
#include <string>
#include <thread>

#include "minidl/autograd/autograd_all.h"
#include "minidl/kernels/cpu/attention.h"
#include "minidl/kernels/cpu/parallel.h"
#include "tests/common/testing.h"

using namespace minidl;
using minidl::testing::expect_close;
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
  EXPECT_THROW_MSG(autocast{DType::Float64}, std::invalid_argument, "autocast: expected bfloat16, float16 or float32");
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

// round_to, autocast's rounding of an operand a float32 kernel multiplies: the bits of the two
// casts, forward and backward, for bfloat16 (one pass) and float16 (the casts themselves), on a
// transposed view too; a dtype it cannot round to is named.
TEST(Autocast, RoundToIsThePairOfCastsForwardAndBackward) {
  for (DType low : {DType::BFloat16, DType::Float16}) {
    const Tensor base = mul(sample({70, 33}, 20), 300.0);  // large enough to round in both dtypes
    const Variable x(base.transpose(0, 1), true), x2(base.transpose(0, 1), true);
    const Variable y = round_to(x, low), y2 = to(to(x2, low), DType::Float32);
    ASSERT_EQ(y.dtype(), DType::Float32);
    expect_equal(y.data(), y2.data(), std::string("forward, ") + dtype_name(low));
    const Tensor g = mul(sample({33, 70}, 21), 3.0);
    y.backward(g);
    y2.backward(g);
    expect_equal(x.grad(), x2.grad(), std::string("backward, ") + dtype_name(low));
  }
  EXPECT_THROW_MSG(round_to(sample({3}, 1), DType::Float64), std::invalid_argument,
                   "round_to: expected a float32 tensor and bfloat16 or float16, got float32[3] on cpu and float64");
}

// autocast(BFloat16)'s linear and matmul multiply bfloat16 bit patterns (kernels::cpu::gemm_bf16):
// the same products as float32 kernels on the rounded operands widened back, up to the order of
// the float32 sums (rtol 1e-5; the forward, whose sums start from the bias and may cancel, within
// 1e-5 of the sum of |products|: an unrounded operand would be off by about 2^-9 of it). Backward: dy is rounded to bfloat16 once for its products, and each
// gradient is rounded to bfloat16 and widened to float32 on the float32 leaf.
constexpr double kSumOrder = 1e-5;

TEST(Autocast, BFloat16LinearIsTheProductOfRoundedOperandsForwardAndBackward) {
  const Variable x = param({3, 9, 70}, 1), w = param({33, 70}, 2), b = param({33}, 3);
  Variable y;
  {
    autocast guard(DType::BFloat16);
    y = linear(x, w, b);
  }
  ASSERT_EQ(y.dtype(), DType::Float32);
  const Tensor x2 = rounded(x.data()).reshape({27, 70}), wr = rounded(w.data());
  const Tensor y_bound = addmm(abs(rounded(b.data())), abs(x2), abs(wr).t()).view({3, 9, 33});
  minidl::testing::expect_within_product_bound(y.data(), addmm(rounded(b.data()), x2, wr.t()).view({3, 9, 33}), y_bound,
                                               kSumOrder, "autocast linear forward");
  // and not the unrounded float32 result (the inputs are not bfloat16 numbers)
  EXPECT_GT(minidl::testing::max_abs_diff(y.data(), matmul(x.data(), w.data().t()) + b.data()), 1e-4);

  const Tensor g = sample({3, 9, 33}, 4);
  y.backward(g);
  const Tensor gr = rounded(g).reshape({27, 33});
  expect_close(x.grad(), rounded(mm(gr, wr)).view({3, 9, 70}), kSumOrder, 1e-7, "dx = dy W");
  expect_close(w.grad(), rounded(mm(gr.t(), x2)), kSumOrder, 1e-7, "dW = dy^T x");
  expect_close(b.grad(), rounded(sum(gr, {0})), kSumOrder, 1e-7, "db");
  for (const Variable& v : {x, w, b}) EXPECT_EQ(v.grad().dtype(), DType::Float32);
  // each gradient is a bfloat16 number: rounding it again changes nothing
  expect_equal(w.grad(), rounded(w.grad()), "dW is bfloat16-rounded");
}

// linear and conv2d cast their float32 operands inside their own node: the leaves are its direct
// inputs (no cast node keeps a bfloat16 copy of a gradient between them), and the gradients are
// the bits the cast nodes would give (the tests above and below). An operand that already is
// bfloat16 is not cast, and its gradient comes back bfloat16.
TEST(Autocast, LinearAndConv2dCastInsideTheirOwnNode) {
  const Variable x = param({5, 16}, 1), w = param({8, 16}, 2), b = param({8}, 3);
  const Variable xi = param({2, 3, 6, 6}, 4), k = param({4, 3, 3, 3}, 5);
  Variable y, c;
  {
    autocast guard(DType::BFloat16);
    y = linear(x, w, b);
    c = conv2d(xi, k, Variable(), Conv2dParams{.pad_h = 1, .pad_w = 1});
  }
  ASSERT_TRUE(y.grad_fn() && c.grad_fn());
  EXPECT_EQ(y.grad_fn()->name, "LinearBackward");
  ASSERT_EQ(y.grad_fn()->inputs.size(), 3u);
  EXPECT_EQ(y.grad_fn()->inputs[0].impl(), x.impl());
  EXPECT_EQ(y.grad_fn()->inputs[1].impl(), w.impl());
  EXPECT_EQ(y.grad_fn()->inputs[2].impl(), b.impl());
  EXPECT_EQ(c.grad_fn()->inputs[0].impl(), xi.impl());
  EXPECT_EQ(c.grad_fn()->inputs[1].impl(), k.impl());

  const Variable xb(x.data().to(DType::BFloat16), true);
  {
    autocast guard(DType::BFloat16);
    sum(linear(xb, w, b)).backward();
  }
  EXPECT_EQ(xb.grad().dtype(), DType::BFloat16);
  EXPECT_EQ(w.grad().dtype(), DType::Float32);
  expect_equal(xb.grad().to(DType::Float32), rounded(mm(ones({5, 8}), rounded(w.data()))), "dx of a bfloat16 input");
}

TEST(Autocast, BFloat16MatmulIsTheProductOfRoundedOperandsForwardAndBackward) {
  const Variable a = param({2, 40, 33}, 5), b = param({2, 33, 17}, 6);
  Variable y;
  {
    autocast guard(DType::BFloat16);
    y = matmul(a, b);
  }
  ASSERT_EQ(y.dtype(), DType::Float32);
  const Tensor ar = rounded(a.data()), br = rounded(b.data());
  expect_close(y.data(), matmul(ar, br), kSumOrder, 1e-7, "autocast matmul (batched)");
  const Tensor g = sample({2, 40, 17}, 7);
  y.backward(g);
  const Tensor gr = rounded(g);
  expect_close(a.grad(), rounded(matmul(gr, br.transpose(-1, -2))), kSumOrder, 1e-7, "da = dy b^T");
  expect_close(b.grad(), rounded(matmul(ar.transpose(-1, -2), gr)), kSumOrder, 1e-7, "db = a^T dy");
  // a matrix times a vector, and a batch times one matrix (the gradient summed over the batch)
  const Variable v = param({33}, 8), m = param({33, 5}, 9);
  Variable mv, bm;
  {
    autocast guard(DType::BFloat16);
    mv = matmul(a, v);
    bm = matmul(a, m);
  }
  expect_close(mv.data(), matmul(ar, rounded(v.data())), kSumOrder, 1e-7, "matrix-vector");
  sum(bm).backward();
  expect_close(m.grad(), rounded(mm(ar.reshape({80, 33}).t(), ones({80, 5}))), kSumOrder, 1e-7,
               "dm summed over the batch");
}

TEST(Autocast, BFloat16ProductsGiveTheSameBitsOnOneAndTwoThreads) {
  const int saved = kernels::cpu::get_num_threads();
  auto run = [](int threads) {
    kernels::cpu::set_num_threads(threads);
    const Variable x = param({300, 96}, 10), w = param({130, 96}, 11), b = param({130}, 12);
    const Variable c = param({4, 60, 96}, 13);
    Variable loss;
    {
      autocast guard(DType::BFloat16);
      const Variable h = linear(x, w, b);  // (300, 130)
      loss = add(sum(mul(h, h)), sum(matmul(c, transpose(w, 0, 1))));
    }
    loss.backward();
    return std::vector<Tensor>{loss.data(), x.grad(), w.grad(), b.grad(), c.grad()};
  };
  const std::vector<Tensor> one = run(1), two = run(2);
  kernels::cpu::set_num_threads(saved);
  for (size_t i = 0; i < one.size(); ++i) expect_equal(two[i], one[i], "result " + std::to_string(i));
}

// packed_self_attention from the projection's operands: the bits of packed_self_attention(linear(x,
// w, b)) forward and backward, under autocast(BFloat16) (where the projection's GEMM stores qkv
// rounded and no rounding pass runs), autocast(Float16) on the CPU (rounded by round_to), and
// outside autocast; causal too. linear's round_output alone: y rounded, the same gradients.
TEST(Autocast, PackedSelfAttentionFromTheProjectionIsTheSameBits) {
  const int64_t B = 2, L = 7, E = 16, H = 2;
  const Tensor g = sample({B, L, E}, 20);
  for (int mode = 0; mode < 3; ++mode)
    for (bool causal : {false, true}) {
      auto run = [&](bool fused) {
        const Variable x = param({B, L, E}, 21), w = param({3 * E, E}, 22), b = param({3 * E}, 23);
        Variable y;
        {
          autocast guard(mode == 0 ? DType::BFloat16 : DType::Float16, mode != 2);
          y = fused ? packed_self_attention(x, w, b, H, 0.35, causal)
                    : packed_self_attention(linear(x, w, b), H, 0.35, causal);
        }
        y.backward(g);
        return std::vector<Tensor>{y.data(), x.grad(), w.grad(), b.grad()};
      };
      const std::vector<Tensor> fused = run(true), plain = run(false);
      const char* names[] = {"out", "dx", "dw", "db"};
      for (size_t i = 0; i < fused.size(); ++i)
        expect_equal(fused[i], plain[i], std::string(names[i]) + " in mode " + std::to_string(mode));
    }

  const Variable x = param({5, 24}, 24), w = param({40, 24}, 25), b = param({40}, 26);
  const Variable x2(x.data(), true), w2(w.data(), true), b2(b.data(), true);
  Variable y, y2, y3;
  {
    autocast guard(DType::BFloat16);
    y = linear(x, w, b, /*round_output=*/true);
    y2 = linear(x2, w2, b2);
    y3 = linear(x2, w2, Variable(), /*round_output=*/true);
  }
  expect_equal(y.data(), round_to(y2.data(), DType::BFloat16), "linear's rounded output");
  expect_equal(y3.data(),
               round_to(linear(round_to(x2, DType::BFloat16), round_to(w2, DType::BFloat16), Variable()).data(),
                        DType::BFloat16),
               "without a bias");
  EXPECT_GT(minidl::testing::max_abs_diff(y.data(), y2.data()), 0.0);
  const Tensor gy = sample({5, 40}, 27);
  y.backward(gy);
  y2.backward(gy);
  expect_equal(x.grad(), x2.grad(), "dx");
  expect_equal(w.grad(), w2.grad(), "dw");
  expect_equal(b.grad(), b2.grad(), "db");
  expect_equal(linear(x, w, b, true).data(), linear(x, w, b).data(), "outside autocast: nothing rounded");
}

// packed_self_attention under autocast(BFloat16): the tensor op with bf16_products, forward and
// backward, bit for bit — the bfloat16-product kernel (P and dS rounded for its products too)
// where the CPU runs it, which differs from the float32 kernel on the same rounded qkv; that
// float32 kernel where it does not.
TEST(Autocast, PackedSelfAttentionUnderBfloat16TakesTheBfloat16ProductKernel) {
  const int64_t B = 2, L = 9, H = 2, D = 8;
  const Variable qkv = param({B, L, 3 * H * D}, 30);
  const Tensor g = sample({B, L, H * D}, 31);
  Variable y;
  {
    autocast guard(DType::BFloat16);
    y = packed_self_attention(qkv, H, 0.35, false);
  }
  y.backward(g);
  const Tensor rq = rounded(qkv.data());
  const PackedAttentionResult r = packed_attention_forward(rq, H, 0.35, false, /*bf16_products=*/true);
  expect_equal(y.data(), r.out, "out");
  expect_equal(qkv.grad(), rounded(packed_attention_backward(rq, r.weights, g, H, 0.35, false, true)), "dqkv");
  const Tensor f = packed_attention_forward(rq, H, 0.35, false, false).out;
  if (kernels::cpu::packed_attention_bf16_supported())
    EXPECT_GT(minidl::testing::max_abs_diff(r.out, f), 0.0) << "the bfloat16 kernel gave the float32 kernel's bits";
  else
    expect_equal(r.out, f, "without AVX512_BF16: the float32 kernel");
}

TEST(Autocast, AttentionRoundsTheOperandsOfBothProducts) {
  // attention: softmax(q k^T * scale) v with both products on rounded operands, softmax in float32
  const Variable q = param({2, 3, 4}, 7), k = param({2, 5, 4}, 8), v = param({2, 5, 4}, 9);
  autocast guard(DType::BFloat16);
  const Variable out = scaled_dot_product_attention(q, k, v);
  ASSERT_EQ(out.dtype(), DType::Float32);
  const Tensor scores = mul(matmul(rounded(q.data()), rounded(k.data()).transpose(-1, -2)), 0.5);
  const Tensor expect = matmul(rounded(softmax(scores, -1)), rounded(v.data()));
  expect_close(out.data(), expect, kSumOrder, 1e-7, "autocast attention");
}

// conv2d of a layer whose float32 path is the direct kernel (fewer than 8 input channels): the
// float32 op on the widened rounded operands on every CPU, forward and backward (the bfloat16
// kernel's layers: tests/tensor/test_ops_conv.cpp, tests/kernels/test_cpu_conv_bf16.cpp).
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
