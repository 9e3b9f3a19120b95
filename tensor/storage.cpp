// tensor/storage.cpp — CPU allocation (aligned, never returns null) and device dispatch.
#include "tensor/storage.h"

#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>

#include "kernels/cuda_api.h"

namespace minidl {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  if (device.is_cpu()) {
    const size_t rounded = ((nbytes + 63) / 64) * 64;
    data_ = rounded ? std::aligned_alloc(64, rounded) : nullptr;
    if (rounded && !data_) throw std::bad_alloc();
    deleter_ = [](void* p) { std::free(p); };
  } else {
    data_ = kernels::cuda::device_malloc(nbytes, device.index);
    deleter_ = [idx = device.index](void* p) { kernels::cuda::device_free(p, idx); };
  }
}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (data_ && deleter_) deleter_(data_);
}

}  // namespace minidl
