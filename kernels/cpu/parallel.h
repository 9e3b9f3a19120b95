// kernels/cpu/parallel.h — the CPU thread pool knob (OpenMP) and a chunked parallel_for.
// Threads default to the cores available divided by LOCAL_WORLD_SIZE (one share per process).
// Work is split into fixed-size chunks whose boundaries do not depend on the thread count, so
// any per-chunk result (e.g. a partial sum) is the same whatever the number of threads.
#pragma once
#include <cstdint>

namespace minidl::kernels::cpu {

void set_num_threads(int n);  // n >= 1; also sets Eigen's thread count
int get_num_threads();
int default_num_threads();  // cores / LOCAL_WORLD_SIZE (at least 1)

// Calls fn(begin, end) for [0, n) in chunks of `grain` elements, in parallel when n > grain.
template <class F> void parallel_for(int64_t n, int64_t grain, F&& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  const int64_t chunks = (n + grain - 1) / grain;
  if (chunks == 1 || get_num_threads() == 1) {
    for (int64_t c = 0; c < chunks; ++c) fn(c * grain, c * grain + grain < n ? c * grain + grain : n);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t b = c * grain;
    const int64_t e = b + grain < n ? b + grain : n;
    fn(b, e);
  }
}

}  // namespace minidl::kernels::cpu
