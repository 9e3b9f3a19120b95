// tests/tensor/test_nan_propagation.cpp — NaN and signed zeros through relu, its backward and
// maximum/minimum (kernels/functors.h), against PyTorch 2.x:
//   x = torch.tensor([nan, -0., 0., -1., 2.], requires_grad=True)
//   torch.relu(x)                       -> [nan, -0., 0., 0., 2.]
//   torch.relu(x).backward(ones(5))     -> x.grad = [1., 0., 0., 0., 1.]
//   torch.maximum([nan, 1, 2], [1, nan, 3]) -> [nan, nan, 3]
//   torch.minimum([nan, 1, 2], [1, nan, 3]) -> [nan, nan, 2]
// A NaN that turned into 0 would hide a diverged run from every later finiteness check.
#include <cmath>
#include <limits>

#include "tests/common/testing.h"

using namespace minidl;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Element-wise identity including NaN and the sign of zero (expect_equal treats NaN != NaN).
template <class T> void expect_same_bits(const Tensor& got, const std::vector<T>& want) {
  const std::vector<T> v = got.to_vector<T>();
  ASSERT_EQ(v.size(), want.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(v[i])) << "element " << i << " is " << v[i] << ", expected NaN";
    } else {
      EXPECT_EQ(v[i], want[i]) << "element " << i;
      EXPECT_EQ(std::signbit(v[i]), std::signbit(want[i])) << "sign of element " << i;
    }
  }
}

}  // namespace

TEST(NanPropagation, ReluKeepsNanAndNegativeZeroLikeTorch) {
  Tensor x = from_vector<double>({kNaN, -0.0, 0.0, -1.0, 2.0});
  expect_same_bits<double>(relu(x), {kNaN, -0.0, 0.0, 0.0, 2.0});
  Tensor xf = from_vector<float>({float(kNaN), -0.0f, 0.0f, -1.0f, 2.0f});
  expect_same_bits<float>(relu(xf), {float(kNaN), -0.0f, 0.0f, 0.0f, 2.0f});
}

TEST(NanPropagation, ReluBackwardPassesTheGradientAtNanLikeTorch) {
  Tensor x = from_vector<double>({kNaN, -0.0, 0.0, -1.0, 2.0});
  Tensor dy = ones({5}, DType::Float64);
  expect_same_bits<double>(relu_backward(x, dy), {1.0, 0.0, 0.0, 0.0, 1.0});
}

TEST(NanPropagation, MaximumAndMinimumPropagateNanFromEitherSide) {
  Tensor a = from_vector<double>({kNaN, 1.0, 2.0});
  Tensor b = from_vector<double>({1.0, kNaN, 3.0});
  expect_same_bits<double>(maximum(a, b), {kNaN, kNaN, 3.0});
  expect_same_bits<double>(minimum(a, b), {kNaN, kNaN, 2.0});
  expect_same_bits<double>(maximum(b, a), {kNaN, kNaN, 3.0});
  expect_same_bits<double>(minimum(b, a), {kNaN, kNaN, 2.0});
}
