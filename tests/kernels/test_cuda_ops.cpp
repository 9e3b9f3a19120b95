// tests/kernels/test_cuda_ops.cpp — every tensor op of tensor/ops.h on the GPU against the CPU
// implementation on the same inputs, with per-op tolerances: element-wise (every functor,
// broadcast and transposed operands, in-place forms), copies/casts/fill, reductions (few short and
// few very long rows: one block per row, or rows split over many blocks), softmax,
// matmul (2-d, batched, broadcast, transposed views; TF32 off), joining and indexing, dropout masks
// (equal element for element). Skipped, saying why, when no device is present.
#include <functional>

#include "minidl/kernels/cuda_ops.h"
#include "minidl/tensor/ops_nn.h"
#include "minidl/tensor/tensor_all.h"
#include "tests/kernels/cuda_testing.h"

using namespace minidl;
using minidl::testing::expect_cuda_matches_cpu;
using minidl::testing::expect_equal;
using minidl::testing::on_gpu;

namespace {
Tensor rnd(const Shape& s, uint64_t stream, DType dt = DType::Float32) { return randn(s, RandomKey{7, stream}, dt); }
Tensor positive(const Shape& s, uint64_t stream, DType dt = DType::Float32) {
  return add(abs(rnd(s, stream, dt)), 0.1);
}
}  // namespace

TEST(CudaOps, UnaryOpsMatchCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  for (DType dt : {DType::Float32, DType::Float64}) {
    const double tol = dt == DType::Float32 ? 1e-5 : 1e-12;
    const Tensor x = rnd({5, 33}, 1, dt), xp = positive({5, 33}, 2, dt);
    const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> ops = {
        {"neg", [](const Tensor& t) { return neg(t); }},
        {"exp", [](const Tensor& t) { return exp(t); }},
        {"abs", [](const Tensor& t) { return abs(t); }},
        {"tanh", [](const Tensor& t) { return tanh(t); }},
        {"sigmoid", [](const Tensor& t) { return sigmoid(t); }},
        {"relu", [](const Tensor& t) { return relu(t); }},
        {"gelu", [](const Tensor& t) { return gelu(t); }},
        {"gelu_tanh", [](const Tensor& t) { return gelu(t, true); }},
        {"pow2", [](const Tensor& t) { return pow(t, 2.0); }},
        {"add_s", [](const Tensor& t) { return t + 1.5; }},
        {"mul_s", [](const Tensor& t) { return t * -2.0; }},
        {"div_s", [](const Tensor& t) { return t / 3.0; }},
    };
    for (const auto& [name, f] : ops) expect_cuda_matches_cpu(f(on_gpu(x)), f(x), tol, tol, name);
    const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> pos_ops = {
        {"log", [](const Tensor& t) { return log(t); }},
        {"sqrt", [](const Tensor& t) { return sqrt(t); }},
        {"rsqrt", [](const Tensor& t) { return rsqrt(t); }},
        {"pow1.5", [](const Tensor& t) { return pow(t, 1.5); }},
    };
    for (const auto& [name, f] : pos_ops) expect_cuda_matches_cpu(f(on_gpu(xp)), f(xp), tol, tol, name);
  }
}

TEST(CudaOps, BinaryOpsWithBroadcastAndTransposedOperandsMatchCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  const Tensor a = rnd({4, 1, 7}, 3), b = rnd({3, 7}, 4), c = rnd({7, 4}, 5).t();  // c: a transposed view (4, 7)
  const Tensor bp = positive({3, 7}, 6);
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&, const Tensor&)>>> ops = {
      {"add", [](const Tensor& x, const Tensor& y) { return add(x, y); }},
      {"sub", [](const Tensor& x, const Tensor& y) { return sub(x, y); }},
      {"mul", [](const Tensor& x, const Tensor& y) { return mul(x, y); }},
      {"div", [](const Tensor& x, const Tensor& y) { return div(x, y); }},
      {"maximum", [](const Tensor& x, const Tensor& y) { return maximum(x, y); }},
      {"minimum", [](const Tensor& x, const Tensor& y) { return minimum(x, y); }},
      {"eq", [](const Tensor& x, const Tensor& y) { return eq(x, y); }},
      {"gt", [](const Tensor& x, const Tensor& y) { return gt(x, y); }},
      {"lt", [](const Tensor& x, const Tensor& y) { return lt(x, y); }},
      {"relu_backward", [](const Tensor& x, const Tensor& y) { return relu_backward(x, y); }},
      {"gelu_backward", [](const Tensor& x, const Tensor& y) { return gelu_backward(x, y); }},
      {"gelu_backward_tanh", [](const Tensor& x, const Tensor& y) { return gelu_backward(x, y, true); }},
      {"tanh_backward", [](const Tensor& x, const Tensor& y) { return tanh_backward(x, y); }},
      {"sigmoid_backward", [](const Tensor& x, const Tensor& y) { return sigmoid_backward(x, y); }},
  };
  for (const auto& [name, f] : ops) {
    expect_cuda_matches_cpu(f(on_gpu(a), on_gpu(bp)), f(a, bp), 1e-5, 1e-6, name);  // broadcast (4, 3, 7)
    expect_cuda_matches_cpu(f(on_gpu(c), on_gpu(rnd({4, 7}, 8))), f(c, rnd({4, 7}, 8)), 1e-5, 1e-6, name);
  }
  (void)b;
}

TEST(CudaOps, IntegerElementwiseMatchesCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  const Tensor a = randint(-50, 50, {6, 5}, RandomKey{1, 1}), b = randint(-50, 50, {5}, RandomKey{1, 2});
  expect_equal(add(on_gpu(a), on_gpu(b)).cpu(), add(a, b), "int64 add");
  expect_equal(mul(on_gpu(a), on_gpu(b)).cpu(), mul(a, b), "int64 mul");
  expect_equal(maximum(on_gpu(a), on_gpu(b)).cpu(), maximum(a, b), "int64 maximum");
  expect_equal(neg(on_gpu(a)).cpu(), neg(a), "int64 neg");
  EXPECT_THROW(exp(on_gpu(a)), std::invalid_argument);  // floating only, as on the CPU
}

TEST(CudaOps, IsFiniteAndWhereMatchCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  Tensor x = rnd({6, 5}, 40);
  x.narrow(0, 1, 1).fill_(NAN);
  x.narrow(1, 2, 1).fill_(INFINITY);
  const Tensor xt = x.transpose(0, 1);  // (5, 6), strided
  expect_equal(isfinite(on_gpu(xt)).cpu(), isfinite(xt), "isfinite");
  const Tensor cond = gt(rnd({6, 1}, 41), zeros({6, 1})), b = rnd({5}, 42);
  expect_equal(where(on_gpu(cond), on_gpu(x), on_gpu(b)).cpu(), where(cond, x, b), "where (6, 1) (6, 5) (5)");
  const Tensor ic = randint(0, 2, {4}, RandomKey{1, 3}), ia = randint(-9, 9, {4}, RandomKey{1, 4});
  expect_equal(where(on_gpu(ic), on_gpu(ia), on_gpu(neg(ia))).cpu(), where(ic, ia, neg(ia)), "int64 where");
}

TEST(CudaOps, InPlaceUpdatesMatchCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  for (int which = 0; which < 7; ++which) {
    Tensor a = rnd({8, 9}, 10), b = rnd({9}, 11), c = positive({8, 9}, 12);
    Tensor ga = on_gpu(a), gb = on_gpu(b), gc = on_gpu(c);
    auto apply = [&](Tensor& x, const Tensor& y, const Tensor& z) {
      switch (which) {
        case 0:
          add_(x, y, 0.5);
          break;
        case 1:
          mul_(x, 3.0);
          break;
        case 2:
          mul_(x, y);
          break;
        case 3:
          axpby_(x, 0.9, y, 0.1);
          break;
        case 4:
          lerp_(x, y, 0.25);
          break;
        case 5:
          addcmul_(x, y, z, -0.5);
          break;
        case 6:
          addcdiv_(x, y, z, 0.01);
          break;
      }
    };
    apply(a, b, c);
    apply(ga, gb, gc);
    expect_cuda_matches_cpu(ga, a, 1e-6, 1e-6, "in-place #" + std::to_string(which));
  }
}

TEST(CudaOps, CopiesCastsFillAndTransfersMatchCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  const Tensor x = rnd({3, 4, 5}, 13);
  const Tensor g = on_gpu(x);
  expect_equal(g.cpu(), x, "round trip");
  expect_equal(g.permute({2, 0, 1}).contiguous().cpu(), x.permute({2, 0, 1}).contiguous(), "permuted contiguous");
  expect_equal(g.to(DType::Float64).cpu(), x.to(DType::Float64), "cast to float64");
  expect_equal(g.to(DType::Int64).cpu(), x.to(DType::Int64), "cast to int64");
  Tensor f = zeros({3, 4}, DType::Float32, Device::cuda(0));
  f.slice(1, 0, 4, 2).fill_(2.5);
  Tensor fc = zeros({3, 4});
  fc.slice(1, 0, 4, 2).fill_(2.5);
  expect_equal(f.cpu(), fc, "strided fill_");
  Tensor d = zeros({3, 4, 5}, DType::Float32, Device::cuda(0));
  d.copy_(x.select(0, 1));  // host -> device with broadcast
  Tensor dc = zeros({3, 4, 5});
  dc.copy_(x.select(0, 1));
  expect_equal(d.cpu(), dc, "broadcast copy_ from the host");
}

// bfloat16 / float16 casts and fills: the same bits as the CPU's kernels/cpu/half.h (round to
// nearest even, denormals, inf, NaN, float16 overflow from 65520), and the ops that compute them
// in float32 agree too.
TEST(CudaOps, Bfloat16AndFloat16CastsAndFillMatchCpuBits) {
  MINIDL_SKIP_WITHOUT_GPU();
  auto bits = [](const Tensor& t) {
    const Tensor c = t.cpu().contiguous();
    const auto* p = static_cast<const uint16_t*>(c.raw_data());
    return std::vector<uint16_t>(p, p + c.numel());
  };
  const float inf = INFINITY;
  const Tensor special = from_vector<float>({inf, -inf, NAN, 65504.0f, 65520.0f, 0x1p-25f, 0x3p-25f, 1.0f + 0x1p-8f,
                                             1.0f + 0x3p-8f, 3.4e38f, 1e-40f, -0.0f, 1.0f + 0x1p-11f, 1.0f + 0x3p-11f});
  const Tensor x = cat({special, rnd({50}, 21)}, 0);
  for (DType t : {DType::BFloat16, DType::Float16}) {
    const std::string name = dtype_name(t);
    const Tensor h = x.to(t);
    const Tensor gh = on_gpu(x).to(t);
    EXPECT_EQ(bits(gh), bits(h)) << name << " cast from float32";
    EXPECT_EQ(bits(on_gpu(x.to(DType::Float64)).to(t)), bits(x.to(DType::Float64).to(t))) << name << " from float64";
    expect_equal(gh.to(DType::Float32).cpu(), h.to(DType::Float32), name + " widen");
    EXPECT_EQ(bits(on_gpu(h)), bits(h)) << name << " transfer";
    Tensor f = zeros({2, 3}, t, Device::cuda(0));
    f.fill_(0.1);
    EXPECT_EQ(bits(f), bits(full({2, 3}, 0.1, t))) << name << " fill_";
    const Tensor a = x.narrow(0, 14, 50).reshape({5, 10}).to(t), b = x.narrow(0, 14, 10).to(t);
    EXPECT_EQ(bits(add(on_gpu(a), on_gpu(b))), bits(add(a, b))) << name << " add (broadcast)";
    expect_cuda_matches_cpu(sum(on_gpu(a), {1}), sum(a, {1}), 1e-2, 1e-2, name + " sum");  // one rounding apart
  }
}

TEST(CudaOps, ReductionsMatchCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  const Tensor x = rnd({6, 7, 300}, 14), gx = on_gpu(x);
  for (const Shape& dims : std::vector<Shape>{{}, {0}, {1}, {2}, {0, 2}, {-1}}) {
    expect_cuda_matches_cpu(sum(gx, dims), sum(x, dims), 1e-6, 1e-5, "sum " + shape_str(dims));
    expect_cuda_matches_cpu(mean(gx, dims, true), mean(x, dims, true), 1e-6, 1e-6, "mean " + shape_str(dims));
    expect_cuda_matches_cpu(var(gx, dims), var(x, dims), 1e-5, 1e-6, "var " + shape_str(dims));
    expect_cuda_matches_cpu(var(gx, dims, 0), var(x, dims, 0), 1e-5, 1e-6, "var biased " + shape_str(dims));
  }
  for (int64_t d : {0, 1, 2}) {
    const MaxResult g = max(gx, d), c = max(x, d);
    expect_equal(g.values.cpu(), c.values, "max values");
    expect_equal(g.indices.cpu(), c.indices, "max indices");
    expect_equal(argmax(gx, d, true).cpu(), argmax(x, d, true), "argmax");
  }
  expect_equal(max(gx).cpu(), max(x), "max of all");
  const Tensor ties = from_vector<float>({1, 3, 3, 2, 3, 0}, {2, 3});
  expect_equal(argmax(on_gpu(ties), 1).cpu(), argmax(ties, 1), "first maximum wins ties");
  const Tensor ints = randint(0, 100, {5, 9}, RandomKey{2, 2});
  expect_equal(sum(on_gpu(ints), {1}).cpu(), sum(ints, {1}), "int64 sum");
  expect_equal(topk_indices(on_gpu(rnd({4, 10}, 15)), 3).cpu(), topk_indices(rnd({4, 10}, 15), 3), "topk");
}

TEST(CudaOps, ReductionsAreDeterministicRunToRun) {
  MINIDL_SKIP_WITHOUT_GPU();
  const Tensor g = on_gpu(rnd({3, 100000}, 16));
  expect_equal(sum(g, {1}).cpu(), sum(g, {1}).cpu(), "sum twice");
  const Tensor big = on_gpu(rnd({3 << 20}, 17));  // a full reduction split over many blocks
  expect_equal(sum(big).cpu(), sum(big).cpu(), "full sum twice");
  expect_equal(var(big).cpu(), var(big).cpu(), "full var twice");
}

// Few long rows (a full reduction is one row of all elements): each row is cut into chunks of one
// block each and the partial results combined by a second pass; the answers are the CPU's. The
// maximum is planted in the last chunk and tied in an earlier one: the first one still wins.
TEST(CudaOps, ReductionsOverMoreThanAMillionElementsMatchCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  const int64_t n = (int64_t(1) << 20) + 4099;  // not a multiple of the chunk length
  const Tensor x = rnd({n}, 18, DType::Float64), gx = on_gpu(x);
  expect_cuda_matches_cpu(sum(gx), sum(x), 1e-12, 1e-9, "full sum, float64");
  expect_cuda_matches_cpu(mean(gx), mean(x), 1e-12, 1e-12, "full mean, float64");
  expect_cuda_matches_cpu(var(gx), var(x), 1e-12, 1e-12, "full var, float64");
  const Tensor f = rnd({2, n}, 19), gf = on_gpu(f);
  expect_cuda_matches_cpu(sum(gf, {1}), sum(f, {1}), 1e-5, 1e-3, "two long rows, float32");
  expect_cuda_matches_cpu(var(gf, {1}), var(f, {1}), 1e-5, 1e-5, "var of two long rows, float32");
  Tensor planted = f.contiguous().clone();
  planted.data<float>()[n - 5] = 100.0f;  // row 0, last chunk
  planted.data<float>()[n + 17] = 100.0f;  // row 1, first chunk ...
  planted.data<float>()[2 * n - 1] = 100.0f;  // ... tied in its last: index 17 wins
  const MaxResult g = max(on_gpu(planted), 1);
  expect_equal(g.values.cpu(), from_vector<float>({100.0f, 100.0f}), "max values");
  expect_equal(g.indices.cpu(), from_vector<int64_t>({n - 5, 17}), "max indices: the first maximum");
  expect_equal(max(on_gpu(planted)).cpu(), max(planted), "max of all");
  const Tensor ints = randint(-1000, 1000, {3 << 19}, RandomKey{4, 4});
  expect_equal(sum(on_gpu(ints)).cpu(), sum(ints), "int64 full sum: exact");
}

TEST(CudaOps, SoftmaxFamilyMatchesCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  const Tensor x = mul(rnd({4, 5, 33}, 17), 5.0), dy = rnd({4, 5, 33}, 18);
  for (int64_t dim : {0, 1, 2}) {
    const Tensor y = softmax(x, dim), ly = log_softmax(x, dim);
    expect_cuda_matches_cpu(softmax(on_gpu(x), dim), y, 1e-5, 1e-7, "softmax");
    expect_cuda_matches_cpu(log_softmax(on_gpu(x), dim), ly, 1e-5, 1e-6, "log_softmax");
    expect_cuda_matches_cpu(softmax_backward(on_gpu(y), on_gpu(dy), dim), softmax_backward(y, dy, dim), 1e-5, 1e-6,
                            "softmax_backward");
    expect_cuda_matches_cpu(log_softmax_backward(on_gpu(ly), on_gpu(dy), dim), log_softmax_backward(ly, dy, dim), 1e-5,
                            1e-6, "log_softmax_backward");
  }
}

TEST(CudaOps, MatmulMatchesCpuGemm) {
  MINIDL_SKIP_WITHOUT_GPU();
  ASSERT_FALSE(kernels::cuda::allow_tf32()) << "TF32 must be off by default";
  struct Case {
    Shape a, b;
  };
  for (const Case& c : std::vector<Case>{{{33, 17}, {17, 9}},
                                         {{5, 33, 17}, {5, 17, 9}},
                                         {{2, 3, 8, 6}, {6, 4}},
                                         {{3, 8, 6}, {1, 6, 5}},
                                         {{17}, {17, 4}},
                                         {{6, 17}, {17}}}) {
    const Tensor a = rnd(c.a, 20), b = rnd(c.b, 21);
    expect_cuda_matches_cpu(matmul(on_gpu(a), on_gpu(b)), matmul(a, b), 1e-5, 1e-5,
                            "matmul " + shape_str(c.a) + " x " + shape_str(c.b));
  }
  const Tensor a = rnd({20, 30}, 22), b = rnd({40, 30}, 23);
  expect_cuda_matches_cpu(mm(on_gpu(a), on_gpu(b).t()), mm(a, b.t()), 1e-5, 1e-5, "mm with a transposed view");
  expect_cuda_matches_cpu(mm(on_gpu(a).t(), on_gpu(rnd({20, 7}, 24))), mm(a.t(), rnd({20, 7}, 24)), 1e-5, 1e-5,
                          "mm with a transposed first operand");
  const Tensor d = rnd({4, 5, 6}, 25, DType::Float64), e = rnd({4, 6, 3}, 26, DType::Float64);
  expect_cuda_matches_cpu(matmul(on_gpu(d), on_gpu(e)), matmul(d, e), 1e-12, 1e-12, "float64 batched matmul");
}

// 16-bit products (autocast's) on CUDA: cuBLAS's bfloat16 / float16 GEMM with float32 compute
// against the CPU — its gemm_bf16 for bfloat16, the float32 GEMM of the widened operands for
// float16 (the CPU has no float16 GEMM); all sum the exact products in float32, in different
// orders: mm, a transposed view, a batched matmul, addmm with a 16-bit bias, and mm_and_row_sums.
TEST(CudaOps, HalfProductsMatchTheCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  for (const DType half : {DType::BFloat16, DType::Float16}) {
    const std::string name = dtype_name(half);
    auto cpu = [&](const Tensor& t) { return half == DType::BFloat16 ? t : t.to(DType::Float32); };
    const Tensor a = rnd({33, 40}, 40).to(half), b = rnd({40, 17}, 41).to(half), c = rnd({17, 40}, 42).to(half);
    auto check = [&](const Tensor& gpu, const Tensor& on_cpu, const std::string& what) {
      ASSERT_EQ(gpu.dtype(), DType::Float32) << name << " " << what << ": a float32 product";
      expect_cuda_matches_cpu(gpu, on_cpu, 1e-5, 1e-5, name + " " + what);
    };
    check(mm(on_gpu(a), on_gpu(b)), mm(cpu(a), cpu(b)), "mm");
    check(mm(on_gpu(a), on_gpu(c).t()), mm(cpu(a), cpu(c).t()), "mm with a transposed view");
    const Tensor x = rnd({3, 9, 40}, 43).to(half), y = rnd({3, 40, 5}, 44).to(half);
    check(matmul(on_gpu(x), on_gpu(y)), matmul(cpu(x), cpu(y)), "batched matmul");
    const Tensor bias = rnd({17}, 45).to(half);
    check(addmm(on_gpu(bias), on_gpu(a), on_gpu(b)), addmm(cpu(bias), cpu(a), cpu(b)), "addmm");
    const auto [gp, gs] = mm_and_row_sums(on_gpu(a), on_gpu(b));
    const auto [cp, cs] = mm_and_row_sums(cpu(a), cpu(b));
    check(gp, cp, "mm_and_row_sums: the product");
    check(gs, cs, "mm_and_row_sums: the row sums");
    // out= (a gradient destination on the device): written in place and returned
    Tensor out = on_gpu(full({33, 17}, 7.0));
    ASSERT_TRUE(mm(on_gpu(a), on_gpu(b), out).is_same(out)) << name;
    check(out, cp, "mm into out");
    out.fill_(-3.0);
    ASSERT_TRUE(mm_and_row_sums(on_gpu(a), on_gpu(b), out).first.is_same(out)) << name;
    check(out, cp, "mm_and_row_sums into out");
  }
}

// float16 products are CUDA's alone: the CPU refuses them by name (autocast widens there instead).
TEST(CudaOpsContract, Float16ProductsAreRefusedOnTheCpu) {
  const Tensor a = rnd({3, 4}, 46).to(DType::Float16);
  EXPECT_THROW_MSG(mm(a, a.t()), std::invalid_argument, "mm: not implemented for float16");
}

// A K = 0 product is an empty sum: zeros, not an error (cuBLAS itself rejects the ld = 0 such
// operands carry). The CPU contract first (runs everywhere), then the GPU against it.
TEST(CudaOpsContract, MatmulWithEmptyInnerDimIsZerosOnCpu) {
  const Tensor z = matmul(zeros({3, 0}), zeros({0, 4}));
  expect_equal(z, zeros({3, 4}), "(3, 0) x (0, 4)");
  expect_equal(matmul(zeros({2, 3, 0}), zeros({2, 0, 5})), zeros({2, 3, 5}), "batched (2, 3, 0) x (2, 0, 5)");
}

TEST(CudaOps, MatmulWithEmptyInnerDimIsZeros) {
  MINIDL_SKIP_WITHOUT_GPU();
  // a non-zero output buffer first, so a skipped fill would show (the allocator reuses it)
  { const Tensor junk = full({2, 3, 5}, 7.0, DType::Float32, Device::cuda(0)); }
  for (const auto& [sa, sb] :
       std::vector<std::pair<Shape, Shape>>{{{3, 0}, {0, 4}}, {{2, 3, 0}, {2, 0, 5}}, {{2, 3, 0}, {0, 5}}}) {
    const Tensor a = zeros(sa), b = zeros(sb);
    expect_equal(matmul(on_gpu(a), on_gpu(b)).cpu(), matmul(a, b), "K = 0: " + shape_str(sa) + " x " + shape_str(sb));
  }
  const Tensor a = zeros({4, 0}, DType::Float64);
  expect_equal(mm(on_gpu(a), on_gpu(a).t()).cpu(), zeros({4, 4}, DType::Float64), "float64 K = 0");
}

// Attention's products on permuted (B, H, T, D) views: one strided-batched call after a single
// contiguous copy (cuda_dispatch::batch_stride decides, tested on the CPU in test_cuda_host.cpp).
TEST(CudaOps, BatchedMatmulOnPermutedViewsMatchesCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  const Tensor q = rnd({2, 7, 3, 4}, 27).permute({0, 2, 1, 3});  // (B, H, T, D) view of (B, T, H, D)
  const Tensor k = rnd({2, 7, 3, 4}, 28).permute({0, 2, 3, 1});  // (B, H, D, T)
  expect_cuda_matches_cpu(matmul(on_gpu(q), on_gpu(k)), matmul(q, k), 1e-5, 1e-5, "q k^T on permuted views");
  const Tensor att = rnd({2, 3, 7, 7}, 29);
  expect_cuda_matches_cpu(matmul(on_gpu(att), on_gpu(q)), matmul(att, q), 1e-5, 1e-5, "att v (v permuted)");
}

// The element-wise fast path must not be taken when only some operands are dense (a strided
// output or first input): these are the cases that went wrong when only the last operand decided.
TEST(CudaOps, StridedOutputsAndFirstInputsMatchCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  const Tensor u = rnd({6}, 40), v = rnd({6}, 41), w = rnd({6}, 42);
  expect_equal(stack({on_gpu(u), on_gpu(v), on_gpu(w)}, 1).cpu(), stack({u, v, w}, 1), "stack of 1-d along dim 1");
  const Tensor c0 = rnd({5, 1}, 43), c1 = rnd({5, 1}, 44);
  expect_equal(cat({on_gpu(c0), on_gpu(c1)}, 1).cpu(), cat({c0, c1}, 1), "cat of (N, 1) columns");
  const Tensor x = rnd({5, 3}, 45), y = rnd({5}, 46);
  expect_cuda_matches_cpu(on_gpu(x).select(1, 0) + on_gpu(y), x.select(1, 0) + y, 0, 0, "select(1, 0) + y");
  expect_cuda_matches_cpu(on_gpu(y) + on_gpu(x).select(1, 2), y + x.select(1, 2), 0, 0, "y + select(1, 2)");
  Tensor buf = zeros({10}), gbuf = on_gpu(buf);
  buf.slice(0, 0, 10, 2).copy_(arange(5, DType::Float32));
  gbuf.slice(0, 0, 10, 2).copy_(on_gpu(arange(5, DType::Float32)));
  expect_equal(gbuf.cpu(), buf, "copy into a stride-2 slice");
}

TEST(CudaOps, JoiningAndIndexingMatchCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  const Tensor a = rnd({3, 4}, 30), b = rnd({2, 4}, 31);
  expect_equal(cat({on_gpu(a), on_gpu(b)}, 0).cpu(), cat({a, b}, 0), "cat");
  expect_equal(stack({on_gpu(a), on_gpu(a)}, 1).cpu(), stack({a, a}, 1), "stack");
  const Tensor table = rnd({10, 6}, 32);
  const Tensor idx = from_vector<int64_t>({3, 0, 9, 3, 3, 7});
  expect_equal(index_select(on_gpu(table), 0, on_gpu(idx)).cpu(), index_select(table, 0, idx),
               "index_select (embedding)");
  expect_equal(index_select(on_gpu(table), 1, on_gpu(from_vector<int64_t>({5, 1}))).cpu(),
               index_select(table, 1, from_vector<int64_t>({5, 1})), "index_select dim 1");
  const Tensor src = rnd({6, 6}, 33);
  expect_equal(index_add({10, 6}, 0, on_gpu(idx), on_gpu(src)).cpu(), index_add({10, 6}, 0, idx, src),
               "index_add with repeated indices (bit-identical: same order)");
  const Tensor logits = rnd({5, 4}, 34), target = from_vector<int64_t>({0, 3, 1, 1, 2});
  expect_equal(gather_rows(on_gpu(logits), on_gpu(target)).cpu(), gather_rows(logits, target), "gather_rows");
  EXPECT_THROW(index_select(on_gpu(table), 0, on_gpu(from_vector<int64_t>({10}))), std::out_of_range);
}

TEST(CudaOps, DropoutMaskEqualsTheCpuMaskElementForElement) {
  MINIDL_SKIP_WITHOUT_GPU();
  for (DType dt : {DType::Float32, DType::Float64})
    for (double p : {0.1, 0.5, 0.9}) {
      const RandomKey key{1234, 5};
      expect_equal(dropout_mask({37, 41}, p, key, dt, Device::cuda(0)).cpu(), dropout_mask({37, 41}, p, key, dt),
                   "dropout mask p=" + std::to_string(p));
    }
}
