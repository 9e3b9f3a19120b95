// tensor/threads.cpp — the public thread-count knob (threads.h), forwarding to the kernels' own.
#include "minidl/tensor/threads.h"

#include "minidl/kernels/cpu/parallel.h"

namespace minidl {

void set_num_threads(int n) { kernels::cpu::set_num_threads(n); }
int get_num_threads() { return kernels::cpu::get_num_threads(); }

}  // namespace minidl
