// tests/autograd/test_gradcheck.cpp — every differentiable op against central differences in
// float64, with broadcasting and non-contiguous (transposed / sliced / expanded) inputs.
#include "tests/common/gradcheck.h"
#include "tests/common/testing.h"

using namespace minidl;
using minidl::testing::gradcheck;
using V = std::vector<Variable>;

namespace {
Tensor rn(const Shape& s, uint64_t stream) { return randn(s, RandomKey{2024, stream}, DType::Float64); }
// strictly positive inputs for log / sqrt / div denominators / pow
Tensor pos(const Shape& s, uint64_t stream) { return add(rand(s, RandomKey{2024, stream}, DType::Float64), 0.5); }
}  // namespace

TEST(Gradcheck, AddSubMulDivWithBroadcasting) {
  gradcheck([](const V& v) { return add(v[0], v[1]); }, {rn({2, 3}, 1), rn({3}, 2)}, "add");
  gradcheck([](const V& v) { return sub(v[0], v[1]); }, {rn({2, 1, 3}, 3), rn({4, 1}, 4)}, "sub");
  gradcheck([](const V& v) { return mul(v[0], v[1]); }, {rn({2, 3}, 5), rn({2, 1}, 6)}, "mul");
  gradcheck([](const V& v) { return div(v[0], v[1]); }, {rn({3, 2}, 7), pos({2}, 8)}, "div");
}

TEST(Gradcheck, BinaryOpsOnNonContiguousInputs) {
  gradcheck([](const V& v) { return mul(transpose(v[0], 0, 1), v[1]); }, {rn({3, 2}, 9), rn({2, 3}, 10)},
            "mul(transposed)");
  gradcheck([](const V& v) { return add(slice(v[0], 1, 0, 4, 2), v[1]); }, {rn({2, 4}, 11), rn({2, 2}, 12)},
            "add(strided slice)");
}

TEST(Gradcheck, ScalarOps) {
  gradcheck([](const V& v) { return add(mul(v[0], 2.5), -1.0); }, {rn({4}, 13)}, "scalar mul/add");
  gradcheck([](const V& v) { return neg(v[0]); }, {rn({4}, 14)}, "neg");
}

TEST(Gradcheck, UnaryMath) {
  gradcheck([](const V& v) { return exp(v[0]); }, {rn({2, 3}, 15)}, "exp");
  gradcheck([](const V& v) { return log(v[0]); }, {pos({2, 3}, 16)}, "log");
  gradcheck([](const V& v) { return sqrt(v[0]); }, {pos({2, 3}, 17)}, "sqrt");
  gradcheck([](const V& v) { return pow(v[0], 3.0); }, {rn({2, 3}, 18)}, "pow 3");
  gradcheck([](const V& v) { return pow(v[0], -0.5); }, {pos({2, 3}, 19)}, "pow -0.5");
  gradcheck([](const V& v) { return tanh(v[0]); }, {rn({2, 3}, 20)}, "tanh");
  gradcheck([](const V& v) { return sigmoid(v[0]); }, {rn({2, 3}, 21)}, "sigmoid");
}

TEST(Gradcheck, Activations) {
  // relu away from its kink at 0: shift inputs so none is within 1e-3 of 0
  Tensor x = rn({3, 4}, 22);
  Tensor shifted = add(x, mul(gt(x, zeros_like(x)), 0.01));
  gradcheck([](const V& v) { return relu(v[0]); }, {shifted}, "relu");
  gradcheck([](const V& v) { return gelu(v[0]); }, {rn({3, 4}, 23)}, "gelu erf");
  gradcheck([](const V& v) { return gelu(v[0], true); }, {rn({3, 4}, 24)}, "gelu tanh");
}

TEST(Gradcheck, Reductions) {
  gradcheck([](const V& v) { return sum(v[0]); }, {rn({2, 3}, 25)}, "sum all");
  gradcheck([](const V& v) { return sum(v[0], {1}, true); }, {rn({2, 3, 4}, 26)}, "sum dim 1 keepdim");
  gradcheck([](const V& v) { return sum(v[0], {0, 2}); }, {rn({2, 3, 4}, 27)}, "sum dims 0,2");
  gradcheck([](const V& v) { return mean(v[0], {-1}); }, {rn({2, 3, 4}, 28)}, "mean last");
  gradcheck([](const V& v) { return mean(transpose(v[0], 0, 2), {0}, true); }, {rn({2, 3, 4}, 29)},
            "mean of transposed");
  gradcheck([](const V& v) { return var(v[0], {1}); }, {rn({3, 5}, 30)}, "var unbiased");
  gradcheck([](const V& v) { return var(v[0], {}, 0, true); }, {rn({3, 5}, 31)}, "var biased all keepdim");
  gradcheck([](const V& v) { return max(v[0], 1); }, {rn({3, 5}, 32)}, "max dim 1");
  gradcheck([](const V& v) { return max(v[0], 0, true); }, {rn({3, 5}, 33)}, "max dim 0 keepdim");
}

TEST(Gradcheck, Matmul) {
  gradcheck([](const V& v) { return matmul(v[0], v[1]); }, {rn({3, 4}, 34), rn({4, 2}, 35)}, "mm");
  gradcheck([](const V& v) { return matmul(v[0], v[1]); }, {rn({2, 3, 4}, 36), rn({2, 4, 5}, 37)}, "bmm");
  gradcheck([](const V& v) { return matmul(v[0], v[1]); }, {rn({2, 1, 3, 4}, 38), rn({3, 4, 2}, 39)},
            "matmul broadcast batch");
  gradcheck([](const V& v) { return matmul(v[0], v[1]); }, {rn({2, 3, 4}, 40), rn({4, 5}, 41)}, "matmul 3d x 2d");
  gradcheck([](const V& v) { return matmul(v[0], v[1]); }, {rn({4}, 42), rn({4, 3}, 43)}, "vec x mat");
  gradcheck([](const V& v) { return matmul(v[0], v[1]); }, {rn({3, 4}, 44), rn({4}, 45)}, "mat x vec");
  gradcheck([](const V& v) { return matmul(transpose(v[0], 0, 1), v[1]); }, {rn({4, 3}, 46), rn({4, 2}, 47)},
            "mm transposed");
  gradcheck([](const V& v) { return linear(v[0], v[1], v[2]); }, {rn({2, 3, 4}, 48), rn({5, 4}, 49), rn({5}, 50)},
            "linear 3d");
}

TEST(Gradcheck, ShapeOps) {
  gradcheck([](const V& v) { return reshape(v[0], {3, 4}); }, {rn({2, 6}, 51)}, "reshape");
  gradcheck([](const V& v) { return permute(v[0], {2, 0, 1}); }, {rn({2, 3, 4}, 52)}, "permute");
  gradcheck([](const V& v) { return slice(v[0], 1, 1, 4, 2); }, {rn({2, 5}, 53)}, "slice");
  gradcheck([](const V& v) { return narrow(v[0], 0, 1, 2); }, {rn({4, 2}, 54)}, "narrow");
  gradcheck([](const V& v) { return select(v[0], 1, 2); }, {rn({2, 3}, 55)}, "select");
  gradcheck([](const V& v) { return expand(v[0], {2, 3, 4}); }, {rn({3, 1}, 56)}, "expand");
  gradcheck([](const V& v) { return cat({v[0], v[1], v[0]}, 1); }, {rn({2, 3}, 57), rn({2, 1}, 58)}, "cat dim 1");
  gradcheck([](const V& v) { return stack({v[0], v[1]}, 1); }, {rn({2, 3}, 59), rn({2, 3}, 60)}, "stack dim 1");
  const Tensor idx = from_vector<int64_t>({2, 0, 2, 1});
  gradcheck([idx](const V& v) { return index_select(v[0], 0, idx); }, {rn({3, 2}, 61)}, "index_select repeats");
  gradcheck([idx](const V& v) { return index_select(v[0], 1, idx); }, {rn({2, 3}, 62)}, "index_select dim 1");
}

TEST(Gradcheck, SoftmaxFamily) {
  gradcheck([](const V& v) { return softmax(v[0], -1); }, {rn({3, 5}, 63)}, "softmax last");
  gradcheck([](const V& v) { return softmax(v[0], 0); }, {rn({3, 5}, 64)}, "softmax dim 0");
  gradcheck([](const V& v) { return log_softmax(v[0], 1); }, {rn({2, 4, 3}, 65)}, "log_softmax dim 1");
}

TEST(Gradcheck, Losses) {
  const Tensor target = from_vector<int64_t>({1, 0, 3});
  gradcheck([target](const V& v) { return cross_entropy(v[0], target); }, {rn({3, 4}, 66)}, "cross_entropy");
  gradcheck([target](const V& v) { return cross_entropy(v[0], target, 0.1); }, {rn({3, 4}, 67)},
            "cross_entropy smoothing 0.1");
  gradcheck([target](const V& v) { return nll_loss(log_softmax(v[0], 1), target); }, {rn({3, 4}, 68)}, "nll_loss");
  gradcheck([](const V& v) { return mse_loss(v[0], v[1]); }, {rn({2, 3}, 69), rn({2, 3}, 70)}, "mse_loss");
}

TEST(Gradcheck, Conv2d) {
  gradcheck([](const V& v) { return conv2d(v[0], v[1], v[2], {}); },
            {rn({2, 2, 5, 5}, 71), rn({3, 2, 3, 3}, 72), rn({3}, 73)}, "conv2d basic");
  Conv2dParams p{.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1};
  gradcheck([p](const V& v) { return conv2d(v[0], v[1], v[2], p); },
            {rn({1, 2, 6, 5}, 74), rn({2, 2, 3, 3}, 75), rn({2}, 76)}, "conv2d stride 2 pad 1");
  Conv2dParams d{.pad_h = 2, .pad_w = 2, .dilation_h = 2, .dilation_w = 2, .groups = 2};
  gradcheck([d](const V& v) { return conv2d(v[0], v[1], Variable(), d); }, {rn({1, 4, 5, 5}, 77), rn({4, 2, 3, 3}, 78)},
            "conv2d dilation 2 groups 2 no bias");
}

TEST(Gradcheck, Pooling) {
  Pool2dParams mp{.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2};
  gradcheck([mp](const V& v) { return max_pool2d(v[0], mp); }, {rn({2, 2, 4, 4}, 79)}, "max_pool2d 2x2");
  Pool2dParams mp3{.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1};
  gradcheck([mp3](const V& v) { return max_pool2d(v[0], mp3); }, {rn({1, 2, 5, 5}, 80)}, "max_pool2d 3x3 pad 1");
  gradcheck([mp3](const V& v) { return avg_pool2d(v[0], mp3); }, {rn({1, 2, 5, 5}, 81)}, "avg_pool2d 3x3 pad 1");
  gradcheck([](const V& v) { return adaptive_avg_pool2d(v[0], 2, 3); }, {rn({1, 2, 5, 7}, 82)}, "adaptive_avg_pool2d");
}

TEST(Gradcheck, BatchNormTrainingAndEval) {
  gradcheck([](const V& v) { return batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], true, 0.1, 1e-5); },
            {rn({4, 3, 2, 2}, 83), rn({3}, 84), rn({3}, 85)}, "batch_norm train 4d");
  gradcheck([](const V& v) { return batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], true, 0.1, 1e-5); },
            {rn({5, 3}, 86), rn({3}, 87), rn({3}, 88)}, "batch_norm train 2d");
  const Tensor rm = rn({3}, 89), rv = pos({3}, 90);
  gradcheck([rm, rv](const V& v) { return batch_norm(v[0], rm, rv, v[1], v[2], false, 0.1, 1e-5); },
            {rn({4, 3, 2, 2}, 91), rn({3}, 92), rn({3}, 93)}, "batch_norm eval");
}

TEST(Gradcheck, LayerNorm) {
  gradcheck([](const V& v) { return layer_norm(v[0], {4}, v[1], v[2], 1e-5); },
            {rn({2, 3, 4}, 94), rn({4}, 95), rn({4}, 96)}, "layer_norm last dim");
  gradcheck(
      [](const V& v) {
        return layer_norm(v[0], {3, 4}, Variable(), Variable(), 1e-5);
      },
      {rn({2, 3, 4}, 97)}, "layer_norm two dims no affine");
}

TEST(Gradcheck, DropoutAndEmbedding) {
  const RandomKey key{7, 3};
  gradcheck([key](const V& v) { return dropout(v[0], 0.4, true, key); }, {rn({4, 5}, 98)}, "dropout");
  const Tensor idx = from_vector<int64_t>({1, 3, 1, 0, 2, 3}, {2, 3});
  gradcheck([idx](const V& v) { return embedding(idx, v[0]); }, {rn({4, 2}, 99)}, "embedding");
}
