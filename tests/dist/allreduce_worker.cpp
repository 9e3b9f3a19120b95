// tests/dist/allreduce_worker.cpp — test_dist doubles as a Gloo all-reduce worker for the
// launcher tests, in the same way as worker_entry.cpp's MINIDL_TEST_WORKER workers: when
// MINIDL_TEST_PG_WORKER is set, a static initializer runs the named worker before GoogleTest's
// main() and exits with its status.
//
//   MINIDL_TEST_PG_WORKER=allreduce minidl-run --nproc-per-node 2 --nnodes 2 --node-rank K ./test_dist
//
// Workers:
//   allreduce  dist::init() from the launcher's environment, all_reduce (SUM) of float32[1000]
//              filled with rank + 1, check every element is 1 + 2 + ... + world, print
//              "rank R/W allreduce S", barrier, shutdown.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "minidl/dist/distributed.h"
#include "minidl/tensor/creation.h"

namespace {

int allreduce_worker() {
  namespace dist = minidl::dist;
  dist::init({.timeout = std::chrono::seconds(10)});
  const int world = dist::world_size();
  minidl::Tensor t = minidl::full({1000}, dist::rank() + 1.0);
  dist::all_reduce(t);
  const float expected = static_cast<float>(world * (world + 1) / 2);
  for (float v : t.to_vector<float>())
    if (v != expected) {
      std::fprintf(stderr, "rank %d: all_reduce gave %g, expected %g\n", dist::rank(), v, expected);
      return 3;
    }
  std::printf("rank %d/%d allreduce %g\n", dist::rank(), world, expected);
  dist::barrier();
  dist::shutdown();
  return 0;
}

[[maybe_unused]] const bool pg_worker_ran = [] {
  const char* name = std::getenv("MINIDL_TEST_PG_WORKER");
  if (name == nullptr) return false;
  int code = 2;
  try {
    if (std::string(name) == "allreduce")
      code = allreduce_worker();
    else
      std::fprintf(stderr, "unknown MINIDL_TEST_PG_WORKER '%s'\n", name);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker failed: %s\n", e.what());
    code = 1;
  }
  std::fflush(nullptr);
  _exit(code);
}();

}  // namespace
