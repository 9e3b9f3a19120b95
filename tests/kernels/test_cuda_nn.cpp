// tests/kernels/test_cuda_nn.cpp — the neural-network primitives of tensor/ops_nn.h (what every
// layer is made of: Linear = matmul, Conv2d, pools, BatchNorm pieces, LayerNorm, GELU, Dropout,
// cross entropy), forward AND backward, on the GPU against the CPU on the same inputs, with per-op
// tolerances. cuDNN convolutions run in FP32 (no TF32). Skipped, saying why, without a device.
#include <cmath>
#include <string>

#include "minidl/kernels/cuda_ops.h"
#include "minidl/tensor/ops_nn.h"
#include "minidl/tensor/tensor_all.h"
#include "tests/kernels/cuda_testing.h"

using namespace minidl;
using minidl::testing::expect_cuda_matches_cpu;
using minidl::testing::expect_equal;
using minidl::testing::expect_within_product_bound;
using minidl::testing::on_gpu;

namespace {
Tensor rnd(const Shape& s, uint64_t stream, DType dt = DType::Float32) { return randn(s, RandomKey{11, stream}, dt); }
}  // namespace

TEST(CudaNn, Conv2dForwardAndBackwardMatchCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  struct Case {
    Shape x, w;
    Conv2dParams p;
    bool bias;
  };
  const std::vector<Case> cases = {
      {{2, 3, 9, 9}, {4, 3, 3, 3}, {}, true},
      {{2, 4, 10, 8}, {6, 4, 3, 3}, {.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1}, true},
      {{1, 4, 9, 9}, {4, 2, 3, 3}, {.pad_h = 2, .pad_w = 2, .dilation_h = 2, .dilation_w = 2, .groups = 2}, false},
      {{3, 1, 28, 28}, {32, 1, 3, 3}, {.pad_h = 1, .pad_w = 1}, true},
  };
  for (const Case& c : cases) {
    const Tensor x = rnd(c.x, 1), w = rnd(c.w, 2), b = c.bias ? rnd({c.w[0]}, 3) : Tensor();
    const Tensor y = conv2d_forward(x, w, b, c.p);
    expect_cuda_matches_cpu(conv2d_forward(on_gpu(x), on_gpu(w), on_gpu(b), c.p), y, 1e-4, 1e-4, "conv2d forward");
    const Tensor dy = rnd(y.shape(), 4);
    const Conv2dGrads g = conv2d_backward(on_gpu(x), on_gpu(w), on_gpu(dy), c.bias, c.p);
    const Conv2dGrads r = conv2d_backward(x, w, dy, c.bias, c.p);
    expect_cuda_matches_cpu(g.dx, r.dx, 1e-4, 1e-4, "conv2d dx");
    expect_cuda_matches_cpu(g.dw, r.dw, 1e-4, 1e-3, "conv2d dw");
    expect_cuda_matches_cpu(g.db, r.db, 1e-4, 1e-3, "conv2d db");
  }
}

// Each direction runs the algorithm chosen for it with that algorithm's own math type and the
// workspace cuDNN reports for it: FP32 by default (bitwise equal run to run; within 2e-5 of the sum
// of |products| of the CPU's result: FFT and Winograd plans round differently, TF32 would not
// pass), TF32 when allowed (a plan of its own; within 2^-10 of that sum). Shapes of the CNN at
// batch 512 included.
TEST(CudaNn, Conv2dPlansAreDeterministicAndTf32HasItsOwnPlan) {
  MINIDL_SKIP_WITHOUT_GPU();
  const Conv2dParams p{.pad_h = 1, .pad_w = 1};
  for (const auto& [xs, ws] :
       std::vector<std::pair<Shape, Shape>>{{{512, 1, 28, 28}, {32, 1, 3, 3}}, {{512, 32, 14, 14}, {64, 32, 3, 3}}}) {
    const Tensor x = on_gpu(rnd(xs, 5)), w = on_gpu(rnd(ws, 6)), b = on_gpu(rnd({ws[0]}, 7));
    const Tensor y1 = conv2d_forward(x, w, b, p), y2 = conv2d_forward(x, w, b, p);
    const Tensor dy = on_gpu(rnd(y1.shape(), 8));
    const Conv2dGrads g1 = conv2d_backward(x, w, dy, true, p), g2 = conv2d_backward(x, w, dy, true, p);
    expect_equal(y1.cpu(), y2.cpu(), "conv2d forward, run to run");
    expect_equal(g1.dx.cpu(), g2.dx.cpu(), "conv2d dx, run to run");
    expect_equal(g1.dw.cpu(), g2.dw.cpu(), "conv2d dw, run to run");
    const Tensor xc = x.cpu(), wc = w.cpu(), dyc = dy.cpu();
    const Tensor y_bound = conv2d_forward(abs(xc), abs(wc), abs(b.cpu()), p);
    const Conv2dGrads g_bound = conv2d_backward(abs(xc), abs(wc), abs(dyc), false, p);
    const Conv2dGrads gc = conv2d_backward(xc, wc, dyc, true, p);
    expect_within_product_bound(y1, conv2d_forward(xc, wc, b.cpu(), p), y_bound, 2e-5, "conv2d forward, FP32");
    expect_within_product_bound(g1.dx, gc.dx, g_bound.dx, 2e-5, "conv2d dx, FP32");
    expect_within_product_bound(g1.dw, gc.dw, g_bound.dw, 2e-5, "conv2d dw, FP32");
    kernels::cuda::set_allow_tf32(true);
    const Tensor yt = conv2d_forward(x, w, b, p);
    const Conv2dGrads gt = conv2d_backward(x, w, dy, true, p);
    kernels::cuda::set_allow_tf32(false);
    expect_within_product_bound(yt, y1, y_bound, 1e-3, "conv2d forward, TF32 vs FP32");
    expect_within_product_bound(gt.dx, g1.dx, g_bound.dx, 1e-3, "conv2d dx, TF32 vs FP32");
    expect_within_product_bound(gt.dw, g1.dw, g_bound.dw, 1e-3, "conv2d dw, TF32 vs FP32");
  }
}

TEST(CudaNn, PoolingForwardAndBackwardMatchCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  const Tensor x = rnd({2, 3, 11, 10}, 5);
  for (const Pool2dParams& p :
       {Pool2dParams{2, 2, 2, 2}, Pool2dParams{3, 3, 2, 2, 1, 1}, Pool2dParams{3, 2, 1, 2, 1, 0, false}}) {
    const MaxPool2dResult c = max_pool2d_forward(x, p), g = max_pool2d_forward(on_gpu(x), p);
    expect_equal(g.out.cpu(), c.out, "max_pool2d out");
    expect_equal(g.indices.cpu(), c.indices, "max_pool2d indices");
    const Tensor dy = rnd(c.out.shape(), 6);
    expect_equal(max_pool2d_backward(on_gpu(dy), g.indices, x.shape(), p).cpu(),
                 max_pool2d_backward(dy, c.indices, x.shape(), p), "max_pool2d backward (same order: bit-identical)");
    const Tensor a = avg_pool2d_forward(x, p);
    expect_cuda_matches_cpu(avg_pool2d_forward(on_gpu(x), p), a, 1e-6, 1e-6, "avg_pool2d");
    expect_cuda_matches_cpu(avg_pool2d_backward(on_gpu(dy), x.shape(), p), avg_pool2d_backward(dy, x.shape(), p), 1e-6,
                            1e-6, "avg_pool2d backward");
  }
  // Big planes, overlapping windows (an input element is the argmax of up to 9 outputs), padding
  // and ceil mode: the gather adds them in the CPU's order, so bit-identical.
  const Tensor big = rnd({2, 3, 301, 257}, 26);
  for (const Pool2dParams& p :
       {Pool2dParams{3, 3, 1, 1, 1, 1},
        Pool2dParams{
            .kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1, .ceil_mode = true},
        Pool2dParams{2, 2, 2, 2}}) {
    const MaxPool2dResult c = max_pool2d_forward(big, p), g = max_pool2d_forward(on_gpu(big), p);
    const Tensor dy = rnd(c.out.shape(), 27);
    expect_equal(max_pool2d_backward(on_gpu(dy), g.indices, big.shape(), p).cpu(),
                 max_pool2d_backward(dy, c.indices, big.shape(), p), "max_pool2d backward, big planes");
  }
  for (auto [oh, ow] : {std::pair<int64_t, int64_t>{1, 1}, {3, 4}, {7, 7}}) {
    const Tensor a = adaptive_avg_pool2d_forward(x, oh, ow);
    expect_cuda_matches_cpu(adaptive_avg_pool2d_forward(on_gpu(x), oh, ow), a, 1e-6, 1e-6, "adaptive_avg_pool2d");
    const Tensor dy = rnd(a.shape(), 7);
    expect_cuda_matches_cpu(adaptive_avg_pool2d_backward(on_gpu(dy), x.shape()),
                            adaptive_avg_pool2d_backward(dy, x.shape()), 1e-6, 1e-6, "adaptive_avg_pool2d backward");
  }
}

// Shapes for both launch forms: few channels over many elements (each channel split over many
// blocks, partial sums combined by a second pass) and many channels (one block each).
TEST(CudaNn, BatchNormPiecesMatchCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  for (const Shape& s : {Shape{16, 5}, Shape{4, 6, 7, 5}, Shape{8, 3, 160, 160}, Shape{4, 4096, 3, 3}}) {
    const Tensor x = add(mul(rnd(s, 8), 3.0), 1.0), dy = rnd(s, 9);
    const int64_t C = s[1];
    const Tensor w = rnd({C}, 10), b = rnd({C}, 11);
    const BatchNormStats st = batch_norm_stats(x, 1e-5), gst = batch_norm_stats(on_gpu(x), 1e-5);
    expect_cuda_matches_cpu(gst.mean, st.mean, 1e-5, 1e-6, "batch_norm_stats mean");
    expect_cuda_matches_cpu(gst.invstd, st.invstd, 1e-5, 1e-6, "batch_norm_stats invstd");
    expect_cuda_matches_cpu(batch_norm_elemt(on_gpu(x), on_gpu(st.mean), on_gpu(st.invstd), on_gpu(w), on_gpu(b)),
                            batch_norm_elemt(x, st.mean, st.invstd, w, b), 1e-5, 1e-5, "batch_norm_elemt");
    for (const bool relu : {false, true}) {  // relu: dy masked where the rebuilt output is <= 0
      const std::string how = relu ? " (relu)" : "";
      const BatchNormReduce r = batch_norm_backward_reduce(dy, x, st.mean, st.invstd, w, b, relu);
      const BatchNormReduce gr = batch_norm_backward_reduce(on_gpu(dy), on_gpu(x), on_gpu(st.mean), on_gpu(st.invstd),
                                                            on_gpu(w), on_gpu(b), relu);
      expect_cuda_matches_cpu(gr.sum_dy, r.sum_dy, 1e-5, 1e-5, "sum_dy" + how);
      expect_cuda_matches_cpu(gr.sum_dy_xmu, r.sum_dy_xmu, 1e-5, 1e-4, "sum_dy_xmu" + how);
      expect_cuda_matches_cpu(gr.grad_weight, r.grad_weight, 1e-5, 1e-4, "grad_weight" + how);
      expect_cuda_matches_cpu(gr.grad_bias, r.grad_bias, 1e-5, 1e-5, "grad_bias" + how);
      const int64_t count = x.numel() / C;
      expect_cuda_matches_cpu(
          batch_norm_backward_elemt(on_gpu(dy), on_gpu(x), on_gpu(st.mean), on_gpu(st.invstd), on_gpu(w),
                                    on_gpu(r.sum_dy), on_gpu(r.sum_dy_xmu), count, on_gpu(b), relu),
          batch_norm_backward_elemt(dy, x, st.mean, st.invstd, w, r.sum_dy, r.sum_dy_xmu, count, b, relu), 1e-5, 1e-5,
          "batch_norm_backward_elemt" + how);
    }
  }
}

// The affine gradients add over all rows: few rows (one row chunk) and many rows of a narrow
// layer (row chunks over a 2-D grid, combined by a second pass); a width that is not a multiple
// of the 32-column tile.
TEST(CudaNn, LayerNormAffineGradientsOverManyRowsMatchCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  for (const Shape& s : {Shape{5, 40}, Shape{16384, 64}, Shape{3000, 1000}}) {
    const int64_t M = s[1];
    const Tensor x = rnd(s, 22), dy = rnd(s, 23), w = rnd({M}, 24), b = rnd({M}, 25);
    const LayerNormResult c = layer_norm_forward(x, {M}, w, b, 1e-5);
    const LayerNormGrads cg = layer_norm_backward(dy, x, c.mean, c.invstd, {M}, w);
    const LayerNormGrads gg =
        layer_norm_backward(on_gpu(dy), on_gpu(x), on_gpu(c.mean), on_gpu(c.invstd), {M}, on_gpu(w));
    expect_cuda_matches_cpu(gg.dweight, cg.dweight, 1e-5, 1e-4, "layer_norm dweight " + shape_str(s));
    expect_cuda_matches_cpu(gg.dbias, cg.dbias, 1e-5, 1e-4, "layer_norm dbias " + shape_str(s));
    const LayerNormGrads again =
        layer_norm_backward(on_gpu(dy), on_gpu(x), on_gpu(c.mean), on_gpu(c.invstd), {M}, on_gpu(w));
    expect_equal(again.dweight.cpu(), gg.dweight.cpu(), "layer_norm dweight run to run");
  }
}

TEST(CudaNn, LayerNormForwardAndBackwardMatchCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  const Tensor x = rnd({3, 7, 64}, 12), dy = rnd({3, 7, 64}, 13), w = rnd({64}, 14), b = rnd({64}, 15);
  for (bool affine : {true, false}) {
    const Tensor wa = affine ? w : Tensor(), ba = affine ? b : Tensor();
    const LayerNormResult c = layer_norm_forward(x, {64}, wa, ba, 1e-5);
    const LayerNormResult g = layer_norm_forward(on_gpu(x), {64}, on_gpu(wa), on_gpu(ba), 1e-5);
    expect_cuda_matches_cpu(g.out, c.out, 1e-5, 1e-5, "layer_norm out");
    expect_cuda_matches_cpu(g.mean, c.mean, 1e-5, 1e-6, "layer_norm mean");
    expect_cuda_matches_cpu(g.invstd, c.invstd, 1e-5, 1e-6, "layer_norm invstd");
    const LayerNormGrads cg = layer_norm_backward(dy, x, c.mean, c.invstd, {64}, wa);
    const LayerNormGrads gg = layer_norm_backward(on_gpu(dy), on_gpu(x), g.mean, g.invstd, {64}, on_gpu(wa));
    expect_cuda_matches_cpu(gg.dx, cg.dx, 1e-4, 1e-5, "layer_norm dx");
    expect_cuda_matches_cpu(gg.dweight, cg.dweight, 1e-4, 1e-4, "layer_norm dweight");
    expect_cuda_matches_cpu(gg.dbias, cg.dbias, 1e-4, 1e-4, "layer_norm dbias");
  }
}

TEST(CudaNn, CrossEntropyForwardAndBackwardMatchCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  const Tensor logits = mul(rnd({64, 10}, 16), 4.0);
  const Tensor target = randint(0, 10, {64}, RandomKey{3, 3});
  for (double eps : {0.0, 0.1}) {
    const Tensor loss = cross_entropy_forward(logits, target, eps);
    expect_cuda_matches_cpu(cross_entropy_forward(on_gpu(logits), on_gpu(target), eps), loss, 1e-6, 1e-6,
                            "cross_entropy");
    const Tensor g = scalar_tensor(1.0);
    expect_cuda_matches_cpu(cross_entropy_backward(on_gpu(logits), on_gpu(target), eps, on_gpu(g)),
                            cross_entropy_backward(logits, target, eps, g), 1e-5, 1e-7, "cross_entropy_backward");
  }
}

// Targets are checked on the device (no host copy in the step); a bad one is raised, naming the
// op, the value and its index, at the next synchronisation, and the error does not stick.
TEST(CudaNn, CrossEntropyOutOfRangeTargetIsReportedAtTheNextSync) {
  MINIDL_SKIP_WITHOUT_GPU();
  const Tensor logits = on_gpu(rnd({6, 10}, 21));
  const Tensor bad = on_gpu(from_vector<int64_t>({1, 2, 3, 10, 4, 5}));
  try {
    const Tensor loss = cross_entropy_forward(logits, bad, 0.0);
    (void)loss.cpu();  // the synchronisation
    FAIL() << "expected an out-of-range target error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cross_entropy: target value 10 at index 3 is out of range for C = 10"),
              std::string::npos)
        << e.what();
  }
  try {
    const Tensor d = cross_entropy_backward(logits, on_gpu(from_vector<int64_t>({-1, 0, 0, 0, 0, 0})), 0.0,
                                            on_gpu(scalar_tensor(1.0)));
    (void)d.cpu();
    FAIL() << "expected an out-of-range target error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cross_entropy_backward: target value -1 at index 0"), std::string::npos)
        << e.what();
  }
  const Tensor good = from_vector<int64_t>({1, 2, 3, 9, 4, 5});
  expect_cuda_matches_cpu(cross_entropy_forward(logits, on_gpu(good), 0.0),
                          cross_entropy_forward(logits.cpu(), good, 0.0), 1e-6, 1e-6, "a good call after the error");
}

TEST(CudaNn, LinearLayerIsMatmulPlusBiasForwardAndBackward) {
  MINIDL_SKIP_WITHOUT_GPU();
  // y = x W^T + b;  dx = dy W;  dW = dy^T x;  db = sum_rows(dy)
  const Tensor x = rnd({32, 20}, 17), w = rnd({10, 20}, 18), b = rnd({10}, 19), dy = rnd({32, 10}, 20);
  const Tensor gx = on_gpu(x), gw = on_gpu(w), gdy = on_gpu(dy);
  expect_cuda_matches_cpu(add(matmul(gx, gw.t()), on_gpu(b)), add(matmul(x, w.t()), b), 1e-5, 1e-5, "linear forward");
  expect_cuda_matches_cpu(matmul(gdy, gw), matmul(dy, w), 1e-5, 1e-5, "linear dx");
  expect_cuda_matches_cpu(matmul(gdy.t(), gx), matmul(dy.t(), x), 1e-5, 1e-5, "linear dW");
  expect_cuda_matches_cpu(sum_to(gdy, {10}), sum_to(dy, {10}), 1e-5, 1e-5, "linear db");
}
