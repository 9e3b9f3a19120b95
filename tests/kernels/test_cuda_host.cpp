// tests/kernels/test_cuda_host.cpp — the host-side decisions of the CUDA path, checked on the CPU
// (runs everywhere: this code is plain C++ shared with, or called by, the kernels):
//  - the element-wise loop's addressing (make_iter + strided_offset): for each view, every loop
//    element's offset in every operand equals the offset found independently by unravelling the
//    index over the view's own shape and strides, and the fast path (offset = index) is taken only
//    when EVERY operand is dense — the cases a last-operand-only decision got wrong: stack of 1-d
//    tensors along dim 1, cat of (N, 1) columns, select(1, 0) + y, a copy into a stride-2 slice;
//  - when a batched matmul is one strided-batched GEMM (cuda_dispatch::batch_stride);
//  - which cuDNN algorithm conv2d takes (kernels/cuda/algo_pick.h);
//  - MINIDL_CUDA_SYNC's parsing.
#include <gtest/gtest.h>

#include "minidl/kernels/cuda/algo_pick.h"
#include "minidl/kernels/cuda_api.h"
#include "minidl/kernels/cuda_ops.h"
#include "minidl/tensor/cuda_dispatch.h"
#include "minidl/tensor/tensor_all.h"

using namespace minidl;
namespace kc = minidl::kernels::cuda;

namespace {
// Offset of element i of a row-major walk over `shape` in a tensor with `strides` (the reference).
int64_t reference_offset(const Shape& shape, const Shape& strides, int64_t i) {
  int64_t off = 0;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    off += (i % shape[d]) * strides[d];
    i /= shape[d];
  }
  return off;
}
// Builds the loop for operands viewed with `shape` and checks every offset of every operand.
kc::StridedIter check_addressing(const Shape& shape, const std::vector<Tensor>& operands, const char* what) {
  std::vector<Shape> strides;
  for (const Tensor& t : operands) strides.push_back(t.shape() == shape ? t.strides() : t.expand(shape).strides());
  std::vector<const Shape*> ptrs;
  for (const Shape& s : strides) ptrs.push_back(&s);
  const kc::StridedIter it = cuda_dispatch::make_iter(shape, ptrs, what);
  EXPECT_EQ(it.numel, shape_numel(shape)) << what;
  for (size_t k = 0; k < operands.size(); ++k)
    for (int64_t i = 0; i < it.numel; ++i)
      if (kc::strided_offset(it, static_cast<int>(k), i) != reference_offset(shape, strides[k], i)) {
        ADD_FAILURE() << what << ": operand " << k << ", element " << i << " at offset "
                      << kc::strided_offset(it, static_cast<int>(k), i) << ", expected "
                      << reference_offset(shape, strides[k], i);
        return it;
      }
  return it;
}
}  // namespace

TEST(CudaIter, StackOf1dTensorsAlongDim1WritesStridedColumns) {
  const Tensor out = zeros({5, 3}), src = arange(5).reshape({5, 1});
  const Tensor col = out.narrow(1, 1, 1);  // (5, 1), strides (3, 1): a strided output
  const auto it = check_addressing(col.shape(), {col, src}, "stack column");
  EXPECT_FALSE(it.contiguous) << "output stride 3, input stride 1: not the dense path";
  EXPECT_EQ(it.ndim, 1);
  EXPECT_EQ(it.strides[0][0], 3);
  EXPECT_EQ(it.strides[1][0], 1);
}

TEST(CudaIter, CatOfColumnsAndStrided1dInputs) {
  const Tensor out = zeros({4, 2}), a = arange(4).reshape({4, 1});
  EXPECT_FALSE(check_addressing({4, 1}, {out.narrow(1, 0, 1), a}, "cat column 0").contiguous);
  EXPECT_FALSE(check_addressing({4, 1}, {out.narrow(1, 1, 1), a}, "cat column 1").contiguous);
  // select(1, 0) + y: the first input is strided, the output and the second input are dense
  const Tensor x = arange(12).reshape({4, 3}), y = arange(4), z = zeros({4});
  EXPECT_FALSE(check_addressing({4}, {z, x.select(1, 0), y}, "select(1, 0) + y").contiguous);
  // the same with the strided operand last and first
  EXPECT_FALSE(check_addressing({4}, {z, y, x.select(1, 2)}, "y + select(1, 2)").contiguous);
  EXPECT_FALSE(check_addressing({4}, {x.select(1, 1), y, y}, "strided output").contiguous);
}

TEST(CudaIter, CopyIntoAStride2Slice) {
  const Tensor buf = zeros({10}), src = arange(5);
  const Tensor dst = buf.slice(0, 0, 10, 2);  // (5), stride 2
  ASSERT_EQ(dst.stride(0), 2);
  const auto it = check_addressing(dst.shape(), {dst, src}, "copy into stride-2 slice");
  EXPECT_FALSE(it.contiguous);
}

TEST(CudaIter, BroadcastScalarIsNotDense) {
  const Tensor z = zeros({6}), s = full({1}, 2.0);
  EXPECT_FALSE(check_addressing({6}, {z, s}, "x + scalar").contiguous);
}

TEST(CudaIter, DenseOperandsMergeToOneDimAndTakeTheFastPath) {
  const Tensor a = zeros({2, 3, 4}), b = arange(24).reshape({2, 3, 4});
  const auto it = check_addressing(a.shape(), {a, b, b}, "dense (2, 3, 4)");
  EXPECT_TRUE(it.contiguous);
  EXPECT_EQ(it.ndim, 1);
  EXPECT_TRUE(check_addressing({}, {full({}, 1.0), full({}, 2.0)}, "0-d").contiguous);
  EXPECT_TRUE(check_addressing({3, 1}, {zeros({3, 1}), zeros({3, 1})}, "(3, 1) dense").contiguous);
}

TEST(CudaIter, TransposedPermutedAndBroadcastOperandsAddressCorrectly) {
  const Tensor x = arange(24).reshape({2, 3, 4});
  const Tensor p = x.permute({2, 0, 1});  // (4, 2, 3)
  EXPECT_FALSE(check_addressing(p.shape(), {zeros(p.shape()), p}, "permuted").contiguous);
  const Tensor row = arange(3).reshape({1, 3}), m = zeros({4, 3});
  EXPECT_FALSE(check_addressing({4, 3}, {m, row}, "row broadcast").contiguous);
  const Tensor t = arange(12).reshape({3, 4}).t();  // (4, 3) transposed view
  EXPECT_FALSE(check_addressing({4, 3}, {m, t, row}, "transposed + broadcast").contiguous);
  // a (2, 3) block of a (2, 6) matrix: rows merge only where every operand allows it
  const Tensor big = arange(12).reshape({2, 6});
  EXPECT_FALSE(check_addressing({2, 3}, {zeros({2, 3}), big.narrow(1, 3, 3)}, "narrowed block").contiguous);
}

// One strided-batched GEMM needs each operand's batch dims to step by one stride.
TEST(CudaBatchStride, UniformBatchesGiveOneStridePermutedViewsDoNot) {
  int64_t step = -1;
  const Tensor x = zeros({2, 3, 7, 4});  // (B, H, T, D) contiguous
  EXPECT_TRUE(cuda_dispatch::batch_stride(x, {2, 3}, step));
  EXPECT_EQ(step, 28);
  const Tensor q = zeros({2, 7, 3, 4}).permute({0, 2, 1, 3});  // (B, H, T, D) view: H steps by 4, B by 84
  EXPECT_FALSE(cuda_dispatch::batch_stride(q, {2, 3}, step));
  EXPECT_TRUE(cuda_dispatch::batch_stride(q.contiguous(), {2, 3}, step));
  EXPECT_EQ(step, 28);
  const Tensor w = zeros({7, 4}).expand({2, 3, 7, 4});  // broadcast everywhere: stride 0
  EXPECT_TRUE(cuda_dispatch::batch_stride(w, {2, 3}, step));
  EXPECT_EQ(step, 0);
  const Tensor half = zeros({3, 7, 4}).expand({2, 3, 7, 4});  // B broadcast, H dense: not one stride
  EXPECT_FALSE(cuda_dispatch::batch_stride(half, {2, 3}, step));
  EXPECT_TRUE(cuda_dispatch::batch_stride(zeros({1, 3, 7, 4}), {1, 3}, step));  // size-1 dims ignored
  EXPECT_EQ(step, 28);
}

TEST(CudaAlgoPick, FirstDeterministicFittingAlgorithmWithExactMathUnlessTf32) {
  using kc::AlgoCandidate;
  using kc::ConvDirection;
  const size_t limit = 1000;
  // a backward-filter ranking as cuDNN returns it: fastest first (algo = the enum's value)
  const AlgoCandidate ranked[] = {
      {.algo = 0, .ok = true, .fma_math = true, .memory = 0},  // fastest: BWD_FILTER_ALGO_0 uses atomics
      {.algo = 3, .ok = true, .fma_math = true, .memory = 0},  // BWD_FILTER_ALGO_3 uses atomics
      {.algo = 1, .ok = false, .fma_math = true, .memory = 0},  // failed status
      {.algo = 5, .ok = true, .fma_math = true, .memory = 5000},  // workspace too big
      {.algo = 6, .ok = true, .fma_math = false, .memory = 10},  // tensor-op (TF32) math
      {.algo = 1, .ok = true, .fma_math = true, .memory = 100},  // exact and deterministic
  };
  EXPECT_EQ(kc::pick_algorithm(ConvDirection::BackwardFilter, ranked, 6, limit, /*allow_tensor_ops=*/false), 5);
  EXPECT_EQ(kc::pick_algorithm(ConvDirection::BackwardFilter, ranked, 6, limit, /*allow_tensor_ops=*/true), 4);
  EXPECT_EQ(kc::pick_algorithm(ConvDirection::BackwardFilter, ranked, 6, 10000, false), 3);
  EXPECT_EQ(kc::pick_algorithm(ConvDirection::BackwardFilter, ranked, 3, limit, true), -1)
      << "none qualifies: conv.cu falls back and warns";
  EXPECT_EQ(kc::pick_algorithm(ConvDirection::BackwardFilter, ranked, 0, limit, true), -1);
  // the same ranking read as forward algorithms: every forward algorithm is deterministic, so the
  // fastest is taken; as backward-data ones, only ALGO_0 is left out
  EXPECT_EQ(kc::pick_algorithm(ConvDirection::Forward, ranked, 6, limit, false), 0);
  EXPECT_EQ(kc::pick_algorithm(ConvDirection::BackwardData, ranked, 6, limit, false), 1);
}

TEST(CudaAlgoPick, DeterminismIsCudnnsDocumentedListPerDirection) {
  using kc::ConvDirection;
  for (int algo = 0; algo < 8; ++algo) {
    EXPECT_TRUE(kc::is_deterministic(ConvDirection::Forward, algo)) << algo;
    EXPECT_EQ(kc::is_deterministic(ConvDirection::BackwardData, algo), algo != 0) << algo;
    EXPECT_EQ(kc::is_deterministic(ConvDirection::BackwardFilter, algo), algo != 0 && algo != 3) << algo;
  }
}

TEST(CudaSyncMode, ParsesZeroOneAndUnsetRejectsAnythingElse) {
  EXPECT_FALSE(kc::parse_cuda_sync(nullptr));
  EXPECT_FALSE(kc::parse_cuda_sync(""));
  EXPECT_FALSE(kc::parse_cuda_sync("0"));
  EXPECT_TRUE(kc::parse_cuda_sync("1"));
  for (const char* bad : {"yes", "2", " 1", "true"}) {
    try {
      kc::parse_cuda_sync(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), std::string("MINIDL_CUDA_SYNC must be 0 or 1, got '") + bad + "'");
    }
  }
  const bool before = kc::sync_after_kernels();
  kc::set_sync_after_kernels(!before);
  EXPECT_EQ(kc::sync_after_kernels(), !before);
  kc::set_sync_after_kernels(before);
}
