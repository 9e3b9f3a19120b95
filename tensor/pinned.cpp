// tensor/pinned.cpp — see tensor/pinned.h. Storage wraps cudaMallocHost memory with cudaFreeHost
// as its deleter (kernels/cuda_api.h), so the tensor is an ordinary CPU tensor to every CPU op.
#include "minidl/tensor/pinned.h"

#include <stdexcept>

#include "minidl/kernels/cuda_api.h"

namespace minidl {

Tensor empty_pinned(const Shape& shape, DType dtype) {
  const size_t nbytes = static_cast<size_t>(shape_numel(shape)) * element_size(dtype);
  void* p = kernels::cuda::pinned_malloc(nbytes);
  auto storage = std::make_shared<Storage>(p, nbytes, Device::cpu(), [](void* q) { kernels::cuda::pinned_free(q); });
  return Tensor(storage, shape, contiguous_strides(shape), 0, dtype);
}

Tensor pin_memory(const Tensor& t) {
  if (!t.defined() || !t.device().is_cpu())
    throw std::invalid_argument("pin_memory: expected a defined CPU tensor, got " +
                                (t.defined() ? t.desc() : std::string("an undefined tensor")));
  Tensor out = empty_pinned(t.shape(), t.dtype());
  out.copy_(t);
  return out;
}

}  // namespace minidl
