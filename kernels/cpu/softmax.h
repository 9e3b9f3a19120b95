// kernels/cpu/softmax.h — softmax / log_softmax and their backward along the middle axis of a
// contiguous (outer, len, inner) array (the softmax dim is `len`; inner = 1 when it is the last
// dim). Numerically stable: the row max is subtracted before exponentiating. Each row is done by
// one thread, its sums in double in an order fixed by the row's length alone (contiguous float
// rows: vec_math.h's 16-lane span reductions; float64 and strided rows, the reference branch of
// each `if constexpr (kFastRows)`: one sequential loop), so results do not depend on the thread
// count. The fast float rows differ from the reference by the vectorised exp_nonpositive in place
// of std::exp and the lane-parallel sums (no loop-carried dependence between additions).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/cpu/vec_math.h"

namespace minidl::kernels::cpu {

// Calls fn(base, stride) for each of the outer * inner rows of length len. When inner == 1 the
// stride is passed as a compile-time 1 so the row loops vectorise.
template <class F> void for_each_softmax_row(int64_t outer, int64_t len, int64_t inner, F&& fn) {
  parallel_for(outer * inner, std::max<int64_t>(1, 8192 / std::max<int64_t>(len, 1)), [&](int64_t r0, int64_t r1) {
    if (inner == 1) {
      for (int64_t r = r0; r < r1; ++r) fn(r * len, std::integral_constant<int64_t, 1>{});
    } else {
      for (int64_t r = r0; r < r1; ++r) fn((r / inner) * len * inner + r % inner, inner);
    }
  });
}

// True when a row is contiguous float: those rows use the vectorised exp_nonpositive (its
// argument x - max is <= 0; log_softmax's y is <= 0) and vectorised sums (kernels/cpu/vec_math.h);
// other rows (float64, strided) keep std::exp and sequential sums, the reference
// tests/tensor/test_cpu_fast_paths.cpp compares the fast rows with.
template <class T, class S>
inline constexpr bool kFastRows = std::is_same_v<T, float>&& std::is_same_v<S, std::integral_constant<int64_t, 1>>;

// One row of y = softmax(x) or log_softmax(x): len elements at stride s (a compile-time 1 for
// contiguous rows). In place (y == x) is allowed. Fast rows take the row max and sums from
// vec_math.h's span reductions (the max is exact in any order; a NaN anywhere makes the whole
// row NaN whatever the max picked).
template <class T, class S> void softmax_row(const T* xr, T* yr, int64_t len, S s, bool log) {
  T m = xr[0];
  if constexpr (kFastRows<T, S>) {
    m = max_span(xr, len);
  } else {
    for (int64_t i = 1; i < len; ++i) m = xr[i * s] > m ? xr[i * s] : m;
  }
  if (std::isinf(m) && m < 0) m = T(0);  // all -inf: avoid (-inf) - (-inf) = NaN
  double sum = 0;
  if constexpr (kFastRows<T, S>) {  // contiguous float rows: vectorised exp and sums
    for (int64_t i = 0; i < len; ++i) yr[i] = exp_nonpositive(xr[i] - m);
    sum = sum_span(yr, len);
    if (log) {
      const T lse = m + T(std::log(sum));
      for (int64_t i = 0; i < len; ++i) yr[i] = xr[i] - lse;
    } else {
      const T inv = T(1.0 / sum);
      for (int64_t i = 0; i < len; ++i) yr[i] *= inv;
    }
  } else if (log) {
    for (int64_t i = 0; i < len; ++i) sum += double(std::exp(xr[i * s] - m));
    const T lse = m + T(std::log(sum));
    for (int64_t i = 0; i < len; ++i) yr[i * s] = xr[i * s] - lse;
  } else {
    for (int64_t i = 0; i < len; ++i) {
      const T e = std::exp(xr[i * s] - m);
      yr[i * s] = e;
      sum += double(e);
    }
    const T inv = T(1.0 / sum);
    for (int64_t i = 0; i < len; ++i) yr[i * s] *= inv;
  }
}

// One row of the backward (in place, dr == gr, allowed):
// softmax:     dx = y * (dy - sum(dy * y))
// log_softmax: dx = dy - exp(y) * sum(dy)
template <class T, class S> void softmax_backward_row(const T* yr, const T* gr, T* dr, int64_t len, S s, bool log) {
  double dot = 0;
  if constexpr (kFastRows<T, S>) {
    if (log) {
      const T sd = T(sum_span(gr, len));
      for (int64_t i = 0; i < len; ++i) dr[i] = gr[i] - exp_nonpositive(yr[i]) * sd;
    } else {
      const T sd = T(dot_span(gr, yr, len));
      for (int64_t i = 0; i < len; ++i) dr[i] = yr[i] * (gr[i] - sd);
    }
  } else if (log) {
    for (int64_t i = 0; i < len; ++i) dot += double(gr[i * s]);
    const T sd = T(dot);
    for (int64_t i = 0; i < len; ++i) dr[i * s] = gr[i * s] - std::exp(yr[i * s]) * sd;
  } else {
    for (int64_t i = 0; i < len; ++i) dot += double(gr[i * s]) * double(yr[i * s]);
    const T sd = T(dot);
    for (int64_t i = 0; i < len; ++i) dr[i * s] = yr[i * s] * (gr[i * s] - sd);
  }
}

// y = softmax(x) or log_softmax(x) along len
template <class T> void softmax_forward(const T* x, T* y, int64_t outer, int64_t len, int64_t inner, bool log) {
  if (len == 0) return;
  for_each_softmax_row(outer, len, inner,
                       [&](int64_t base, auto s) { softmax_row(x + base, y + base, len, s, log); });
}

template <class T>
void softmax_backward(const T* y, const T* dy, T* dx, int64_t outer, int64_t len, int64_t inner, bool log) {
  if (len == 0) return;
  for_each_softmax_row(outer, len, inner,
                       [&](int64_t base, auto s) { softmax_backward_row(y + base, dy + base, dx + base, len, s, log); });
}

}  // namespace minidl::kernels::cpu
