// kernels/cpu/dropout.h — the dropout mask from the counter-based Philox generator:
//   mask[i] = philox_uniform<T>(seed, stream, i) >= p ? 1 / (1 - p) : 0   (compared in double)
// Element i depends only on (seed, stream, i), so the mask is the same for any thread count and
// on any device whose kernel follows this rule. Tested through tensor/ops_loss.cpp by
// tests/tensor/test_ops_loss.cpp (element-by-element against philox_uniform, keep fraction).
#pragma once
#include <cstdint>

#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/philox.h"

namespace minidl::kernels::cpu {

// out (n) receives 0 or 1 / (1 - p); requires 0 <= p < 1.
template <class T> void dropout_mask(T* out, int64_t n, double p, uint64_t seed, uint64_t stream) {
  const T keep = static_cast<T>(1.0 / (1.0 - p));
  parallel_for(n, 8192, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const double u = static_cast<double>(philox_uniform<T>(seed, stream, static_cast<uint64_t>(i)));
      out[i] = u >= p ? keep : T(0);
    }
  });
}

}  // namespace minidl::kernels::cpu
