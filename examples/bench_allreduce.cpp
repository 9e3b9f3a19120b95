// examples/bench_allreduce.cpp — all-reduce bandwidth across CPU processes on one host, for each
// transport (Gloo over loopback TCP, shm through shared memory), reported as nccl-tests defines
// it: algbw = bytes / time, busbw = algbw * 2 (n - 1) / n, for float32 buffers of 4 KB to 64 MB,
// beside a plain memcpy bandwidth of this machine. time is the mean over the calls (as nccl-tests
// reports it); median, the middle call, shows what a call costs when no other process runs on
// the core it needs. shm-symmetric is the shm transport on tensors in memory every rank maps
// (ProcessGroup::empty_symmetric, where DDP keeps its gradient buckets): reduced in place
// between the ranks' tensors, with no copy into the group's segment and back.
//   ./build/examples/bench_allreduce [nprocs = 2] [backends = gloo,shm,shm-symmetric]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "minidl/dist/distributed.h"
#include "minidl/dist/spawn.h"
#include "minidl/tensor/creation.h"

using namespace minidl;
using Clock = std::chrono::steady_clock;

namespace {

double memcpy_gbps(size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 0);
  std::memcpy(b.data(), a.data(), bytes);  // touch the pages
  const int reps = 10;
  const auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) std::memcpy(b.data(), a.data(), bytes);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return static_cast<double>(bytes) * reps / s / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  const int nprocs = argc > 1 ? std::atoi(argv[1]) : 2;
  const std::string backends = argc > 2 ? argv[2] : "gloo,shm,shm-symmetric";
  std::printf("memcpy 64 MB: %.2f GB/s (one thread)\n", memcpy_gbps(64u << 20));
  for (size_t at = 0; at < backends.size();) {
    const size_t comma = std::min(backends.find(',', at), backends.size());
    const std::string backend = backends.substr(at, comma - at);
    at = comma + 1;
    std::printf("%10s %12s %12s %12s %12s   (%d processes, %s, float32, sum)\n", "bytes", "time (us)", "algbw GB/s",
                "busbw GB/s", "median (us)", nprocs, backend.c_str());
    const bool symmetric = backend == "shm-symmetric";
    const auto lines = dist::spawn_with_results(nprocs, [&](int rank) {
      dist::init({.backend = symmetric ? "shm" : backend});
      std::string out;
      for (int64_t bytes = 4 << 10; bytes <= (64 << 20); bytes *= 4) {
        // (bytes / 4,) float32 ones: an ordinary tensor, or one every rank maps
        Tensor t = symmetric ? dist::default_group().empty_symmetric({bytes / 4}, DType::Float32)
                             : Tensor({bytes / 4}, DType::Float32);
        t.fill_(1.0);
        // about 0.25 s of calls per size (at 1 GB/s), at least 5
        const int warm = 3, reps = static_cast<int>(std::clamp<int64_t>((256 << 20) / bytes, 5, 2000));
        for (int i = 0; i < warm; ++i) dist::all_reduce(t);
        dist::barrier();
        std::vector<double> each(static_cast<size_t>(reps));
        const auto t0 = Clock::now();
        for (int i = 0; i < reps; ++i) {
          const auto ti = Clock::now();
          dist::all_reduce(t);
          each[static_cast<size_t>(i)] = std::chrono::duration<double>(Clock::now() - ti).count();
        }
        const double s = std::chrono::duration<double>(Clock::now() - t0).count() / reps;
        std::nth_element(each.begin(), each.begin() + reps / 2, each.end());
        const double median = each[static_cast<size_t>(reps / 2)];
        const double algbw = static_cast<double>(bytes) / s / 1e9;
        const double busbw = algbw * 2.0 * (nprocs - 1) / nprocs;
        char buf[160];
        std::snprintf(buf, sizeof buf, "%10lld %12.1f %12.3f %12.3f %12.1f\n", static_cast<long long>(bytes), s * 1e6,
                      algbw, busbw, median * 1e6);
        out += buf;
      }
      dist::shutdown();
      return rank == 0 ? out : std::string();
    });
    std::fputs(lines[0].c_str(), stdout);
  }
  return 0;
}
