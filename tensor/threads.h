// tensor/threads.h — how many CPU threads the ops use, as torch.set_num_threads / get_num_threads.
// The default comes from the environment variable OMP_NUM_THREADS (a positive integer), read once
// when the library first needs its thread count; without it, the cores available divided by
// LOCAL_WORLD_SIZE (one share per process of a launcher like torchrun or minidl-run).
// One knob for everything: the OpenMP loops, Eigen's GEMM and the parallel_for of every kernel.
//   OMP_NUM_THREADS=4 ./train ...          // or, in the program:
//   minidl::set_num_threads(4);            // n < 1 is a std::invalid_argument naming n
#pragma once

namespace minidl {

void set_num_threads(int n);
int get_num_threads();

}  // namespace minidl
