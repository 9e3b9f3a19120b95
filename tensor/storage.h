// tensor/storage.h — a reference-counted, 64-byte aligned buffer of bytes on one device.
// Several tensors (views) share one Storage; it is freed when the last of them goes away.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>

#include "minidl/tensor/device.h"

namespace minidl {

class Storage {
 public:
  // Allocates nbytes on `device` (CPU here; CUDA through the backend's allocator).
  Storage(size_t nbytes, Device device);
  // Wraps memory owned elsewhere; `deleter` runs when the storage dies.
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  std::function<void(void*)> deleter_;
};

}  // namespace minidl
