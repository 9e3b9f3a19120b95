// kernels/cpu/reduce.h — deterministic reductions on the CPU (OpenMP).
//
// Two layouts cover every reduction once the op layer has arranged the data:
//   rows    (rows, len) row-major, reduce each row       -> out[row]
//   columns (R, C)      row-major, reduce each column    -> out[c]   (e.g. bias gradients)
// Determinism: work is cut into fixed chunks (kReduceChunk elements of a row, or
// kColumnChunk rows of a column) whose boundaries never depend on the thread count; each chunk
// is reduced sequentially into a partial, and partials are combined in chunk order. So the result
// is bit-identical for any number of threads. Float sums accumulate in double. Beside them,
// sum_blocks_in_order adds rows of partial sums element by element in row order (the
// convolutions' weight gradients, summed over fixed blocks of images).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "minidl/kernels/cpu/parallel.h"

namespace minidl::kernels::cpu {

inline constexpr int64_t kReduceChunk = 4096;  // elements of a row per partial
inline constexpr int64_t kColumnChunk = 256;  // rows per partial in column reductions

// out[i] = partial[0][i] + partial[1][i] + ... + partial[blocks - 1][i], added in block order
// (partial: blocks rows of n; the fixed blocks of images a weight gradient is summed in). Row by
// row over runs of i, so the adds run along memory in vectors, not down a column of 16 rows.
// out may be partial itself (its first row): each out[i] is written after partial[i] is read.
template <class T> void sum_blocks_in_order(const T* partial, int64_t blocks, int64_t n, T* out) {
  parallel_for(n, 4096, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) out[i] = T(0) + partial[i];
    for (int64_t k = 1; k < blocks; ++k) {
      const T* row = partial + k * n;
      for (int64_t i = i0; i < i1; ++i) out[i] += row[i];
    }
  });
}

// Sum of f(p[i]) for i in [0, n), accumulated in A with 8 fixed lanes (vectorisable, and
// always the same order for the same n).
template <class A, class T, class F> A lane_sum(const T* p, int64_t n, F f) {
  A lane[8] = {A(0), A(0), A(0), A(0), A(0), A(0), A(0), A(0)};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) lane[j] += f(p[i + j]);
  A tail = A(0);
  for (; i < n; ++i) tail += f(p[i]);
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7])) + tail;
}

// For each row r of (rows, len): out(r, fold(combine, chunk(r, b0, e0), chunk(r, b1, e1), ...))
// over the fixed chunks [b, e) of the row, folded left to right. len must be > 0.
template <class Acc, class Chunk, class Combine, class Out>
void reduce_rows(int64_t rows, int64_t len, Chunk&& chunk, Combine&& combine, Out&& out) {
  if (rows <= 0 || len <= 0) return;
  const int64_t nch = (len + kReduceChunk - 1) / kReduceChunk;
  const int64_t chunk_len = std::min(len, kReduceChunk);
  const int64_t grain = std::max<int64_t>(1, 32768 / chunk_len);  // tasks per parallel piece
  if (nch == 1) {
    parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) out(r, chunk(r, int64_t(0), len));
    });
    return;
  }
  std::vector<Acc> part(static_cast<size_t>(rows * nch));
  parallel_for(rows * nch, grain, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r = t / nch, b = (t % nch) * kReduceChunk;
      part[t] = chunk(r, b, std::min(len, b + kReduceChunk));
    }
  });
  parallel_for(rows, std::max<int64_t>(1, 4096 / nch), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      Acc a = part[r * nch];
      for (int64_t c = 1; c < nch; ++c) a = combine(a, part[r * nch + c]);
      out(r, a);
    }
  });
}

// Column sums of f(x[r, c], c) over a row-major (R, C) matrix with row stride ld, in A:
// out[c] = sum_r f(x[r, c], c), rows taken in fixed chunks of kColumnChunk, chunk partials added
// in order. f receives the column so callers can subtract a per-column mean (variance).
template <class A, class T, class F> void column_sums(const T* x, int64_t R, int64_t C, int64_t ld, A* out, F f) {
  if (C <= 0) return;
  if (R <= 0) {
    std::fill(out, out + C, A(0));
    return;
  }
  const int64_t nch = (R + kColumnChunk - 1) / kColumnChunk;
  constexpr int64_t kColBlock = 1024;  // columns per task
  const int64_t ncb = (C + kColBlock - 1) / kColBlock;
  std::vector<A> part(static_cast<size_t>(nch * C));
  parallel_for(nch * ncb, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t ch = t / ncb, cb = t % ncb;
      const int64_t r0 = ch * kColumnChunk, r1 = std::min(R, r0 + kColumnChunk);
      const int64_t c0 = cb * kColBlock, c1 = std::min(C, c0 + kColBlock);
      A* p = part.data() + ch * C;
      for (int64_t c = c0; c < c1; ++c) p[c] = A(0);
      for (int64_t r = r0; r < r1; ++r) {
        const T* row = x + r * ld;
        for (int64_t c = c0; c < c1; ++c) p[c] += f(row[c], c);
      }
    }
  });
  parallel_for(C, 4096, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      A a = part[c];
      for (int64_t ch = 1; ch < nch; ++ch) a += part[ch * C + c];
      out[c] = a;
    }
  });
}

}  // namespace minidl::kernels::cpu
