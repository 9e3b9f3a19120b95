// tensor/pinned.h — page-locked ("pinned") host tensors, for DataLoader batches that are copied to
// a GPU: cudaMemcpy from pinned memory runs at full PCIe/NVLink speed and can be asynchronous.
//   Tensor batch = pin_memory(images);      // a CPU tensor whose storage is cudaMallocHost'ed
//   Tensor on_gpu = batch.to(Device::cuda(local_rank));
// Needs a CUDA device (throws naming the reason otherwise). Tested by tests/kernels/test_cuda_runtime.cpp.
#pragma once
#include "minidl/tensor/tensor.h"

namespace minidl {

// `device`: the GPU whose context allocates the memory and whose pinned cache it comes from
// (PyTorch's pin_memory_device); -1: the calling thread's current device.
Tensor pin_memory(const Tensor& t, int device = -1);  // a contiguous pinned copy of a CPU tensor
Tensor empty_pinned(const Shape& shape, DType dtype = DType::Float32, int device = -1);

}  // namespace minidl
