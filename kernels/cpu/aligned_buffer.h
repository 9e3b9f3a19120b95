// kernels/cpu/aligned_buffer.h — a 64-byte aligned buffer of T that only grows: the packing and
// scratch space a CPU kernel keeps (usually one per thread, thread_local) and reuses across calls.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>

namespace minidl::kernels::cpu {

template <class T> class AlignedBuffer {
 public:
  // At least n elements, 64-byte aligned; what it held is not kept when it grows.
  T* get(size_t n) {
    if (n > size_) {
      const size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
      data_.reset(static_cast<T*>(std::aligned_alloc(64, bytes)));
      if (!data_) throw std::bad_alloc();
      size_ = bytes / sizeof(T);
    }
    return data_.get();
  }

 private:
  std::unique_ptr<T, decltype(&std::free)> data_{nullptr, &std::free};
  size_t size_ = 0;
};

}  // namespace minidl::kernels::cpu
