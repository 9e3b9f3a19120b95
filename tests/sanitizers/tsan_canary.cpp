// tests/sanitizers/tsan_canary.cpp — a deliberate data race inside parallel_for, built only in the
// ThreadSanitizer build: ctest `tsan_sees_races_inside_parallel_for` expects TSan to report it and
// the program to fail. It proves that the thread mode can fail on a race between the kernels'
// threads (an OpenMP region would hide it: libgomp is not instrumented, see kernels/cpu/parallel.h).
#include <cstdio>

#include "minidl/kernels/cpu/parallel.h"

int main() {
  minidl::kernels::cpu::set_num_threads(2);
  long total = 0;  // every chunk adds to it without a lock: a race between the two threads
  minidl::kernels::cpu::parallel_for(64, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) total += i;
  });
  std::printf("total %ld\n", total);
  return 0;
}
