// kernels/cpu/parallel.h — the CPU thread pool knob (OpenMP) and a chunked parallel_for.
// Threads default to the cores available divided by LOCAL_WORLD_SIZE (one share per process).
// Work is split into fixed-size chunks whose boundaries do not depend on the thread count, so
// any per-chunk result (e.g. a partial sum) is the same whatever the number of threads.
// A ThreadSanitizer build (MINIDL_SANITIZE=thread defines MINIDL_PARALLEL_STD_THREADS) runs the
// chunks on std::threads instead: libgomp is not instrumented, so TSan cannot see the barrier that
// ends an OpenMP region, while it sees a thread's join. The split is the same (OpenMP's static
// schedule: thread t of T takes one contiguous block of chunks).
#pragma once
#include <cstdint>

namespace minidl::kernels::cpu {

void set_num_threads(int n);  // n >= 1; also sets Eigen's thread count
int get_num_threads();
int default_num_threads();  // cores / LOCAL_WORLD_SIZE (at least 1)
// True inside a parallel_for's chunk that runs on a team of threads: a nested parallel_for then
// runs its chunks on the calling thread (a nested OpenMP region would only add a team of one,
// set up and torn down on every call: the GEMMs inside the Winograd convolution's chunks).
bool in_parallel();

#if defined(MINIDL_PARALLEL_STD_THREADS)
namespace detail {
// Runs body(ctx, c) for c in [0, chunks) on get_num_threads() std::threads (the caller is
// thread 0), each thread one contiguous block of chunks; returns when all have finished.
void run_chunks_on_std_threads(int64_t chunks, void (*body)(void* ctx, int64_t chunk), void* ctx);
}  // namespace detail
#endif

// Calls fn(begin, end) for [0, n) in chunks of `grain` elements, in parallel when n > grain.
template <class F> void parallel_for(int64_t n, int64_t grain, F&& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  const int64_t chunks = (n + grain - 1) / grain;
  auto run_chunk = [&](int64_t c) {
    const int64_t b = c * grain;
    const int64_t e = b + grain < n ? b + grain : n;
    fn(b, e);
  };
  if (chunks == 1 || get_num_threads() == 1 || in_parallel()) {
    for (int64_t c = 0; c < chunks; ++c) run_chunk(c);
    return;
  }
#if defined(MINIDL_PARALLEL_STD_THREADS)
  using RunChunk = decltype(run_chunk);
  detail::run_chunks_on_std_threads(
      chunks, [](void* ctx, int64_t c) { (*static_cast<RunChunk*>(ctx))(c); }, &run_chunk);
#else
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) run_chunk(c);
#endif
}

}  // namespace minidl::kernels::cpu
