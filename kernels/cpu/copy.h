// kernels/cpu/copy.h — strided copy with dtype conversion: dst[i] = convert(src[i]) over a shape,
// convert being static_cast<D> unless given (the 16-bit floats pass their kernels/cpu/half.h
// conversions). The innermost dimension is a tight loop; outer rows run in parallel (OpenMP).
#pragma once
#include <cstdint>
#include <vector>

#include "minidl/kernels/cpu/parallel.h"

namespace minidl::kernels::cpu {

template <class S, class D> struct StaticCast {
  D operator()(S v) const { return static_cast<D>(v); }
};

template <class S, class D, class Convert = StaticCast<S, D>>
void strided_copy(const S* src, const std::vector<int64_t>& src_strides, D* dst,
                  const std::vector<int64_t>& dst_strides, const std::vector<int64_t>& shape, Convert convert = {}) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (n == 0) return;
  if (nd == 0) {
    dst[0] = convert(src[0]);
    return;
  }
  const int64_t inner = shape[nd - 1];
  const int64_t ss = src_strides[nd - 1], ds = dst_strides[nd - 1];
  const int64_t rows = n / inner;
  parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t so = 0, dof = 0, rem = r;
      for (int64_t d = nd - 2; d >= 0; --d) {
        const int64_t i = rem % shape[d];
        rem /= shape[d];
        so += i * src_strides[d];
        dof += i * dst_strides[d];
      }
      const S* s = src + so;
      D* o = dst + dof;
      if (ss == 1 && ds == 1) {
        for (int64_t j = 0; j < inner; ++j) o[j] = convert(s[j]);
      } else {
        for (int64_t j = 0; j < inner; ++j) o[j * ds] = convert(s[j * ss]);
      }
    }
  });
}

}  // namespace minidl::kernels::cpu
