// kernels/cpu/batch_norm_add_relu.h — the tail of a residual block (torchvision's BasicBlock:
// bn2, add the shortcut, ReLU) as one pass over x, the residual and y:
//   y (N, C, S) = relu(((x - mean[c]) * invstd[c] * weight[c] + bias[c]) + residual)
// with the normalised value rounded to x's type before the add, as batch_norm_elemt then add then
// relu round it: the same bits as the three passes (kernels/cpu/norm.h's batch_norm_elemt, the
// element-wise add and ReLU), which read x, write the normalised tensor, read it again with the
// residual, write the sum, read it and write y. The backward needs no kernel of its own: the ReLU's
// mask gives the residual's gradient, and batch norm's backward pieces take it as dy. Parallel
// over the N*C planes (norm_grain's chunks). Tested against the three ops by
// tests/autograd/test_fused_ops.cpp (BatchNormAddRelu).
#pragma once
#include <cstdint>

#include "minidl/kernels/cpu/norm.h"

namespace minidl::kernels::cpu {

// mean, invstd, weight, bias: C doubles (a null weight means 1, a null bias 0)
template <class T>
void batch_norm_add_relu_elemt(const T* x, const T* residual, int64_t N, int64_t C, int64_t S, const double* mean,
                               const double* invstd, const double* weight, const double* bias, T* y) {
  const BatchNormAffine affine{invstd, weight, bias};
  parallel_for(N * C, norm_grain(2 * S), [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl) {
      const int64_t c = pl % C;
      const double m = mean[c], scale = affine.scale(c), b = affine.shift(c);
      const T *xp = x + pl * S, *rp = residual + pl * S;
      T* yp = y + pl * S;
      for (int64_t i = 0; i < S; ++i) yp[i] = relu_bits(static_cast<T>(batch_norm_value(xp[i], m, scale, b) + rp[i]));
    }
  });
}

}  // namespace minidl::kernels::cpu
