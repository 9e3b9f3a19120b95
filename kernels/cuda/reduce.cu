// kernels/cuda/reduce.cu — sum / mean / var / max over the rows of a contiguous (rows, len) matrix
// (tensor/ops_reduce.cpp first permutes the reduced dims last, as for the CPU loops). One block
// per row: each thread accumulates a fixed strided subset in double (int64 for integers), then a
// CUB block reduction with a fixed shape combines them — the same bits on every run.
// var is two-pass (mean, then squared deviations) like the CPU. max keeps the FIRST maximum and
// lets NaN win, like the CPU. Tested by tests/kernels/test_cuda_ops.cpp against the CPU ops.
#include <type_traits>

#include "minidl/kernels/cuda/common.cuh"

namespace minidl::kernels::cuda {

namespace {

template <class T> using AccOf = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

template <class T> __global__ void sum_rows_kernel(const T* x, T* out, int64_t len, double divisor) {
  using A = AccOf<T>;
  const T* row = x + blockIdx.x * len;
  A a = A(0);
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x) a += A(row[i]);
  a = block_all_reduce(a, SumOp{});
  if (threadIdx.x == 0) {
    if constexpr (std::is_floating_point_v<T>)
      out[blockIdx.x] = static_cast<T>(a / divisor);
    else
      out[blockIdx.x] = static_cast<T>(a);
  }
}

template <class T> __global__ void var_rows_kernel(const T* x, T* out, int64_t len, int64_t correction) {
  const T* row = x + blockIdx.x * len;
  double s = 0;
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x) s += double(row[i]);
  const double m = block_all_reduce(s, SumOp{}) / double(len);
  double ss = 0;
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
    const double d = double(row[i]) - m;
    ss += d * d;
  }
  ss = block_all_reduce(ss, SumOp{});
  if (threadIdx.x == 0) out[blockIdx.x] = static_cast<T>(ss / double(len - correction));
}

template <class T> struct ArgMax {
  T value;
  int64_t index;  // -1: no element seen (identity)
};
template <class T> __device__ __forceinline__ bool is_nan(T v) { return v != v; }
// b beats a: strictly greater, or the first NaN; ties go to the lower index.
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

template <class T> __global__ void max_rows_kernel(const T* x, T* values, int64_t* indices, int64_t len) {
  const T* row = x + blockIdx.x * len;
  ArgMax<T> best{T(0), -1};
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x) best = ArgMaxOp{}(best, ArgMax<T>{row[i], i});
  best = block_all_reduce(best, ArgMaxOp{});
  if (threadIdx.x == 0) {
    values[blockIdx.x] = best.value;
    indices[blockIdx.x] = best.index;
  }
}

void check_rows(int64_t rows, const char* op) {
  if (rows > 2147483647LL) throw std::invalid_argument(std::string(op) + ": too many rows for one CUDA launch");
}

}  // namespace

void sum_rows(ElemType t, const void* x, void* out, int64_t rows, int64_t len, double divisor) {
  if (rows == 0) return;
  check_rows(rows, "sum");
  switch_type<false>(t, "sum", [&](auto tag) {
    using T = decltype(tag);
    sum_rows_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, current_compute_stream()>>>(
        static_cast<const T*>(x), static_cast<T*>(out), len, divisor);
  });
  check_launch("sum");
}

void var_rows(ElemType t, const void* x, void* out, int64_t rows, int64_t len, int64_t correction) {
  if (rows == 0) return;
  check_rows(rows, "var");
  switch_type<true>(t, "var", [&](auto tag) {
    using T = decltype(tag);
    var_rows_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, current_compute_stream()>>>(
        static_cast<const T*>(x), static_cast<T*>(out), len, correction);
  });
  check_launch("var");
}

void max_rows(ElemType t, const void* x, void* values, int64_t* indices, int64_t rows, int64_t len) {
  if (rows == 0) return;
  check_rows(rows, "max");
  switch_type<false>(t, "max", [&](auto tag) {
    using T = decltype(tag);
    max_rows_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, current_compute_stream()>>>(
        static_cast<const T*>(x), static_cast<T*>(values), indices, len);
  });
  check_launch("max");
}

}  // namespace minidl::kernels::cuda
