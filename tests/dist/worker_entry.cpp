// tests/dist/worker_entry.cpp — test_dist doubles as the worker program of the launcher tests.
// When MINIDL_TEST_WORKER is set, a static initializer runs the named worker before
// GoogleTest's main() and exits with its status; otherwise it does nothing. This keeps the
// worker in the same binary as its tests (always built together, no extra CMake target):
//
//   MINIDL_TEST_WORKER=count minidl-run --nproc-per-node 2 ./test_dist
//
// Workers:
//   count   read the world from the environment, connect to the TCPStore hosted by rank 0,
//           store.add("count", 1), wait until it reaches the world size, print
//           "rank R/W local L group G count C" (the all-reduce arrives with the Gloo group).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "minidl/dist/env.h"
#include "minidl/dist/store.h"
#include "tests/dist/dist_test_util.h"

namespace {

int count_worker() {
  auto info = minidl::dist::world_info_from_env();
  minidl::dist::TCPStore store(
      info.master_addr, {.port = info.master_port, .is_server = info.rank == 0, .timeout = std::chrono::seconds(8)});
  int64_t count = minidl::testing::count_rendezvous(store, info.rank, info.world_size);
  std::printf("rank %d/%d local %d group %d count %lld\n", info.rank, info.world_size, info.local_rank, info.group_rank,
              static_cast<long long>(count));
  return count == info.world_size ? 0 : 3;
}

int run_test_worker(const std::string& name) {
  try {
    if (name == "count") return count_worker();
    std::fprintf(stderr, "unknown MINIDL_TEST_WORKER '%s'\n", name.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker failed: %s\n", e.what());
    return 1;
  }
}

[[maybe_unused]] const bool worker_ran = [] {
  const char* name = std::getenv("MINIDL_TEST_WORKER");
  if (name == nullptr) return false;
  int code = run_test_worker(name);
  std::fflush(nullptr);
  _exit(code);
}();

}  // namespace
