// kernels/cpu/copy.h — strided copy with dtype conversion: dst[i] = convert(src[i]) over a shape,
// convert being static_cast<D> unless given (the 16-bit floats pass their kernels/cpu/half.h
// conversions). Dimensions that both sides lay out as one are merged first (coalesce_copy_layout);
// the innermost dimension is then a tight loop, and outer rows run in parallel (OpenMP).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "minidl/kernels/cpu/parallel.h"

namespace minidl::kernels::cpu {

template <class S, class D> struct StaticCast {
  D operator()(S v) const { return static_cast<D>(v); }
};

// The same copy over fewer dimensions: each run of adjacent dimensions that both sides lay out as
// one (stride[d] == size[d + 1] * stride[d + 1] in src and in dst) becomes one dimension, and size-1
// dimensions go. A slice of a contiguous tensor along dim 1 (cat, narrow) then copies rows of
// C * H * W elements instead of rows of W, each with its own index arithmetic.
struct CopyLayout {
  std::vector<int64_t> shape, src_strides, dst_strides;
};
inline CopyLayout coalesce_copy_layout(const std::vector<int64_t>& shape, const std::vector<int64_t>& src_strides,
                                       const std::vector<int64_t>& dst_strides) {
  CopyLayout l;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!l.shape.empty() && l.src_strides.back() == shape[d] * src_strides[d] &&
        l.dst_strides.back() == shape[d] * dst_strides[d]) {
      l.shape.back() *= shape[d];
      l.src_strides.back() = src_strides[d];
      l.dst_strides.back() = dst_strides[d];
      continue;
    }
    l.shape.push_back(shape[d]);
    l.src_strides.push_back(src_strides[d]);
    l.dst_strides.push_back(dst_strides[d]);
  }
  if (l.shape.empty()) l = {{1}, {1}, {1}};  // one element
  return l;
}

template <class S, class D, class Convert = StaticCast<S, D>>
void strided_copy(const S* src, const std::vector<int64_t>& src_strides_in, D* dst,
                  const std::vector<int64_t>& dst_strides_in, const std::vector<int64_t>& shape_in,
                  Convert convert = {}) {
  for (int64_t d : shape_in)
    if (d == 0) return;
  const CopyLayout layout = coalesce_copy_layout(shape_in, src_strides_in, dst_strides_in);
  const std::vector<int64_t>&shape = layout.shape, &src_strides = layout.src_strides, &dst_strides = layout.dst_strides;
  const int64_t nd = static_cast<int64_t>(shape.size());
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const int64_t inner = shape[nd - 1];
  const int64_t ss = src_strides[nd - 1], ds = dst_strides[nd - 1];
  const int64_t rows = n / inner;
  // Work items: pieces of at most kPiece elements of a row (a long coalesced row is split, so a
  // contiguous copy still runs on every thread), about kPiece elements per chunk of items.
  constexpr int64_t kPiece = 16384;
  const int64_t piece = std::min(inner, kPiece), pieces = (inner + piece - 1) / piece;
  parallel_for(rows * pieces, std::max<int64_t>(1, kPiece / piece), [&](int64_t i0, int64_t i1) {
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t r = item / pieces, j0 = item % pieces * piece, j1 = std::min(inner, j0 + piece);
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
        for (int64_t j = j0; j < j1; ++j) o[j] = convert(s[j]);
      } else {
        for (int64_t j = j0; j < j1; ++j) o[j * ds] = convert(s[j * ss]);
      }
    }
  });
}

}  // namespace minidl::kernels::cpu
