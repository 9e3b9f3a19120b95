// kernels/cpu/index.h — gather / scatter-add of slices along one axis of a contiguous
// (outer, n, inner) array, for index_select and its backward index_add (CPU, OpenMP).
// Indices are checked by the caller. index_add never lets two threads touch the same output
// element and adds duplicates in index order, so it is deterministic.
#pragma once
#include <algorithm>
#include <cstdint>

#include "minidl/kernels/cpu/parallel.h"

namespace minidl::kernels::cpu {

// out (outer, k, inner)[o, j, :] = x (outer, n, inner)[o, index[j], :]
template <class T>
void index_select_kernel(const T* x, const int64_t* index, T* out, int64_t outer, int64_t n, int64_t k, int64_t inner) {
  parallel_for(outer * k, std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o = t / k, j = t % k;
      const T* src = x + (o * n + index[j]) * inner;
      std::copy(src, src + inner, out + t * inner);
    }
  });
}

// out (outer, n, inner)[o, index[j], :] += src (outer, k, inner)[o, j, :], j in increasing order.
// Tasks are (o, block of inner columns), so duplicates in `index` never race.
template <class T>
void index_add_kernel(const T* src, const int64_t* index, T* out, int64_t outer, int64_t n, int64_t k, int64_t inner) {
  constexpr int64_t kBlock = 1024;
  const int64_t blocks = (inner + kBlock - 1) / kBlock;
  parallel_for(outer * blocks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o = t / blocks, c0 = (t % blocks) * kBlock, c1 = std::min(inner, c0 + kBlock);
      for (int64_t j = 0; j < k; ++j) {
        const T* s = src + (o * k + j) * inner;
        T* d = out + (o * n + index[j]) * inner;
        for (int64_t c = c0; c < c1; ++c) d[c] += s[c];
      }
    }
  });
}

}  // namespace minidl::kernels::cpu
