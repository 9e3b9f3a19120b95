// tests/nn/test_layer_inputs.cpp — layer options and inputs as PyTorch takes them: an Embedding
// as the first child of a Sequential (int64 indices in), pooling modules whose stride is left out.
#include "minidl/nn/nn_all.h"
#include "tests/common/testing.h"

using namespace minidl;
using minidl::testing::expect_equal;

TEST(EmbeddingInSequential, IndicesInEmbeddingsThroughTheNextLayerAndGradientsBack) {
  nn::Sequential net;
  net.push_back<nn::Embedding>(nn::EmbeddingOptions{.num_embeddings = 4, .embedding_dim = 2});
  net.push_back<nn::Linear>(nn::LinearOptions{.in = 2, .out = 1});
  net.load_state_dict({{"0.weight", from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7}, {4, 2})},
                       {"1.weight", from_vector<float>({1, 2}, {1, 2})},
                       {"1.bias", from_vector<float>({0.5f}, {1})}});
  const Variable indices(from_vector<int64_t>({1, 3, 0, 1}, {2, 2}));
  Variable y = net(indices);  // row r of the table is [2r, 2r + 1]; 1 * 2r + 2 * (2r + 1) + 0.5
  expect_equal(y.data(), from_vector<float>({8.5f, 20.5f, 2.5f, 8.5f}, {2, 2, 1}));
  sum(y).backward();
  // each use of a row adds the Linear's weight [1, 2] to it: row 1 twice, rows 0 and 3 once
  auto& emb = static_cast<nn::Embedding&>(net[0]);
  expect_equal(emb.weight.grad(), from_vector<float>({1, 2, 2, 4, 0, 0, 1, 2}, {4, 2}));
  EXPECT_THROW_MSG(net(Variable(from_vector<float>({1}, {1}))), std::invalid_argument,
                   "embedding: indices must be int64");
}

TEST(PoolModules, StrideLeftOutIsTheKernel) {
  const Variable x(arange(36, DType::Float32).reshape({1, 1, 6, 6}));  // x[h][w] = 6 h + w
  nn::MaxPool2d max_pool({.kernel = 3});
  nn::AvgPool2d avg_pool({.kernel = 3});
  EXPECT_EQ(max_pool.params.stride_h, 3);
  EXPECT_EQ(max_pool.extra_repr(), "kernel_size=3, stride=3, padding=0, dilation=1, ceil_mode=False");
  expect_equal(max_pool(x).data(), from_vector<float>({14, 17, 32, 35}, {1, 1, 2, 2}));
  expect_equal(avg_pool(x).data(), from_vector<float>({7, 10, 25, 28}, {1, 1, 2, 2}));
  EXPECT_THROW_MSG(nn::MaxPool2d({.kernel = 3, .stride = -1}), std::invalid_argument, "stride=-1");
}
