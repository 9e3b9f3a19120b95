// kernels/batch_norm_gather.h — SyncBatchNorm's merge of every rank's statistics for one channel
// (PyTorch's batch_norm_gather_stats_with_counts), written once for the CPU loop
// (kernels/cpu/norm.h) and the CUDA kernel (kernels/cuda/norm.cu, one thread per channel).
// rows (R, 2C + 1): rank r's (mean (C), invstd (C), count); rows with count 0 are skipped.
// Chan's formula: N = sum n_r; mean = sum n_r m_r / N; var = sum n_r (v_r + (m_r - mean)^2) / N
// with v_r = 1 / invstd_r^2 - eps; invstd = 1 / sqrt(var + eps), unbiased_var = var N / (N - 1).
// Ranks are added in order, so both devices give the same numbers up to fused multiply-adds.
#pragma once
#include <cmath>
#include <cstdint>

#include "minidl/kernels/functors.h"  // MINIDL_HD

namespace minidl::kernels {

// N: the sum of the ranks' counts.
MINIDL_HD double batch_norm_gather_count(const double* rows, int64_t R, int64_t C) {
  double n_all = 0;
  for (int64_t r = 0; r < R; ++r) n_all += rows[r * (2 * C + 1) + 2 * C];
  return n_all;
}

// Channel c's merged mean, invstd and unbiased variance; n_all from batch_norm_gather_count.
MINIDL_HD void batch_norm_gather_channel(const double* rows, int64_t R, int64_t C, int64_t c, double eps,
                                         double n_all, double* mean, double* invstd, double* unbiased_var) {
  const int64_t W = 2 * C + 1;
  double sum_n_m = 0;
  for (int64_t r = 0; r < R; ++r) {
    const double* p = rows + r * W;
    if (p[2 * C] != 0) sum_n_m += p[2 * C] * p[c];
  }
  const double m = sum_n_m / n_all;
  double sum_n_var = 0;
  for (int64_t r = 0; r < R; ++r) {
    const double* p = rows + r * W;
    const double n = p[2 * C];
    if (n == 0) continue;
    const double var_r = 1.0 / (p[C + c] * p[C + c]) - eps;
    const double d = p[c] - m;
    sum_n_var += n * (var_r + d * d);
  }
  const double var = sum_n_var / n_all;
  mean[c] = m;
  invstd[c] = 1.0 / std::sqrt(var + eps);
  unbiased_var[c] = var * n_all / (n_all - 1);
}

}  // namespace minidl::kernels
