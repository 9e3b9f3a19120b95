// kernels/cpu/cross_entropy.h — softmax cross entropy with label smoothing, forward beside
// backward, on raw pointers. logits (N, C) row-major, target (N) int64 already validated to lie
// in [0, C). With eps = label smoothing (as torch.nn.functional.cross_entropy):
//   loss_n = (1 - eps) * (lse_n - x[n, t_n]) + eps * mean_c(lse_n - x[n, c]),  lse = logsumexp
//   dlogits[n, c] = (softmax[n, c] - ((1 - eps) * [c == t_n] + eps / C)) * grad / N
// The log-sum-exp subtracts the row max first, so large logits do not overflow. Math in double,
// except in float rows with a finite max: the max, exp(x - max) and its sum run on 16 lanes
// (vec_math.h's max_span, exp_nonpositive, sum_exp_span: the sum still in double) and the
// gradient's softmax is exp(x - max) / sum in float, as softmax.h's fast rows. The double branch
// of each `if constexpr` is the reference (float64 logits, rows holding an infinity).
// Tested through tensor/ops_loss.cpp by tests/tensor/test_ops_loss.cpp (hand-computed losses,
// float64 finite differences with and without smoothing); the fast rows against the reference by
// tests/tensor/test_cpu_fast_paths.cpp (CrossEntropyFastRows).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/cpu/vec_math.h"

namespace minidl::kernels::cpu {

// log(sum_c exp(x[c])) of one row, stable.
template <class T> double logsumexp_row(const T* x, int64_t C) {
  if constexpr (std::is_same_v<T, float>) {
    const float m = max_span(x, C);
    if (std::isfinite(m)) return m + std::log(sum_exp_span(x, C, m));
  }
  double m = -INFINITY;
  for (int64_t c = 0; c < C; ++c) m = std::max(m, static_cast<double>(x[c]));
  if (std::isinf(m)) return m;  // all -inf (or a +inf): the sum is exp(m)
  double s = 0;
  for (int64_t c = 0; c < C; ++c) s += std::exp(x[c] - m);
  return m + std::log(s);
}

// row_loss (N): the loss of each row before the mean; the caller sums the rows in order.
template <class T>
void cross_entropy_forward_rows(const T* logits, const int64_t* target, int64_t N, int64_t C, double eps,
                                double* row_loss) {
  parallel_for(N, std::max<int64_t>(1, 16384 / std::max<int64_t>(C, 1)), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const T* x = logits + n * C;
      const double lse = logsumexp_row(x, C);
      double loss = (1.0 - eps) * (lse - x[target[n]]);
      if (eps != 0.0) {
        double sx = 0;
        for (int64_t c = 0; c < C; ++c) sx += x[c];
        loss += eps * (lse - sx / static_cast<double>(C));
      }
      row_loss[n] = loss;
    }
  });
}

// dlogits (N, C) = (softmax - smoothed one-hot) * grad / N.
template <class T>
void cross_entropy_backward(const T* logits, const int64_t* target, int64_t N, int64_t C, double eps, double grad,
                            T* dlogits) {
  const double scale = grad / static_cast<double>(N), off = eps / static_cast<double>(C);
  parallel_for(N, std::max<int64_t>(1, 16384 / std::max<int64_t>(C, 1)), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const T* x = logits + n * C;
      T* d = dlogits + n * C;
      if constexpr (std::is_same_v<T, float>) {
        const float m = max_span(x, C);
        if (std::isfinite(m)) {  // softmax = exp(x - max) / sum on 16 lanes, then the target's entry again
          const float inv = static_cast<float>(1.0 / sum_exp_span(x, C, m));
          const float s = static_cast<float>(scale), o = static_cast<float>(off);
          for (int64_t c = 0; c < C; ++c) d[c] = (exp_nonpositive(x[c] - m) * inv - o) * s;
          const int64_t t = target[n];
          d[t] = static_cast<float>((static_cast<double>(exp_nonpositive(x[t] - m) * inv) - (1.0 - eps) - off) * scale);
          continue;
        }
      }
      const double lse = logsumexp_row(x, C);
      for (int64_t c = 0; c < C; ++c) {
        const double q = (c == target[n] ? 1.0 - eps : 0.0) + off;
        d[c] = static_cast<T>((std::exp(x[c] - lse) - q) * scale);
      }
    }
  });
}

}  // namespace minidl::kernels::cpu
