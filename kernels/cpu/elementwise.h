// kernels/cpu/elementwise.h — element-wise loops over N strided operands (CPU, OpenMP).
//
// An element-wise op sees each operand as (pointer, strides) over one common shape; a broadcast
// operand simply has stride 0 along the broadcast dims (that is what Tensor::expand gives).
// StridedLoop first "coalesces" the shape (kernels/strided.h, as the CUDA loops do): size-1 dims
// are dropped and neighbouring dims that are contiguous for every operand are merged, so
// same-shape contiguous inputs become one flat dim (the fast path: a tight stride-1 loop the
// compiler vectorises). The loop then runs over (row, chunk-of-row) tasks in parallel; each task
// calls fn(offsets, n, inner_strides) and the kernels below pick a stride-1 inner loop when they
// can. The math comes from kernels/functors.h.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/strided.h"

namespace minidl::kernels::cpu {

// Elements per parallel task (a chunk of one row of the coalesced loop).
inline constexpr int64_t kElementwiseChunk = 16384;

template <int N> struct StridedLoop {
  std::vector<int64_t> shape;  // coalesced, at least 1 dim
  std::array<std::vector<int64_t>, N> strides;  // per operand, in elements
  int64_t numel = 0;

  StridedLoop(const std::vector<int64_t>& full_shape, const std::array<const std::vector<int64_t>*, N>& full_strides) {
    numel = 1;
    for (int64_t s : full_shape) numel *= s;
    coalesce_dims(full_shape, N, full_strides.data(), shape, strides);  // kernels/strided.h
    if (shape.empty()) {  // 0-d or all-ones shape: a single element
      shape.push_back(1);
      for (int k = 0; k < N; ++k) strides[k].push_back(0);
    }
  }

  // fn(const int64_t* offsets /*N*/, int64_t n, const int64_t* inner_strides /*N*/) for every
  // run of n consecutive elements of the innermost dim; runs are processed in parallel.
  template <class F> void for_each_run(F&& fn) const {
    if (numel == 0) return;
    const int64_t nd = static_cast<int64_t>(shape.size());
    const int64_t inner = shape[nd - 1];
    const int64_t rows = numel / inner;
    const int64_t per_row = (inner + kElementwiseChunk - 1) / kElementwiseChunk;  // chunks per row
    const int64_t chunk = std::min(inner, kElementwiseChunk);
    std::array<int64_t, N> inner_st;
    for (int k = 0; k < N; ++k) inner_st[k] = strides[k][nd - 1];
    parallel_for(rows * per_row, std::max<int64_t>(1, kElementwiseChunk / chunk), [&](int64_t t0, int64_t t1) {
      // odometer over the outer dims, started at the row of task t0
      std::vector<int64_t> idx(nd, 0);
      std::array<int64_t, N> row_off{};
      int64_t row = t0 / per_row;
      for (int64_t d = nd - 2, rem = row; d >= 0; --d) {
        idx[d] = rem % shape[d];
        rem /= shape[d];
        for (int k = 0; k < N; ++k) row_off[k] += idx[d] * strides[k][d];
      }
      std::array<int64_t, N> off;
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t r = t / per_row, c = t % per_row;
        if (r != row) {  // next row: advance the odometer by one
          row = r;
          for (int64_t d = nd - 2; d >= 0; --d) {
            if (++idx[d] < shape[d]) {
              for (int k = 0; k < N; ++k) row_off[k] += strides[k][d];
              break;
            }
            for (int k = 0; k < N; ++k) row_off[k] -= strides[k][d] * (shape[d] - 1);
            idx[d] = 0;
          }
        }
        const int64_t j0 = c * kElementwiseChunk;
        for (int k = 0; k < N; ++k) off[k] = row_off[k] + j0 * inner_st[k];
        fn(off.data(), std::min(kElementwiseChunk, inner - j0), inner_st.data());
      }
    });
  }
};

// out = op(x); operands: 0 = out, 1 = x.
template <class TO, class TI, class Op> void unary_kernel(const StridedLoop<2>& loop, TO* out, const TI* x, Op op) {
  loop.for_each_run([&](const int64_t* off, int64_t n, const int64_t* st) {
    TO* o = out + off[0];
    const TI* a = x + off[1];
    if (st[0] == 1 && st[1] == 1) {
      for (int64_t j = 0; j < n; ++j) o[j] = op(a[j]);
    } else {
      for (int64_t j = 0; j < n; ++j) o[j * st[0]] = op(a[j * st[1]]);
    }
  });
}

// out = op(a, b); operands: 0 = out, 1 = a, 2 = b. `out` may alias `a` (in-place ops).
template <class T, class Op> void binary_kernel(const StridedLoop<3>& loop, T* out, const T* a, const T* b, Op op) {
  loop.for_each_run([&](const int64_t* off, int64_t n, const int64_t* st) {
    T* o = out + off[0];
    const T* pa = a + off[1];
    const T* pb = b + off[2];
    if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
      for (int64_t j = 0; j < n; ++j) o[j] = op(pa[j], pb[j]);
    } else if (st[0] == 1 && st[1] == 1 && st[2] == 0) {  // row + scalar broadcast
      const T vb = *pb;
      for (int64_t j = 0; j < n; ++j) o[j] = op(pa[j], vb);
    } else if (st[0] == 1 && st[1] == 0 && st[2] == 1) {
      const T va = *pa;
      for (int64_t j = 0; j < n; ++j) o[j] = op(va, pb[j]);
    } else {
      for (int64_t j = 0; j < n; ++j) o[j * st[0]] = op(pa[j * st[1]], pb[j * st[2]]);
    }
  });
}

// out = op(a, b, c); operands: 0 = out, 1 = a, 2 = b, 3 = c. `out` may alias `a`.
template <class T, class Op>
void ternary_kernel(const StridedLoop<4>& loop, T* out, const T* a, const T* b, const T* c, Op op) {
  loop.for_each_run([&](const int64_t* off, int64_t n, const int64_t* st) {
    T* o = out + off[0];
    const T* pa = a + off[1];
    const T* pb = b + off[2];
    const T* pc = c + off[3];
    if (st[0] == 1 && st[1] == 1 && st[2] == 1 && st[3] == 1) {
      for (int64_t j = 0; j < n; ++j) o[j] = op(pa[j], pb[j], pc[j]);
    } else {
      for (int64_t j = 0; j < n; ++j) o[j * st[0]] = op(pa[j * st[1]], pb[j * st[2]], pc[j * st[3]]);
    }
  });
}

}  // namespace minidl::kernels::cpu
