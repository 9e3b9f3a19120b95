// kernels/cpu/copy.h — strided copy with dtype conversion: dst[i] = convert(src[i]) over a shape,
// convert being static_cast<D> unless given (the 16-bit floats pass their kernels/cpu/half.h
// conversions). Dimensions that both sides lay out as one are merged first (coalesce_copy_layout);
// the innermost dimension is then a tight loop, and outer rows run in parallel (OpenMP, copy_rows):
// strided_copy_reference. strided_copy runs it too, except for a transposing copy (dst contiguous
// along its innermost dimension, src along another one: x.transpose(1, 2).contiguous()), which
// goes in 16 x 16 tiles (transposing_copy).
#pragma once
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/cpu/vec_math.h"

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

// Each row of the innermost dimension of a coalesced layout as one plain loop, rows in parallel.
template <class S, class D, class Convert> void copy_rows(const S* src, D* dst, const CopyLayout& l, Convert convert) {
  const int64_t nd = static_cast<int64_t>(l.shape.size());
  int64_t n = 1;
  for (int64_t d : l.shape) n *= d;
  const int64_t inner = l.shape[nd - 1];
  const int64_t ss = l.src_strides[nd - 1], ds = l.dst_strides[nd - 1];
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
        const int64_t i = rem % l.shape[d];
        rem /= l.shape[d];
        so += i * l.src_strides[d];
        dof += i * l.dst_strides[d];
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

// dst = convert(src) over the shape, row by row whatever the layout: the copy a student writes.
template <class S, class D, class Convert = StaticCast<S, D>>
void strided_copy_reference(const S* src, const std::vector<int64_t>& src_strides, D* dst,
                            const std::vector<int64_t>& dst_strides, const std::vector<int64_t>& shape,
                            Convert convert = {}) {
  for (int64_t d : shape)
    if (d == 0) return;
  copy_rows(src, dst, coalesce_copy_layout(shape, src_strides, dst_strides), convert);
}

// One tile of a transposing copy: t[kk * dst_stride + jj] = convert(s[jj * src_stride + kk]) for
// kk < kb, jj < jb (both <= 16). Floats: 16 runs of s loaded (masked to kb lanes), transposed in
// registers, 16 runs of t stored (masked to jb lanes); other types element by element.
template <class S, class D, class Convert>
void copy_transposed_tile(const S* s, int64_t src_stride, D* t, int64_t dst_stride, int64_t kb, int64_t jb,
                          Convert convert) {
  if constexpr (std::is_same_v<S, float> && std::is_same_v<D, float> &&
                std::is_same_v<Convert, StaticCast<float, float>>) {
    FloatLanes m[16];
    for (int64_t jj = 0; jj < 16; ++jj) m[jj] = jj < jb ? load_first_lanes(s + jj * src_stride, kb) : FloatLanes{};
    transpose16(m);  // m[jj][kk] -> m[kk][jj]
    for (int64_t kk = 0; kk < kb; ++kk) store_first_lanes(t + kk * dst_stride, m[kk], jb);
  } else {
    for (int64_t kk = 0; kk < kb; ++kk)
      for (int64_t jj = 0; jj < jb; ++jj) t[kk * dst_stride + jj] = convert(s[jj * src_stride + kk]);
  }
}

// The dimension k < last along which src is contiguous while dst is contiguous along the last one
// and src is not: a transposing copy. -1 when there is none.
inline int64_t transposed_dim(const CopyLayout& l) {
  const int64_t last = static_cast<int64_t>(l.shape.size()) - 1;
  if (l.dst_strides[last] != 1 || l.src_strides[last] == 1 || l.src_strides[last] == 0) return -1;
  for (int64_t k = 0; k < last; ++k)
    if (l.src_strides[k] == 1) return k;
  return -1;
}

// A transposing copy over a coalesced layout whose dimension k is src's contiguous one: read
// element by element, every src element of a dst row would sit on its own cache line. Work items:
// 16 indices of k (a band of dst rows) for one index of the other outer dimensions, walked in
// 16 x 16 tiles along the last dimension.
template <class S, class D, class Convert>
void transposing_copy(const S* src, D* dst, const CopyLayout& l, int64_t k, Convert convert) {
  constexpr int64_t kTile = 16;
  const int64_t last = static_cast<int64_t>(l.shape.size()) - 1;
  const int64_t K = l.shape[k], J = l.shape[last];
  const int64_t src_stride = l.src_strides[last], dst_stride = l.dst_strides[k];
  int64_t outer = 1;
  for (int64_t d = 0; d < last; ++d)
    if (d != k) outer *= l.shape[d];
  const int64_t bands = (K + kTile - 1) / kTile;
  parallel_for(outer * bands, std::max<int64_t>(1, 16384 / (kTile * J)), [&](int64_t i0, int64_t i1) {
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t k0 = item % bands * kTile, kb = std::min(kTile, K - k0);
      int64_t so = k0, dof = k0 * dst_stride, rem = item / bands;
      for (int64_t d = last - 1; d >= 0; --d) {
        if (d == k) continue;
        const int64_t i = rem % l.shape[d];
        rem /= l.shape[d];
        so += i * l.src_strides[d];
        dof += i * l.dst_strides[d];
      }
      for (int64_t j0 = 0; j0 < J; j0 += kTile)
        copy_transposed_tile(src + so + j0 * src_stride, src_stride, dst + dof + j0, dst_stride, kb,
                             std::min(kTile, J - j0), convert);
    }
  });
}

// dst = convert(src) over the shape: transposing_copy where it applies, else the reference's rows
// (copy_rows), the layout coalesced once for both.
template <class S, class D, class Convert = StaticCast<S, D>>
void strided_copy(const S* src, const std::vector<int64_t>& src_strides, D* dst,
                  const std::vector<int64_t>& dst_strides, const std::vector<int64_t>& shape, Convert convert = {}) {
  for (int64_t d : shape)
    if (d == 0) return;
  const CopyLayout layout = coalesce_copy_layout(shape, src_strides, dst_strides);
  if (const int64_t k = transposed_dim(layout); k >= 0) return transposing_copy(src, dst, layout, k, convert);
  copy_rows(src, dst, layout, convert);
}

}  // namespace minidl::kernels::cpu
