// dist/shm_segment.h — the pieces of ProcessGroupShm that are not the group itself (private to
// dist/): the layout of the shared segment every rank maps (Note [segment layout]), the OS calls
// its barrier uses (futex, whether a pid has exited), the reduction of one part in rank order,
// and the registry of symmetric buffers (Note [symmetric buffers]). Used by
// dist/process_group_shm.cpp (the group's lifetime and its communication thread) and
// dist/shm_collectives.cpp (the barrier and the collectives).
#pragma once
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "minidl/dist/cpu_collective_checks.h"
#include "minidl/dist/process_group.h"
#include "minidl/kernels/cpu/vec_math.h"

namespace minidl::dist::shm_detail {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr uint64_t kMagic = 0x31764d48534c444dULL;  // "MDLSHMv1"
constexpr size_t kFingerprintBytes = 448;
// A waiter spins this long (yielding the core between rounds of a microsecond or two) before
// sleeping in the kernel. Without the yields, a spin took the core from a peer that had been
// preempted and made a 4 KB all-reduce 3x slower when other processes ran; with them, a spin
// costs little even then. A sleeping rank is expensive to wake in a virtual machine (its idle
// vCPU halts and the host must resume it): on two vCPUs, 1 ms instead of 20 us made a 1 MB
// all-reduce 4x faster (bench_allreduce, median 602 -> 130 us) and the mlp's two-process step
// 1.39 -> 1.14 ms (mean); beside a busy loop a 4 KB all-reduce's mean went 13.7 -> 10.8 us and
// its median 9.9 -> 11.9 us (docs/benchmarks.md).
constexpr auto kSpin = std::chrono::microseconds(1000);
// While asleep, wake this often to check the deadline and whether the awaited ranks still live.
constexpr auto kCheckEvery = milliseconds(5);
// all_reduce of at most this many bytes takes one barrier (each rank reduces the whole tensor)
// instead of reduce-scatter + all-gather's two.
constexpr size_t kOneShotBytes = 32 << 10;

// Note [segment layout]: Header, then one RankState per rank, then the data area (page
// aligned): 2 sets x size slots x slot_bytes. all_reduce uses slot (set, rank); broadcast and
// all_gather use the whole data area between barriers. The atomics rely on a fresh segment
// reading as zero (ftruncate fills with zeros) and on being lock-free (address-free).
struct alignas(64) Header {
  uint64_t magic;
  int32_t world;
  uint64_t slot_bytes;
  alignas(64) std::atomic<uint64_t> arrivals;  // barrier arrivals by all ranks, ever
  alignas(64) std::atomic<uint32_t> generation;  // the futex word: barriers completed (mod 2^32)
  std::atomic<uint32_t> sleepers;  // ranks in (or about to enter) FUTEX_WAIT
  std::atomic<int32_t> failed_rank;  // 1 + the first rank whose collective failed; 0: none
  char symmetric_name[64];  // empty_symmetric: the new segment's name, written by rank 0 ("": none)
};

struct alignas(64) RankState {
  std::atomic<int32_t> pid;
  std::atomic<uint32_t> arrived;  // the last barrier this rank reached (mod 2^32)
  int64_t meta[3];  // all_gather: rows, elements per row, dtype
  uint32_t fingerprint_length;
  char fingerprint[kFingerprintBytes];  // debug mode: this rank's CollectiveDesc::fingerprint
};

static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free);

inline size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
inline size_t data_offset(int world) { return round_up(sizeof(Header) + sizeof(RankState) * world, 4096); }
inline size_t segment_bytes(int world, size_t slot_bytes) { return data_offset(world) + 2 * world * slot_bytes; }

inline std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Whether the process is gone: no such pid, or a zombie (exited, not reaped yet).
inline bool process_exited(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  const std::string stat = read_first_line("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');  // "pid (comm) S ...": comm may hold spaces and parens
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  const char state = stat[paren + 2];
  return state == 'Z' || state == 'X';
}

inline std::string random_hex(size_t bytes) {
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  std::vector<unsigned char> raw(bytes);
  if (!urandom.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(bytes)))
    throw std::runtime_error("ProcessGroupShm: cannot read /dev/urandom");
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char b : raw) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

inline long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// ---- the reduction of one part: out = src[0] op src[1] op ... in rank order ----
// A float or double sum or average goes 16 floats (8 doubles) at a time, the tail masked: every source's lanes are loaded before any output's are stored, so the sources may
// alias the outputs (rank r's own source is its tensor, which is also one of the outputs), and
// each source and output is touched once. Through the stack buffer below instead (copy the first
// source in, add the others, copy it out to each output), a 1 MB symmetric all-reduce on two
// ranks took 27-35 us against 21-22, and the mlp's two-process DDP step 1.46 against 1.40 ms
// (docs/benchmarks.md). The other ops and dtypes go block by block through that buffer.
// Both give the same bits: ((src[0] + src[1]) + ...) / world, element by element.
template <class T>
bool reduce_part_lanes(ReduceOp op, int world, const std::vector<const T*>& src, const std::vector<T*>& outs,
                       size_t n) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    namespace cpu = kernels::cpu;
    if (op != ReduceOp::SUM && op != ReduceOp::AVG) return false;
    constexpr size_t kW = cpu::kLanes<T>;
    const cpu::Lanes<T> divisor = cpu::splat(static_cast<T>(world));
    auto lanes_at = [&](size_t i, int64_t m) {  // elements i .. i + m - 1 (m <= kW)
      cpu::Lanes<T> acc = cpu::load_first_lanes(src[0] + i, m);
      for (int r = 1; r < world; ++r) acc += cpu::load_first_lanes(src[static_cast<size_t>(r)] + i, m);
      if (op == ReduceOp::AVG) acc /= divisor;
      for (T* out : outs) cpu::store_first_lanes(out + i, acc, m);
    };
    size_t i = 0;
    for (; i + kW <= n; i += kW) lanes_at(i, kW);  // whole vectors: the mask folds away
    if (i < n) lanes_at(i, static_cast<int64_t>(n - i));
    return true;
  } else {
    return false;
  }
}

template <class T>
void reduce_part(ReduceOp op, int world, const std::vector<const T*>& src, const std::vector<T*>& outs, size_t n) {
  if (reduce_part_lanes<T>(op, world, src, outs, n)) return;
  constexpr size_t kBlock = 4096 / sizeof(T);
  T acc[kBlock];
  for (size_t base = 0; base < n; base += kBlock) {
    const size_t m = std::min(kBlock, n - base);
    std::memcpy(acc, src[0] + base, m * sizeof(T));
    for (int r = 1; r < world; ++r) {
      const T* x = src[static_cast<size_t>(r)] + base;
      switch (op) {
        case ReduceOp::SUM:
        case ReduceOp::AVG:
          for (size_t i = 0; i < m; ++i) acc[i] = static_cast<T>(acc[i] + x[i]);
          break;
        case ReduceOp::MAX:
          for (size_t i = 0; i < m; ++i) acc[i] = acc[i] < x[i] ? x[i] : acc[i];
          break;
        case ReduceOp::MIN:
          for (size_t i = 0; i < m; ++i) acc[i] = x[i] < acc[i] ? x[i] : acc[i];
          break;
      }
    }
    if (op == ReduceOp::AVG)  // the same division as ProcessGroupGloo's
      for (size_t i = 0; i < m; ++i) acc[i] = static_cast<T>(acc[i] / static_cast<T>(world));
    for (T* out : outs) std::memcpy(out + base, acc, m * sizeof(T));
  }
}

// Note [symmetric buffers]: empty_symmetric() allocates a tensor in a segment of its own that
// every rank maps, rank r's tensor at r * per_rank bytes from the start; the registry lets
// all_reduce recognise one and reduce straight between the ranks' tensors. The registry outlives
// the group when a tensor does (its storage's deleter unregisters and unmaps).
struct SymmetricBuffer {
  char* base;  // rank 0's tensor; rank r's at base + r * per_rank
  size_t per_rank;
  size_t mapped;  // size * per_rank
};
struct SymmetricRegistry {
  std::mutex mutex;
  std::vector<SymmetricBuffer> buffers;
};

inline const CpuCollectiveChecks kChecks("ProcessGroupShm", "shm");

inline std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

inline std::atomic<int64_t> groups_created{0};  // names each group's store keys; same order on every rank

}  // namespace minidl::dist::shm_detail
