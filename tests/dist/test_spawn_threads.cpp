// tests/dist/test_spawn_threads.cpp — a spawned child runs with the thread count it was given
// (SpawnOptions::omp_threads), not the kernels' default of cores / LOCAL_WORLD_SIZE.
#include <omp.h>

#include <string>
#include <thread>

#include "minidl/dist/spawn.h"
#include "minidl/kernels/cpu/parallel.h"
#include "tests/common/testing.h"

using minidl::dist::spawn_with_results;

TEST(SpawnThreads, TheChildKeepsTheThreadCountItAskedFor) {
  // A count no default can produce here: more than the cores, and not OMP_NUM_THREADS.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int asked = cores + 3;
  // Only queries the counts: no parallel region runs in the child (see spawn.h on fork and OpenMP).
  auto results = spawn_with_results(1,
                                    [](int) {
                                      return std::to_string(minidl::kernels::cpu::get_num_threads()) + "," +
                                             std::to_string(omp_get_max_threads());
                                    },
                                    {.omp_threads = asked});
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0], std::to_string(asked) + "," + std::to_string(asked));
}
