// kernels/cpu/parallel.cpp — thread-count control for OpenMP loops and Eigen's GEMM, and the
// std::thread runner that replaces OpenMP regions in a ThreadSanitizer build (see parallel.h).
#include "minidl/kernels/cpu/parallel.h"

#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace minidl::kernels::cpu {

namespace {
int& current_threads() {
  static int n = [] {
    const int d = default_num_threads();
    omp_set_num_threads(d);
    Eigen::setNbThreads(d);
    return d;
  }();
  return n;
}
}  // namespace

int default_num_threads() {
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (cores < 1) cores = 1;
  int local_world = 1;
  if (const char* s = std::getenv("LOCAL_WORLD_SIZE")) local_world = std::max(1, std::atoi(s));
  if (const char* s = std::getenv("OMP_NUM_THREADS")) {
    const int t = std::atoi(s);
    if (t >= 1) return t;
  }
  return std::max(1, cores / local_world);
}

void set_num_threads(int n) {
  if (n < 1) throw std::invalid_argument("set_num_threads: n must be >= 1, got " + std::to_string(n));
  current_threads() = n;
  omp_set_num_threads(n);
  Eigen::setNbThreads(n);
}

int get_num_threads() { return current_threads(); }

#if defined(MINIDL_PARALLEL_STD_THREADS)
namespace {
thread_local bool in_chunks = false;  // set while this thread runs chunks of run_chunks_on_std_threads
}
bool in_parallel() { return in_chunks; }
#else
bool in_parallel() { return omp_in_parallel() != 0; }
#endif

#if defined(MINIDL_PARALLEL_STD_THREADS)
void detail::run_chunks_on_std_threads(int64_t chunks, void (*body)(void*, int64_t), void* ctx) {
  const int64_t threads = std::min<int64_t>(get_num_threads(), chunks);
  auto block = [&](int64_t t) {  // chunks [t * chunks / T, (t + 1) * chunks / T)
    in_chunks = true;
    for (int64_t c = t * chunks / threads; c < (t + 1) * chunks / threads; ++c) body(ctx, c);
    in_chunks = false;
  };
  std::vector<std::thread> workers;
  workers.reserve(static_cast<size_t>(threads - 1));
  for (int64_t t = 1; t < threads; ++t) workers.emplace_back(block, t);
  block(0);
  for (std::thread& w : workers) w.join();
}
#endif

}  // namespace minidl::kernels::cpu
