// tests/tensor/test_ops_linalg.cpp — mm, addmm and matmul: hand-computed products, transposed and
// sliced views (no copies needed), 1-d and batched broadcasting, dtypes, errors.
#include <cmath>
#include <string>
#include <vector>

#include "tests/common/testing.h"

using namespace minidl;
using minidl::testing::expect_close;
using minidl::testing::expect_equal;

namespace {
Tensor f32(std::vector<float> v, Shape s = {}) { return from_vector<float>(v, s); }
Tensor f64(std::vector<double> v, Shape s = {}) { return from_vector<double>(v, s); }

// Reference product of contiguous copies: (n, k) x (k, m), accumulated in double.
Tensor naive_mm(const Tensor& a, const Tensor& b) {
  const int64_t n = a.size(0), k = a.size(1), m = b.size(1);
  auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  std::vector<double> out(n * m, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j)
      for (int64_t p = 0; p < k; ++p) out[i * m + j] += va[i * k + p] * vb[p * m + j];
  return from_vector(out, {n, m}, a.dtype());
}
}  // namespace

TEST(Mm, HandComputed2x3Times3x2) {
  Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = f32({7, 8, 9, 10, 11, 12}, {3, 2});
  Tensor c = mm(a, b);
  EXPECT_EQ(c.dtype(), DType::Float32);
  expect_equal(c, f32({58, 64, 139, 154}, {2, 2}));
}

TEST(Mm, TransposedViewsOfEitherOperand) {
  Tensor a = randn({5, 7}, DType::Float64), b = randn({7, 4}, DType::Float64);
  Tensor at = a.t().contiguous().t();  // same values, column-major strides
  Tensor bt = b.t().contiguous().t();
  Tensor ref = naive_mm(a, b);
  expect_close(mm(at, b), ref, 1e-12, 1e-12);
  expect_close(mm(a, bt), ref, 1e-12, 1e-12);
  expect_close(mm(at, bt), ref, 1e-12, 1e-12);
  // a.t() of a (7, 5) matrix, as in the backward of a linear layer
  Tensor w = randn({7, 5}, DType::Float64);
  expect_close(mm(w.t(), b), naive_mm(w.t().contiguous(), b), 1e-12, 1e-12);
}

TEST(Mm, SlicedRowsAndColumns) {
  Tensor big = randn({10, 12}, DType::Float64);
  Tensor a = big.slice(0, 1, 6).slice(1, 2, 9);  // (5, 7), row stride 12
  Tensor b = big.slice(0, 0, 7).slice(1, 0, 3);  // (7, 3)
  expect_close(mm(a, b), naive_mm(a.contiguous(), b.contiguous()), 1e-12, 1e-12);
  Tensor strided = big.slice(1, 0, 12, 2);  // (10, 6), column stride 2: copied internally
  expect_close(mm(strided.t(), big.slice(1, 0, 4)), naive_mm(strided.t().contiguous(), big.slice(1, 0, 4).contiguous()),
               1e-12, 1e-12);
}

TEST(Mm, LargeFloat32MatchesDoubleReference) {
  Tensor a = randn({130, 300}), b = randn({300, 70});
  expect_close(mm(a, b), naive_mm(a, b).to(DType::Float32), 1e-4, 1e-4);
}

TEST(Mm, EmptyInnerDimGivesZeros) { expect_equal(mm(zeros({2, 0}), zeros({0, 3})), zeros({2, 3})); }

TEST(Matmul, VectorVectorIsADot) {
  Tensor d = matmul(f32({1, 2, 3}), f32({4, 5, 6}));
  EXPECT_EQ(d.dim(), 0);
  EXPECT_EQ(d.item(), 32.0);
}

TEST(Matmul, MatrixVectorAndVectorMatrix) {
  Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  expect_equal(matmul(a, f32({1, 0, -1})), f32({-2, -2}));
  expect_equal(matmul(f32({1, -1}), a), f32({-3, -3, -3}));
}

TEST(Matmul, BatchedTimesMatrixFoldsBatch) {
  Tensor x = randn({2, 3, 4}, DType::Float64), w = randn({4, 5}, DType::Float64);
  Tensor y = matmul(x, w);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 5}));
  for (int64_t i = 0; i < 2; ++i) expect_close(y[i], naive_mm(x[i], w), 1e-12, 1e-12);
}

TEST(Matmul, BatchDimsBroadcast) {
  Tensor a = randn({2, 1, 3, 4}, DType::Float64), b = randn({3, 4, 2}, DType::Float64);
  Tensor c = matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 3, 3, 2}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) expect_close(c[i][j], naive_mm(a[i][0], b[j]), 1e-12, 1e-12);
}

TEST(Matmul, BatchedWithTransposedViewLikeAttention) {
  Tensor q = randn({2, 5, 8}, DType::Float64), k = randn({2, 5, 8}, DType::Float64);
  Tensor s = matmul(q, k.transpose(-2, -1));  // (2, 5, 5)
  for (int64_t i = 0; i < 2; ++i) expect_close(s[i], naive_mm(q[i], k[i].t().contiguous()), 1e-12, 1e-12);
}

TEST(Matmul, VectorTimesBatch) {
  Tensor v = f64({1, 2}), b = randn({3, 2, 4}, DType::Float64);
  Tensor c = matmul(v, b);
  EXPECT_EQ(c.shape(), (Shape{3, 4}));
  for (int64_t i = 0; i < 3; ++i) expect_close(c[i], naive_mm(v.view({1, 2}), b[i]).view({4}), 1e-12, 1e-12);
}

TEST(Matmul, Errors) {
  EXPECT_THROW_MSG(matmul(zeros({2, 3}), zeros({4, 5})), std::invalid_argument,
                   "matmul: shapes [2, 3] and [4, 5] cannot be multiplied (3 != 4)");
  EXPECT_THROW_MSG(matmul(zeros({2, 3}), zeros({3, 2}, DType::Float64)), std::invalid_argument,
                   "matmul: dtype mismatch float32 vs float64");
  EXPECT_THROW_MSG(matmul(arange(4).view({2, 2}), arange(4).view({2, 2})), std::invalid_argument,
                   "matmul: expected a floating dtype");
  EXPECT_THROW_MSG(mm(zeros({2, 3, 1}), zeros({1, 2})), std::invalid_argument, "mm: expected 2-d matrices");
  EXPECT_THROW_MSG(matmul(zeros({2, 2, 3}), zeros({3, 3, 2})), std::invalid_argument,
                   "matmul: shapes [2] and [3] cannot be broadcast");
}

TEST(Addmm, HandComputedBiasInEveryRow) {
  Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = f32({7, 8, 9, 10, 11, 12}, {3, 2});
  expect_equal(addmm(f32({0.5f, -1}, {2}), a, b), f32({58.5f, 63, 139.5f, 153}, {2, 2}));
}

TEST(Addmm, TransposedWeightLikeLinearMatchesTheNaiveProduct) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    Tensor x = randn({300, 64}, dt), w = randn({192, 64}, dt), bias = randn({192}, dt);
    const Tensor ref = naive_mm(x, w.t().contiguous()).to(DType::Float64) + bias.to(DType::Float64);
    const double tol = dt == DType::Float32 ? 1e-4 : 1e-12;
    expect_close(addmm(bias, x, w.t()).to(DType::Float64), ref, tol, tol);
    expect_close(addmm(bias, x.t().contiguous().t(), w.t()).to(DType::Float64), ref, tol, tol);  // column-major x
  }
}

TEST(Addmm, Errors) {
  EXPECT_THROW_MSG(addmm(zeros({3}), zeros({2, 3}), zeros({4, 3})), std::invalid_argument,
                   "addmm: shapes [2, 3] and [4, 3] cannot be multiplied (3 != 4)");
  EXPECT_THROW_MSG(addmm(zeros({2}), zeros({2, 3}), zeros({3, 3})), std::invalid_argument,
                   "addmm: bias [2] does not match the product's 3 columns (expected (3))");
  EXPECT_THROW_MSG(addmm(zeros({1, 3}), zeros({2, 3}), zeros({3, 3})), std::invalid_argument,
                   "addmm: bias [1, 3] does not match");
  EXPECT_THROW_MSG(addmm(zeros({3}, DType::Float64), zeros({2, 3}), zeros({3, 3})), std::invalid_argument,
                   "addmm: dtype mismatch float64 vs float32");
  EXPECT_THROW_MSG(addmm(zeros({3}), zeros({2, 3, 1}), zeros({1, 3})), std::invalid_argument,
                   "addmm: expected 2-d matrices");
}

TEST(MmAndRowSums, MatchMmAndSumForTheWeightGradientLayout) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    // dy (rows, out) transposed times x (rows, in): a linear layer's dW and db
    Tensor dy = randn({700, 40}, dt), x = randn({700, 24}, dt);
    auto [dw, db] = mm_and_row_sums(dy.t(), x);
    const double tol = dt == DType::Float32 ? 1e-4 : 1e-12;
    expect_close(dw.to(DType::Float64), naive_mm(dy.t().contiguous(), x).to(DType::Float64), tol, tol);
    expect_close(db.to(DType::Float64), sum(dy.to(DType::Float64), {0}), tol, tol);
    EXPECT_EQ(db.shape(), (Shape{40}));
    // an untransposed left operand takes the other path
    auto [p, s] = mm_and_row_sums(x.t().contiguous(), dy);
    expect_close(p.to(DType::Float64), naive_mm(x.t().contiguous(), dy).to(DType::Float64), tol, tol);
    expect_close(s.to(DType::Float64), sum(x.to(DType::Float64), {0}), tol, tol);
  }
  auto [p, s] = mm_and_row_sums(f32({1, 2, 3, 4, 5, 6}, {2, 3}), f32({7, 8, 9, 10, 11, 12}, {3, 2}));
  expect_equal(p, f32({58, 64, 139, 154}, {2, 2}));
  expect_equal(s, f32({6, 15}, {2}));
}

TEST(MmAndRowSums, Errors) {
  EXPECT_THROW_MSG(mm_and_row_sums(zeros({2, 3}), zeros({4, 3})), std::invalid_argument,
                   "mm_and_row_sums: shapes [2, 3] and [4, 3] cannot be multiplied (3 != 4)");
  EXPECT_THROW_MSG(mm_and_row_sums(zeros({2, 3}), zeros({3, 3}, DType::Float64)), std::invalid_argument,
                   "mm_and_row_sums: dtype mismatch float32 vs float64");
  EXPECT_THROW_MSG(mm_and_row_sums(zeros({2, 3, 1}), zeros({1, 3})), std::invalid_argument,
                   "mm_and_row_sums: expected 2-d matrices");
}

// out= (a leaf's gradient destination): the product is written over out's old contents, bit for
// bit what a new result holds, and out itself is returned; in every dtype and path (a transposed
// left operand, an untransposed one, bfloat16 operands, an empty product). A bad out is refused
// with what was wrong, and nothing is written.
TEST(MmOut, WritesTheSameBitsIntoOutAndRefusesABadOut) {
  const auto check = [](const Tensor& a, const Tensor& b, const std::string& what) {
    SCOPED_TRACE(what);
    const DType pd = a.dtype() == DType::BFloat16 ? DType::Float32 : a.dtype();
    Tensor out = full({a.size(0), b.size(1)}, 12345.0, pd);  // stale contents to be overwritten
    const Tensor p = mm(a, b, out);
    EXPECT_TRUE(p.is_same(out));
    expect_equal(out, mm(a, b), "mm");
    out.fill_(-7.0);
    const auto [q, s] = mm_and_row_sums(a, b, out);
    EXPECT_TRUE(q.is_same(out));
    expect_equal(out, mm_and_row_sums(a, b).first, "mm_and_row_sums: the product");
    expect_equal(s, mm_and_row_sums(a, b).second, "mm_and_row_sums: the row sums");
  };
  for (DType dt : {DType::Float32, DType::Float64}) {
    const Tensor dy = randn({300, 40}, dt), x = randn({300, 24}, dt);
    check(dy.t(), x, std::string(dtype_name(dt)) + ", transposed left operand");
    check(x.t().contiguous(), dy, std::string(dtype_name(dt)) + ", contiguous left operand");
    check(dy.t(), x.narrow(1, 0, 0), std::string(dtype_name(dt)) + ", no columns");
  }
  const Tensor dy = randn({300, 40}).to(DType::BFloat16), x = randn({300, 24}).to(DType::BFloat16);
  check(dy.t(), x, "bfloat16, transposed left operand");
  check(dy.t().contiguous(), x.t().contiguous().t(), "bfloat16, contiguous left operand");

  const Tensor a = randn({4, 3}), b = randn({3, 5});
  Tensor wrong_shape = zeros({5, 4}), wrong_dtype = zeros({4, 5}, DType::Float64), strided = zeros({5, 4}).t();
  EXPECT_THROW_MSG(mm(a, b, wrong_shape), std::invalid_argument,
                   "mm: out is float32[5, 4] on cpu, expected a contiguous float32[4, 5] on cpu");
  EXPECT_THROW_MSG(mm_and_row_sums(a, b, wrong_dtype), std::invalid_argument,
                   "mm_and_row_sums: out is float64[4, 5] on cpu, expected a contiguous float32[4, 5] on cpu");
  EXPECT_THROW_MSG(mm(a, b, strided), std::invalid_argument,
                   "mm: out is float32[4, 5] on cpu (strided), expected a contiguous float32[4, 5] on cpu");
  expect_equal(wrong_shape, zeros({5, 4}), "nothing written into a refused out");
  Tensor square = randn({4, 4});
  EXPECT_THROW_MSG(mm(square, randn({4, 4}), square), std::invalid_argument, "mm: out shares memory with an operand");
}

// bfloat16 operands (autocast's products): a float32 result, the float32 sums of the exact
// products — bit for bit the float32 product of the widened operands on small integers (every
// sum exact in any order), through transposed views, batches, the bias and the row sums; float16
// has no product on the CPU.
// Linear's bias gradient under autocast(BFloat16): the row sums of dy^T (a transposed view, summed
// by the GEMM as it packs dy) are each column's double sum in row order, rounded once: 300 columns
// cross the GEMM's blocks, and the values are not integers.
TEST(BFloat16Products, RowSumsOfATransposedViewAreEachColumnsDoubleSumInOrder) {
  const int64_t rows = 70, cols = 300;
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * static_cast<float>(i)) * 3.1f;
  const Tensor dy = from_vector<float>(v, {rows, cols}).to(DType::BFloat16);  // (rows, out)
  const Tensor x = ones({rows, 5}).to(DType::BFloat16);
  const Tensor sums = mm_and_row_sums(dy.t(), x).second;  // (out)
  // an empty product (x with no columns) still sums dy, through the path that copies it
  const Tensor sums_of_empty = mm_and_row_sums(dy.t(), x.narrow(1, 0, 0)).second;
  const Tensor dy32 = dy.to(DType::Float32);
  for (int64_t c = 0; c < cols; ++c) {
    double s = 0.0;
    for (int64_t r = 0; r < rows; ++r) s += dy32.data<float>()[r * cols + c];
    ASSERT_EQ(sums.data<float>()[c], static_cast<float>(s)) << "column " << c;
    ASSERT_EQ(sums_of_empty.data<float>()[c], static_cast<float>(s)) << "column " << c << ", empty product";
  }
}

// Below avx512_bf16 (a CPU without AVX512_BF16, or MINIDL_CPU_CAPABILITY capping it) there is no
// bfloat16 GEMM: mm, addmm and mm_and_row_sums on bfloat16 operands run the float32 kernel on the
// widened operands — the same bits on small integers — and say so once on stderr, naming the cap.
TEST(BFloat16Products, WithoutABFloat16GemmRunWidenedAndSaySoOnce) {
  const std::string said =
      "minidl: MINIDL_CPU_CAPABILITY=avx512 leaves out the bfloat16 GEMM; bfloat16 matrix products run through the "
      "float32 kernel on the widened operands\n";
  const auto said_once = ::testing::Truly([said](const std::string& err) {
    const size_t first = err.find(said);
    return first != std::string::npos && err.find(said, first + 1) == std::string::npos;
  });
  minidl::testing::expect_true_under_cpu_capability(
      "avx512",
      [] {
        std::vector<float> av(6 * 5), bv(5 * 4), biasv(4);
        for (size_t i = 0; i < av.size(); ++i) av[i] = static_cast<float>(static_cast<int>(i % 7) - 3);
        for (size_t i = 0; i < bv.size(); ++i) bv[i] = static_cast<float>(static_cast<int>(i % 5) - 2);
        for (size_t i = 0; i < biasv.size(); ++i) biasv[i] = 0.5f * static_cast<float>(i);
        const Tensor a = from_vector<float>(av, {6, 5}), b = from_vector<float>(bv, {5, 4});
        const Tensor bias = from_vector<float>(biasv, {4});
        const Tensor a16 = a.to(DType::BFloat16), b16 = b.to(DType::BFloat16);
        const Tensor product = mm(a, b), with_bias = addmm(bias, a, b);
        const auto [at_b, row_sums] = mm_and_row_sums(a16.t().contiguous().t(), b16);
        const auto same = [](const Tensor& x, const Tensor& y) {
          return x.dtype() == DType::Float32 && x.shape() == y.shape() && x.to_vector<float>() == y.to_vector<float>();
        };
        return same(mm(a16, b16), product) && same(mm(a16, b16), product) &&
               same(addmm(bias.to(DType::BFloat16), a16, b16), with_bias) && same(at_b, product) &&
               same(row_sums, sum(a, {1}));
      },
      said_once);
}

TEST(BFloat16Products, AreFloat32ProductsOfTheWidenedOperands) {
  const auto ints = [](Shape s, int salt) {
    std::vector<float> v(static_cast<size_t>(shape_numel(s)));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((static_cast<int>(i) * 7 + salt) % 13 - 6);
    return from_vector<float>(v, s);
  };
  const Tensor a = ints({37, 50}, 1), b = ints({50, 21}, 2), bias = ints({21}, 3);
  const Tensor ab = a.to(DType::BFloat16), bb = b.to(DType::BFloat16);
  const Tensor c = mm(ab, bb);
  EXPECT_EQ(c.dtype(), DType::Float32);
  expect_equal(c, mm(a, b), "mm");
  expect_equal(mm(bb.t(), ab.t()), mm(b.t(), a.t()), "mm of transposed views");
  expect_equal(addmm(bias.to(DType::BFloat16), ab, bb), addmm(bias, a, b), "addmm");
  const auto [prod, sums] = mm_and_row_sums(bb.t(), ab.t());  // (21, 37) and op(A)'s 21 row sums
  expect_equal(prod, mm(b.t(), a.t()), "mm_and_row_sums product");
  expect_equal(sums, sum(b.t(), {1}), "mm_and_row_sums row sums");
  expect_equal(mm_and_row_sums(bb.t().contiguous(), ab.t()).second, sum(b.t(), {1}), "row sums of a contiguous op(A)");
  const Tensor x = ints({3, 4, 50}, 4), y = ints({3, 50, 6}, 5);
  expect_equal(matmul(x.to(DType::BFloat16), y.to(DType::BFloat16)), matmul(x, y), "batched matmul");
  expect_equal(matmul(x.to(DType::BFloat16), y.to(DType::BFloat16).transpose(-1, -2).contiguous().transpose(-1, -2)),
               matmul(x, y), "batched matmul, transposed view");
  const Tensor h = a.to(DType::Float16);
  EXPECT_THROW_MSG(mm(h, h.t()), std::invalid_argument, "mm: not implemented for float16");
  EXPECT_THROW_MSG(mm(ab, b), std::invalid_argument, "mm: dtype mismatch bfloat16 vs float32");
}

// mm_round_to / addmm_round_to: the bits of round_to(mm(a, b), dtype) — on the CPU the bfloat16
// GEMM rounds as it stores — for plain and transposed operands; float32 operands or a float32
// dtype are refused.
TEST(BFloat16Products, MmRoundToIsTheProductRounded) {
  std::vector<float> v(static_cast<size_t>(90 * 130));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * static_cast<float>(i)) * 3.1f;
  const Tensor a = from_vector<float>(std::vector<float>(v.begin(), v.begin() + 90 * 70), {90, 70}).to(DType::BFloat16);
  const Tensor b =
      from_vector<float>(std::vector<float>(v.begin(), v.begin() + 70 * 130), {70, 130}).to(DType::BFloat16);
  const Tensor c = mm_round_to(a, b, DType::BFloat16);
  EXPECT_EQ(c.dtype(), DType::Float32);
  expect_equal(c, round_to(mm(a, b), DType::BFloat16), "a b");
  EXPECT_GT(minidl::testing::max_abs_diff(c, mm(a, b)), 0.0) << "the product was not rounded";
  const Tensor bt = b.t().contiguous();
  expect_equal(mm_round_to(a, bt.t(), DType::BFloat16), round_to(mm(a, bt.t()), DType::BFloat16), "a b^T view");
  EXPECT_THROW_MSG(mm_round_to(a.to(DType::Float32), b.to(DType::Float32), DType::BFloat16), std::invalid_argument,
                   "mm_round_to: expected bfloat16 or float16 operands");
  EXPECT_THROW_MSG(mm_round_to(a, b, DType::Float32), std::invalid_argument, "mm_round_to: expected bfloat16");
  EXPECT_THROW_MSG(mm_round_to(a, a, DType::BFloat16), std::invalid_argument, "mm_round_to: shapes");

  // addmm_round_to: the bits of round_to(addmm(...)), the bias in each sum
  const Tensor bias =
      from_vector<float>(std::vector<float>(v.begin() + 7, v.begin() + 7 + 130), {130}).to(DType::BFloat16);
  const Tensor cb = addmm_round_to(bias, a, b, DType::BFloat16);
  expect_equal(cb, round_to(addmm(bias, a, b), DType::BFloat16), "bias + a b");
  EXPECT_GT(minidl::testing::max_abs_diff(cb, addmm(bias, a, b)), 0.0) << "the product was not rounded";
  EXPECT_THROW_MSG(addmm_round_to(bias, a, b, DType::Float32), std::invalid_argument,
                   "addmm_round_to: expected bfloat16 or float16");
  EXPECT_THROW_MSG(addmm_round_to(bias.to(DType::Float32), a.to(DType::Float32), b.to(DType::Float32), DType::BFloat16),
                   std::invalid_argument, "addmm_round_to: expected bfloat16 or float16 operands");
  EXPECT_THROW_MSG(addmm_round_to(bias, a, a, DType::BFloat16), std::invalid_argument, "addmm_round_to: shapes");
}
