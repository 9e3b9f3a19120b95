// examples/kernel_timing.h — the clock and the median the kernel benchmarks (bench_gemm,
// bench_attention) share. With one thread the clock is the thread's CPU time, so time spent
// descheduled by other processes on a shared machine does not count; with more, wall time.
#pragma once
#include <algorithm>
#include <ctime>
#include <vector>

namespace minidl::examples {

inline bool g_thread_cpu_clock = true;  // main sets it: true when the benchmark runs one thread

inline double now_s() {
  timespec ts{};
  clock_gettime(g_thread_cpu_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace minidl::examples
