// kernels/strided.h — the dims of an element-wise loop over N strided operands sharing one shape,
// simplified once for the CPU loops (kernels/cpu/elementwise.h, StridedLoop) and the CUDA ones
// (kernels/cuda_ops.h, StridedIter, built by tensor/cuda_dispatch.cpp): size-1 dims are dropped and
// neighbouring dims that are contiguous for every operand (stride[d-1] == stride[d] * shape[d])
// are merged, so same-shape contiguous operands become one flat dim. Host code only.
#pragma once
#include <cstdint>
#include <vector>

namespace minidl::kernels {

// full_shape (outermost first) and n operands' strides (full_strides[k], in elements) ->
// shape and strides[k] (k < n), coalesced; empty when full_shape has no dim of size > 1.
// `Strides` is any indexable collection of n std::vector<int64_t>, cleared by the caller.
template <class Strides>
void coalesce_dims(const std::vector<int64_t>& full_shape, int n, const std::vector<int64_t>* const* full_strides,
                   std::vector<int64_t>& shape, Strides& strides) {
  for (size_t d = 0; d < full_shape.size(); ++d) {
    if (full_shape[d] == 1) continue;
    const size_t nd = shape.size();
    bool merge = nd > 0;
    for (int k = 0; k < n && merge; ++k) merge = strides[k][nd - 1] == (*full_strides[k])[d] * full_shape[d];
    if (merge) {
      shape.back() *= full_shape[d];
      for (int k = 0; k < n; ++k) strides[k].back() = (*full_strides[k])[d];
    } else {
      shape.push_back(full_shape[d]);
      for (int k = 0; k < n; ++k) strides[k].push_back((*full_strides[k])[d]);
    }
  }
}

}  // namespace minidl::kernels
