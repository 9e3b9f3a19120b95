// tensor/pinned.cpp — see tensor/pinned.h. Storage wraps a block of the device's pinned cache
// with pinned_free as its deleter (kernels/cuda_api.h), so the tensor is an ordinary CPU tensor to
// every CPU op.
#include "minidl/tensor/pinned.h"

#include <stdexcept>

#include "minidl/kernels/cuda_api.h"

namespace minidl {

Tensor empty_pinned(const Shape& shape, DType dtype, int device) {
  const size_t nbytes = static_cast<size_t>(shape_numel(shape)) * element_size(dtype);
  kernels::cuda::require_device(device < 0 ? 0 : device, "pinned_malloc");
  if (device < 0) device = kernels::cuda::current_device();
  void* p = kernels::cuda::pinned_malloc(nbytes, device);
  auto storage =
      std::make_shared<Storage>(p, nbytes, Device::cpu(), [device](void* q) { kernels::cuda::pinned_free(q, device); });
  return Tensor(storage, shape, contiguous_strides(shape), 0, dtype);
}

Tensor pin_memory(const Tensor& t, int device) {
  if (!t.defined() || !t.device().is_cpu())
    throw std::invalid_argument("pin_memory: expected a defined CPU tensor, got " +
                                (t.defined() ? t.desc() : std::string("an undefined tensor")));
  Tensor out = empty_pinned(t.shape(), t.dtype(), device);
  out.copy_(t);
  return out;
}

}  // namespace minidl
