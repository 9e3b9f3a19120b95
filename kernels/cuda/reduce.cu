// kernels/cuda/reduce.cu — sum / mean / var / max over the rows of a contiguous (rows, len) matrix
// (tensor/ops_reduce.cpp first permutes the reduced dims last, as for the CPU loops), through
// reduce_rows (common.cuh): one block per row, or, for few long rows (a full reduction is one
// row), each row cut into fixed chunks of one block each and their partial results combined in
// chunk order by a second pass. Threads accumulate in double (int64 for integers); the block
// reductions have a fixed shape — the same bits on every run. var is two-pass (mean, then squared
// deviations) like the CPU. max keeps the FIRST maximum and lets NaN win, like the CPU. Indices
// are int64 throughout (rows past 2^31 elements). Tested by tests/kernels/test_cuda_ops.cpp
// against the CPU ops.
#include <type_traits>

#include "minidl/kernels/cuda/common.cuh"

namespace minidl::kernels::cuda {

namespace {

template <class T> using AccOf = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

// x (rows, len): element i of row r.
template <class T> struct Element {
  const T* x;
  int64_t len;
  __device__ AccOf<T> operator()(int64_t r, int64_t i) const { return AccOf<T>(x[r * len + i]); }
};
template <class T> struct SquaredDeviation {
  const T* x;
  int64_t len;
  const double* mean;  // (rows)
  __device__ double operator()(int64_t r, int64_t i) const {
    const double d = double(x[r * len + i]) - mean[r];
    return d * d;
  }
};

// out[r] = sum / divisor for floating types (sum for integers); mean[r] = sum / len for var.
template <class T> struct StoreSum {
  T* out;
  double divisor;
  __device__ void operator()(int64_t r, AccOf<T> a) const {
    if constexpr (std::is_floating_point_v<T>)
      out[r] = static_cast<T>(a / divisor);
    else
      out[r] = static_cast<T>(a);
  }
};
struct StoreMean {
  double* mean;
  int64_t len;
  __device__ void operator()(int64_t r, double a) const { mean[r] = a / double(len); }
};
template <class T> struct StoreVar {
  T* out;
  int64_t dof;  // len - correction
  __device__ void operator()(int64_t r, double ss) const { out[r] = static_cast<T>(ss / double(dof)); }
};

template <class T> struct ArgMax {
  T value;
  int64_t index;  // -1: no element seen (identity)
};
template <class T> __device__ __forceinline__ bool is_nan(T v) { return v != v; }
// b beats a: strictly greater, or the first NaN; ties go to the lower index. Associative, so
// combining chunks gives the same answer as one pass over the row.
struct ArgMaxOp {
  template <class T> __device__ __forceinline__ ArgMax<T> operator()(const ArgMax<T>& a, const ArgMax<T>& b) const {
    if (a.index < 0) return b;
    if (b.index < 0) return a;
    const bool b_beats = b.value > a.value || (is_nan(b.value) && !is_nan(a.value));
    const bool a_beats = a.value > b.value || (is_nan(a.value) && !is_nan(b.value));
    if (b_beats) return b;
    if (a_beats) return a;
    return b.index < a.index ? b : a;
  }
};
template <class T> struct ArgMaxElement {
  const T* x;
  int64_t len;
  __device__ ArgMax<T> operator()(int64_t r, int64_t i) const { return {x[r * len + i], i}; }
};
template <class T> struct StoreArgMax {
  T* values;
  int64_t* indices;
  __device__ void operator()(int64_t r, const ArgMax<T>& a) const {
    values[r] = a.value;
    indices[r] = a.index;
  }
};

}  // namespace

void sum_rows(ElemType t, const void* x, void* out, int64_t rows, int64_t len, double divisor) {
  if (rows == 0) return;
  switch_type<false>(t, "sum", [&](auto tag) {
    using T = decltype(tag);
    reduce_rows(rows, len, Element<T>{static_cast<const T*>(x), len}, AccOf<T>(0), SumOp{},
                StoreSum<T>{static_cast<T*>(out), divisor}, "sum");
  });
}

void var_rows(ElemType t, const void* x, void* out, int64_t rows, int64_t len, int64_t correction) {
  if (rows == 0) return;
  switch_type<true>(t, "var", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x);
    const int device = current_device();
    double* mean = static_cast<double*>(device_malloc(sizeof(double) * size_t(rows), device));  // (rows)
    reduce_rows(rows, len, Element<T>{xp, len}, 0.0, SumOp{}, StoreMean{mean, len}, "var");
    reduce_rows(rows, len, SquaredDeviation<T>{xp, len, mean}, 0.0, SumOp{},
                StoreVar<T>{static_cast<T*>(out), len - correction}, "var");
    device_free(mean, device);
  });
}

void max_rows(ElemType t, const void* x, void* values, int64_t* indices, int64_t rows, int64_t len) {
  if (rows == 0) return;
  switch_type<false>(t, "max", [&](auto tag) {
    using T = decltype(tag);
    reduce_rows(rows, len, ArgMaxElement<T>{static_cast<const T*>(x), len}, ArgMax<T>{T(0), -1}, ArgMaxOp{},
                StoreArgMax<T>{static_cast<T*>(values), indices}, "max");
  });
}

}  // namespace minidl::kernels::cuda
