// tests/common/threads.h — running a computation with 1 and with 2 CPU threads, for the tests
// that check a kernel gives the same bits whatever the thread count.
#pragma once
#include <utility>

#include "minidl/kernels/cpu/parallel.h"
#include "minidl/tensor/tensor.h"

namespace minidl::testing {

// Runs f() with 1 thread and with 2 threads, then restores the thread count it found.
template <class F> std::pair<Tensor, Tensor> with_1_and_2_threads(F f) {
  const int saved = kernels::cpu::get_num_threads();
  kernels::cpu::set_num_threads(1);
  Tensor a = f();
  kernels::cpu::set_num_threads(2);
  Tensor b = f();
  kernels::cpu::set_num_threads(saved);
  return {a, b};
}

}  // namespace minidl::testing
