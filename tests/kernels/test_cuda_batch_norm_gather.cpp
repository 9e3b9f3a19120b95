// tests/kernels/test_cuda_batch_norm_gather.cpp — SyncBatchNorm's device-side pieces on a GPU
// against the CPU: batch_norm_gather_stats_with_counts (the merge of every rank's statistics: both
// add the ranks in order in double, so they differ at most by fused multiply-adds) and
// batch_norm_backward_elemt with the count as a device tensor. Skipped, saying why, without a device.
#include "minidl/tensor/tensor_all.h"
#include "tests/kernels/cuda_testing.h"

using namespace minidl;
using minidl::testing::on_gpu;

namespace {
// R ranks' rows (mean (C), invstd (C), count) as SyncBatchNorm gathers them; rank 1 is empty.
Tensor gathered_rows(int64_t R, int64_t C) {
  Tensor rows = zeros({R, 2 * C + 1}, DType::Float64);
  for (int64_t r = 0; r < R; ++r) {
    if (r == 1) continue;
    const Tensor x = add(mul(randn({3 + r, C, 4}, RandomKey{7, static_cast<uint64_t>(r)}), 1.0 + r), double(r));
    const BatchNormStats s = batch_norm_stats(x.to(DType::Float64), 1e-5);
    rows[r].narrow(0, 0, C).copy_(s.mean);
    rows[r].narrow(0, C, C).copy_(s.invstd);
    rows[r].narrow(0, 2 * C, 1).fill_(static_cast<double>((3 + r) * 4));
  }
  return rows;
}
}  // namespace

TEST(CudaBatchNormGather, MatchesTheCpuMerge) {
  MINIDL_SKIP_WITHOUT_GPU();
  const Tensor rows = gathered_rows(5, 37);
  const BatchNormGatheredStats cpu = batch_norm_gather_stats_with_counts(rows, 1e-5);
  const BatchNormGatheredStats gpu = batch_norm_gather_stats_with_counts(on_gpu(rows), 1e-5);
  minidl::testing::expect_cuda_matches_cpu(gpu.mean, cpu.mean, 1e-13, 1e-13, "mean");
  minidl::testing::expect_cuda_matches_cpu(gpu.invstd, cpu.invstd, 1e-13, 1e-13, "invstd");
  minidl::testing::expect_cuda_matches_cpu(gpu.unbiased_var, cpu.unbiased_var, 1e-13, 1e-13, "unbiased_var");
  EXPECT_EQ(gpu.count.cpu().to_vector<double>(), std::vector<double>{(3 + 5 + 6 + 7) * 4.0});
}

TEST(CudaBatchNormGather, BackwardElemtReadsTheCountOnTheDevice) {
  MINIDL_SKIP_WITHOUT_GPU();
  const Tensor x = randn({4, 3, 5}, RandomKey{8, 0}), dy = randn({4, 3, 5}, RandomKey{8, 1});
  const Tensor w = randn({3}, RandomKey{8, 2});
  const BatchNormStats s = batch_norm_stats(x, 1e-5);
  const BatchNormReduce r = batch_norm_backward_reduce(dy, x, s.mean, s.invstd, w);
  const Tensor cpu = batch_norm_backward_elemt(dy, x, s.mean, s.invstd, w, r.sum_dy, r.sum_dy_xmu, int64_t{60});
  const Tensor gpu =
      batch_norm_backward_elemt(on_gpu(dy), on_gpu(x), on_gpu(s.mean), on_gpu(s.invstd), on_gpu(w), on_gpu(r.sum_dy),
                                on_gpu(r.sum_dy_xmu), on_gpu(from_vector<double>({60.0})));
  minidl::testing::expect_cuda_matches_cpu(gpu, cpu, 1e-6, 1e-6, "backward_elemt with a device count");
}
