// tests/kernels/test_cuda_large.cpp — tensors past 2^31 elements on the GPU: element-wise kernels,
// fill_ on a view that starts past 2^31 and the reductions index with int64 (a wrong 32-bit index
// would wrap and miss or overwrite the elements checked here); a convolution whose input has more
// elements than cuDNN's tensor descriptors hold is refused with a clear error. About 17 GB of
// device memory (an H200 has 139 GiB). Skipped, saying why, without a device.
#include "minidl/tensor/ops_nn.h"
#include "minidl/tensor/tensor_all.h"
#include "tests/kernels/cuda_testing.h"

using namespace minidl;
using minidl::testing::expect_close;
using minidl::testing::expect_equal;

namespace {
constexpr int64_t kPast31 = (int64_t(1) << 31) + 64;  // float32: 8.6 GB
}  // namespace

TEST(CudaLarge, ElementwiseAndReductionsPast2To31Elements) {
  MINIDL_SKIP_WITHOUT_GPU();
  Tensor y = ones({kPast31}, DType::Float32, Device::cuda(0)) * 2.0 + 1.0;  // 3 everywhere
  const int64_t planted = (int64_t(1) << 31) + 10;  // past int32's range
  y.narrow(0, planted, 1).fill_(7.0);
  expect_equal(y.narrow(0, kPast31 - 3, 3).cpu(), from_vector<float>({3, 3, 3}), "the last elements");
  expect_equal(y.narrow(0, planted - 1, 3).cpu(), from_vector<float>({3, 7, 3}), "around the planted element");
  const MaxResult m = max(y, 0);
  EXPECT_EQ(m.values.item(), 7.0);
  EXPECT_EQ(m.indices.item<int64_t>(), planted);
  // 3 * n + 4 = 6442451140, summed in double and rounded once to float32
  expect_close(sum(y).cpu(), full({}, 3.0 * double(kPast31) + 4.0), 1e-7, 0, "sum of all");
  expect_close(mean(y).cpu(), full({}, (3.0 * double(kPast31) + 4.0) / double(kPast31)), 1e-7, 0, "mean of all");
}

// cuDNN's tensor descriptors hold at most 2^31 - 1 elements: a batch past that is refused, naming
// the sizes, before any cuDNN call (not a bare CUDNN_STATUS_BAD_PARAM from the descriptor).
TEST(CudaLarge, ConvolutionPastCudnnsTensorSizeIsAClearError) {
  MINIDL_SKIP_WITHOUT_GPU();
  const int64_t N = (int64_t(1) << 31) / (256 * 256) + 1;  // (N, 1, 256, 256): 2^31 + 65536 elements
  const Tensor x = zeros({N, 1, 256, 256}, DType::Float32, Device::cuda(0));
  const Tensor w = zeros({1, 1, 3, 3}, DType::Float32, Device::cuda(0));
  EXPECT_THROW_MSG(conv2d_forward(x, w, Tensor(), {.pad_h = 1, .pad_w = 1}), std::invalid_argument,
                   "conv2d: input (32769, 1, 256, 256) has 2147549184 elements; cuDNN takes at most 2147483647 per "
                   "tensor: split the batch");
  // the same layer on a slice of the batch runs
  const Tensor y = conv2d_forward(x.narrow(0, 0, 2), w, Tensor(), {.pad_h = 1, .pad_w = 1});
  EXPECT_EQ(y.shape(), (Shape{2, 1, 256, 256}));
}
