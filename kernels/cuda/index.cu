// kernels/cuda/index.cu — index_select (embedding lookup) and index_add (its backward, the
// embedding gradient). x / out are (outer, n, inner), index (k).
// index_add adds WITHOUT atomics: the host groups the k source rows by destination (a CSR list
// in j order, built from the indices the caller already copied to the host to range-check them),
// and one thread per output element adds its sources in that order starting from 0 — exactly the
// CPU loop's order, so the result is bit-identical and reproducible.
// Tested by tests/kernels/test_cuda_ops.cpp (index_select, index_add with repeated indices).
#include <vector>

#include "minidl/kernels/cuda/common.cuh"
#include "minidl/kernels/cuda_api.h"

namespace minidl::kernels::cuda {

namespace {

template <class T>
__global__ void index_select_kernel(const T* x, const int64_t* index, T* out, int64_t n, int64_t k, int64_t inner,
                                    int64_t total) {
  MINIDL_GRID_STRIDE(e, total) {
    const int64_t i = e % inner, j = (e / inner) % k, o = e / (inner * k);
    out[e] = x[(o * n + index[j]) * inner + i];
  }
}

// out[o, r, i] = sum over the sources j of row r (in order) of src[o, j, i]
template <class T>
__global__ void index_add_kernel(const T* src, const int64_t* starts, const int64_t* sources, T* out, int64_t n,
                                 int64_t k, int64_t inner, int64_t total) {
  MINIDL_GRID_STRIDE(e, total) {
    const int64_t i = e % inner, r = (e / inner) % n, o = e / (inner * n);
    T acc = T(0);
    for (int64_t q = starts[r]; q < starts[r + 1]; ++q) acc += src[(o * k + sources[q]) * inner + i];
    out[e] = acc;
  }
}

}  // namespace

void index_select(ElemType t, const void* x, const int64_t* index, void* out, int64_t outer, int64_t n, int64_t k,
                  int64_t inner) {
  const int64_t total = outer * k * inner;
  if (total == 0) return;
  switch_type<false>(t, "index_select", [&](auto tag) {
    using T = decltype(tag);
    index_select_kernel<T><<<blocks_for(total), kThreads, 0, current_compute_stream()>>>(
        static_cast<const T*>(x), index, static_cast<T*>(out), n, k, inner, total);
  });
  check_launch("index_select");
}

void index_add(ElemType t, const void* src, const int64_t* index_host, void* out, int64_t outer, int64_t n, int64_t k,
               int64_t inner) {
  const int64_t total = outer * n * inner;
  if (total == 0) return;
  // CSR: starts (n + 1), sources (k) = the j of each destination row, in increasing j
  std::vector<int64_t> csr(static_cast<size_t>(n + 1 + k), 0);
  int64_t* starts = csr.data();
  int64_t* sources = csr.data() + n + 1;
  for (int64_t j = 0; j < k; ++j) ++starts[index_host[j] + 1];
  for (int64_t r = 0; r < n; ++r) starts[r + 1] += starts[r];
  std::vector<int64_t> fill(starts, starts + n);
  for (int64_t j = 0; j < k; ++j) sources[fill[index_host[j]]++] = j;
  const int device = current_device();
  const size_t bytes = csr.size() * sizeof(int64_t);
  int64_t* d = static_cast<int64_t*>(device_malloc(bytes, device));
  try {
    memcpy(d, csr.data(), bytes, 0, device);
    switch_type<false>(t, "index_add", [&](auto tag) {
      using T = decltype(tag);
      index_add_kernel<T><<<blocks_for(total), kThreads, 0, current_compute_stream()>>>(
          static_cast<const T*>(src), d, d + n + 1, static_cast<T*>(out), n, k, inner, total);
    });
    check_launch("index_add");
  } catch (...) {
    device_free(d, device);
    throw;
  }
  device_free(d, device);  // reused only by later work on the same stream
}

}  // namespace minidl::kernels::cuda
