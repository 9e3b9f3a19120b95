// tensor/storage.h — a reference-counted, 64-byte aligned buffer of bytes on one device.
// Several tensors (views) share one Storage; it is freed when the last of them goes away.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <new>
#include <string>

#include "minidl/tensor/device.h"

namespace minidl {

// Thrown when a CPU tensor's memory cannot be had. It is a std::bad_alloc, so handlers written
// for that still catch it, and what() says what was asked for: "out of memory: cannot allocate
// 1.50 GiB for a CPU tensor (1610612736 bytes); ..." with what the allocator holds already.
class CpuOutOfMemoryError : public std::bad_alloc {
 public:
  CpuOutOfMemoryError(size_t nbytes, const std::string& detail);
  const char* what() const noexcept override { return message_->c_str(); }
  size_t nbytes() const { return nbytes_; }

 private:
  std::shared_ptr<const std::string> message_;  // shared: copying an exception must not throw
  size_t nbytes_;
};

class Storage {
 public:
  // Allocates nbytes on `device` (CPU here; CUDA through the backend's allocator). Throws
  // CpuOutOfMemoryError when the CPU has no memory for it.
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
