// kernels/cpu/parallel.cpp — thread-count control for OpenMP loops and Eigen's GEMM.
#include "minidl/kernels/cpu/parallel.h"

#include <omp.h>

#include <Eigen/Core>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

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

}  // namespace minidl::kernels::cpu
