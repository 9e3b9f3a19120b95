// dist/process_group_shm.cpp — ProcessGroupShm: the shared segment (create, map, unlink), the
// futex barrier that notices dead and missing ranks, and the collectives as copies and
// reductions between barriers. See process_group_shm.h.
#include "minidl/dist/process_group_shm.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "minidl/autograd/trace.h"
#include "minidl/dist/cpu_collective_checks.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/storage.h"

namespace minidl::dist {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr uint64_t kMagic = 0x31764d48534c444dULL;  // "MDLSHMv1"
constexpr size_t kFingerprintBytes = 448;
// A waiter spins this long (yielding the core between rounds of a microsecond or two) before
// sleeping in the kernel: about what a peer needs to finish copying a piece. Measured on two
// cores (docs/benchmarks.md): without the yields, a longer spin took the core from a peer that
// had been preempted and made a 4 KB all-reduce 3x slower when other processes ran; with them,
// the wait costs nothing when the machine is quiet.
constexpr auto kSpin = std::chrono::microseconds(20);
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

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
size_t data_offset(int world) { return round_up(sizeof(Header) + sizeof(RankState) * world, 4096); }
size_t segment_bytes(int world, size_t slot_bytes) { return data_offset(world) + 2 * world * slot_bytes; }

std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Whether the process is gone: no such pid, or a zombie (exited, not reaped yet).
bool process_exited(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  const std::string stat = read_first_line("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');  // "pid (comm) S ...": comm may hold spaces and parens
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  const char state = stat[paren + 2];
  return state == 'Z' || state == 'X';
}

std::string random_hex(size_t bytes) {
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

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
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
// Block by block through a small buffer on the stack, so the sources may alias the outputs
// (rank r's own source is its tensor, which is also one of the outputs); each block goes to
// every pointer in `outs`.
template <class T>
void reduce_part(ReduceOp op, int world, const std::vector<const T*>& src, const std::vector<T*>& outs, size_t n) {
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

const CpuCollectiveChecks kChecks("ProcessGroupShm", "shm");

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

std::atomic<int64_t> groups_created{0};  // names each group's store keys; same order on every rank

}  // namespace

std::string shm_host_id() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  char ns[128] = {};
  const ssize_t len = ::readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
  struct stat shm {};
  ::stat("/dev/shm", &shm);
  return std::string(host) + " boot " + read_first_line("/proc/sys/kernel/random/boot_id") + " " +
         (len > 0 ? std::string(ns, static_cast<size_t>(len)) : "pid:[?]") + " shm " + std::to_string(shm.st_dev) +
         ":" + std::to_string(shm.st_ino);
}

std::vector<std::string> rank_host_ids(TCPStore& store, int rank, int size, const std::string& key_prefix,
                                       std::chrono::milliseconds timeout, const std::string& mine) {
  store.set(key_prefix + "host/" + std::to_string(rank), mine.empty() ? shm_host_id() : mine);
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(key_prefix + "host/" + std::to_string(r));
  store.wait(keys, timeout);
  std::vector<std::string> ids;
  for (const auto& k : keys) ids.push_back(store.get(k));
  return ids;
}

struct ProcessGroupShm::Impl {
  int rank = 0;
  int size = 1;
  ProcessGroupOptions options;
  bool debug = false;
  size_t slot_bytes = 0;
  std::string name;
  void* base = nullptr;
  size_t bytes = 0;
  Header* header = nullptr;
  RankState* ranks = nullptr;
  char* data = nullptr;

  std::atomic<int64_t> seq{0};  // collectives run so far
  uint64_t barriers = 0;  // barriers this rank has passed
  int next_set = 0;  // the slot set the next all_reduce writes before its first barrier
  std::string what;  // the running collective, for messages: "all_reduce #3 (float32[4])"
  std::atomic<bool> broken{false};
  std::string broken_reason;  // set once, before broken

  char* slot(int set, int r) const {
    return data + (static_cast<size_t>(set) * size + static_cast<size_t>(r)) * slot_bytes;
  }
  size_t data_bytes() const { return 2 * static_cast<size_t>(size) * slot_bytes; }

  // ---- the barrier ----
  [[noreturn]] void fail(const std::string& message) {
    int32_t none = 0;
    header->failed_rank.compare_exchange_strong(none, rank + 1);
    futex(&header->generation, FUTEX_WAKE, INT_MAX, nullptr);  // the waiters look at failed_rank
    throw std::runtime_error(message);
  }

  // The ranks that have not reached barrier `target` yet.
  std::vector<int> missing(uint32_t target) const {
    std::vector<int> out;
    for (int r = 0; r < size; ++r)
      if (static_cast<int32_t>(ranks[r].arrived.load(std::memory_order_acquire) - target) < 0) out.push_back(r);
    return out;
  }

  // Throws if a rank we wait for has exited.
  void check_alive(uint32_t target) {
    for (int r : missing(target)) {
      const pid_t pid = ranks[r].pid.load(std::memory_order_relaxed);
      if (process_exited(pid))
        fail(what + ": rank " + std::to_string(r) + " (pid " + std::to_string(pid) +
             ") exited while the others waited");
    }
  }

  void barrier() {
    const uint64_t k = ++barriers;
    const auto target = static_cast<uint32_t>(k);
    ranks[rank].arrived.store(target, std::memory_order_release);
    // The last to arrive releases everyone; its fetch_add reads every earlier arrival (a
    // release sequence), so every rank's writes before the barrier are visible after it.
    if (header->arrivals.fetch_add(1, std::memory_order_acq_rel) + 1 == k * static_cast<uint64_t>(size)) {
      header->generation.store(target, std::memory_order_seq_cst);
      if (header->sleepers.load(std::memory_order_seq_cst) > 0)
        futex(&header->generation, FUTEX_WAKE, INT_MAX, nullptr);
      return;
    }
    const auto start = Clock::now();
    while (Clock::now() - start < kSpin) {
      for (int i = 0; i < 64; ++i) {  // a microsecond or two
        if (header->generation.load(std::memory_order_acquire) == target) return;
        cpu_relax();
      }
      ::sched_yield();  // a peer waiting for this core gets it now, not at the end of our slice
    }
    const auto deadline = start + options.timeout;
    for (;;) {
      // sleepers before generation, and generation before sleepers on the releasing side (both
      // seq_cst): either it sees us asleep and wakes us, or we see the new generation.
      header->sleepers.fetch_add(1, std::memory_order_seq_cst);
      const uint32_t seen = header->generation.load(std::memory_order_seq_cst);
      if (seen != target && header->failed_rank.load() == 0) {
        const auto left = std::min<Clock::duration>(kCheckEvery, deadline - Clock::now());
        const auto ns = std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(left).count());
        const timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
        futex(&header->generation, FUTEX_WAIT, seen, &ts);
      }
      header->sleepers.fetch_sub(1, std::memory_order_seq_cst);
      if (header->generation.load(std::memory_order_acquire) == target) return;
      check_alive(target);
      if (const int32_t failed = header->failed_rank.load(); failed != 0) {
        std::vector<int> absent;  // whom we waited for, other than the rank that gave up
        for (int r : missing(target))
          if (r != failed - 1) absent.push_back(r);
        fail(what + ": rank " + std::to_string(failed - 1) + " gave up on it (see its error)" +
             (absent.empty() ? std::string() : "; " + rank_list(absent) + " did not arrive"));
      }
      // (Every rank may have arrived with the last one not yet past its release: wait on.)
      if (const std::vector<int> absent = missing(target); Clock::now() >= deadline && !absent.empty())
        fail(what + " timed out after " + std::to_string(options.timeout.count()) + " ms: " + rank_list(absent) +
             " did not arrive");
    }
  }

  // ---- collectives (under mutex; the caller has numbered the collective in `what`) ----
  // Note [barrier discipline]: all_reduce writes, before its first barrier, only the parts of
  // its own slots that other ranks read before a barrier; every other collective starts with a
  // barrier before it writes to the segment and ends with one after its last read of it.
  // Note [part regions]: slot (set, r) is cut into `size` regions of region_bytes(), one per
  // part; part j of every piece lives at the start of region j, whatever the piece's length and
  // dtype. Rank r writes only regions j != r of its slot before a barrier, and the others read
  // only region r of it after one, so a short last piece, or the next all_reduce's first copy,
  // can never overwrite a result that another rank is still copying out.
  size_t region_bytes() const { return slot_bytes / static_cast<size_t>(size) / 64 * 64; }

  // Small tensors in one step: every rank copies its whole tensor into its slot, one barrier,
  // and every rank reduces all of it from every slot in rank order (the same bits everywhere).
  // The next all_reduce writes the other set, whose last readers passed this one's barrier.
  void all_reduce_one_shot(char* buf, DType dtype, size_t n, ReduceOp op) {
    const int set = next_set;
    next_set ^= 1;
    std::memcpy(slot(set, rank), buf, n * element_size(dtype));
    barrier();
    dispatch(dtype, "all_reduce", [&](auto zero) {
      using T = decltype(zero);
      std::vector<const T*> src(static_cast<size_t>(size));
      for (int r = 0; r < size; ++r)
        src[static_cast<size_t>(r)] = r == rank ? reinterpret_cast<T*>(buf) : reinterpret_cast<const T*>(slot(set, r));
      reduce_part<T>(op, size, src, {reinterpret_cast<T*>(buf)}, n);
    });
  }

  void all_reduce(char* buf, DType dtype, size_t n, ReduceOp op) {
    const size_t es = element_size(dtype);
    if (n * es <= std::min(kOneShotBytes, slot_bytes)) return all_reduce_one_shot(buf, dtype, n, op);
    const size_t region = region_bytes();
    const size_t piece = static_cast<size_t>(size) * (region / es);  // elements per piece
    const size_t pieces = (n + piece - 1) / piece;
    const size_t align = std::max<size_t>(1, 64 / es);
    // Part j of piece k: elements [begin(k) + lo(k, j), begin(k) + lo(k, j + 1)) of the tensor,
    // balanced over the ranks (at most region / es elements each).
    auto begin = [&](size_t k) { return k * piece; };
    auto lo = [&](size_t k, int j) {
      const size_t m = std::min(piece, n - k * piece);
      const size_t per = round_up((m + size - 1) / size, align);
      return std::min(m, per * static_cast<size_t>(j));
    };
    const int first_set = next_set;
    next_set = static_cast<int>((static_cast<size_t>(next_set) + pieces) % 2);
    auto part = [&](size_t k, int owner, int j) {
      return slot(static_cast<int>((static_cast<size_t>(first_set) + k) % 2), owner) + j * region;
    };
    auto copy_in = [&](size_t k) {
      for (int j = 0; j < size; ++j)
        if (j != rank) std::memcpy(part(k, rank, j), buf + (begin(k) + lo(k, j)) * es, (lo(k, j + 1) - lo(k, j)) * es);
    };
    auto reduce = [&](size_t k) {
      const size_t a = lo(k, rank), b = lo(k, rank + 1);
      if (a == b) return;
      dispatch(dtype, "all_reduce", [&](auto zero) {
        using T = decltype(zero);
        T* own = reinterpret_cast<T*>(buf) + begin(k) + a;
        std::vector<const T*> src(static_cast<size_t>(size));
        for (int r = 0; r < size; ++r)
          src[static_cast<size_t>(r)] = r == rank ? own : reinterpret_cast<const T*>(part(k, r, rank));
        reduce_part<T>(op, size, src, {reinterpret_cast<T*>(part(k, rank, rank)), own}, b - a);
      });
    };
    auto copy_out = [&](size_t k) {
      for (int j = 0; j < size; ++j)
        if (j != rank) std::memcpy(buf + (begin(k) + lo(k, j)) * es, part(k, j, j), (lo(k, j + 1) - lo(k, j)) * es);
    };
    copy_in(0);
    for (size_t k = 0; k < pieces; ++k) {
      barrier();  // piece k is in every slot; piece k - 1 is reduced
      if (k > 0) copy_out(k - 1);
      reduce(k);
      if (k + 1 < pieces) copy_in(k + 1);  // the other set: its last readers passed the barrier
    }
    barrier();
    copy_out(pieces - 1);
  }

  // ---- symmetric buffers (Note [symmetric buffers]) ----
  std::shared_ptr<SymmetricRegistry> symmetric = std::make_shared<SymmetricRegistry>();
  bool told_no_room = false;

  // The registered buffer that holds [p, p + bytes) of this rank's tensor, if any.
  std::optional<std::pair<SymmetricBuffer, size_t>> find_symmetric(const char* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(symmetric->mutex);
    for (const SymmetricBuffer& b : symmetric->buffers) {
      const char* mine = b.base + static_cast<size_t>(rank) * b.per_rank;
      if (p >= mine && p + bytes <= mine + b.per_rank) return std::make_pair(b, static_cast<size_t>(p - mine));
    }
    return std::nullopt;
  }

  // Rank 0 creates a segment of size * per_rank bytes (its pages reserved with posix_fallocate,
  // so a full /dev/shm is an answer here, not a SIGBUS later) and every rank maps it; undefined
  // on every rank unless every rank mapped it.
  Tensor allocate_symmetric(const Shape& shape, DType dtype) {
    const size_t nbytes = static_cast<size_t>(shape_numel(shape)) * element_size(dtype);
    const size_t per_rank = round_up(std::max<size_t>(nbytes, 1), 4096);
    const size_t total = per_rank * static_cast<size_t>(size);
    barrier();  // every rank has read the previous name
    std::string made;
    if (rank == 0) {
      std::string why;
      const std::string name = kShmNamePrefix + random_hex(8);
      const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd < 0) {
        why = std::strerror(errno);
      } else {
        if (const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(total)); err != 0) why = std::strerror(err);
        ::close(fd);
        if (why.empty()) made = name;
        else ::shm_unlink(name.c_str());
      }
      if (!why.empty() && !told_no_room) {
        told_no_room = true;
        std::fprintf(stderr, "ProcessGroupShm: no shared memory for a %zu-byte buffer per rank in /dev/shm (%s); "
                     "all_reduce copies through the group's segment instead\n", per_rank, why.c_str());
      }
      std::memset(header->symmetric_name, 0, sizeof(header->symmetric_name));
      std::memcpy(header->symmetric_name, made.data(), made.size());
    }
    barrier();
    const std::string name(header->symmetric_name, ::strnlen(header->symmetric_name, sizeof(header->symmetric_name)));
    void* base = nullptr;
    if (!name.empty()) {
      const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
      if (fd >= 0) {
        base = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (base == MAP_FAILED) base = nullptr;
        ::close(fd);
      }
    }
    ranks[rank].meta[0] = base != nullptr ? 1 : 0;
    barrier();  // every rank has mapped it, or failed to
    bool everyone = true;
    for (int r = 0; r < size; ++r) everyone = everyone && ranks[r].meta[0] == 1;
    if (rank == 0 && !name.empty()) ::shm_unlink(name.c_str());  // the mappings keep it alive
    if (!everyone) {
      if (base != nullptr) ::munmap(base, total);
      return Tensor();
    }
    const SymmetricBuffer buffer{static_cast<char*>(base), per_rank, total};
    {
      std::lock_guard<std::mutex> lock(symmetric->mutex);
      symmetric->buffers.push_back(buffer);
    }
    char* mine = buffer.base + static_cast<size_t>(rank) * per_rank;
    auto storage = std::make_shared<Storage>(mine, nbytes, Device::cpu(), [registry = symmetric, buffer](void*) {
      {
        std::lock_guard<std::mutex> lock(registry->mutex);
        auto& v = registry->buffers;
        v.erase(std::remove_if(v.begin(), v.end(), [&](const SymmetricBuffer& b) { return b.base == buffer.base; }),
                v.end());
      }
      ::munmap(buffer.base, buffer.mapped);
    });
    return Tensor(storage, shape, contiguous_strides(shape), 0, dtype);
  }

  // all_reduce of n elements at `offset` in every rank's tensor of `buffer`: after one barrier
  // (every rank's values are in place) rank r reduces part r over every rank's tensor, in rank
  // order, straight into every rank's tensor; a second barrier ends it. No copies through the
  // segment: half the memory traffic of all_reduce() above, and 2 barriers instead of pieces + 1.
  void all_reduce_symmetric(const SymmetricBuffer& buffer, size_t offset, DType dtype, size_t n, ReduceOp op) {
    const size_t es = element_size(dtype);
    const size_t align = std::max<size_t>(1, 64 / es);
    const size_t per = round_up((n + static_cast<size_t>(size) - 1) / static_cast<size_t>(size), align);
    const size_t a = std::min(n, per * static_cast<size_t>(rank)), b = std::min(n, a + per);
    barrier();
    if (a < b) {
      dispatch(dtype, "all_reduce", [&](auto zero) {
        using T = decltype(zero);
        std::vector<const T*> src(static_cast<size_t>(size));
        std::vector<T*> outs(static_cast<size_t>(size));
        for (int r = 0; r < size; ++r) {
          T* t = reinterpret_cast<T*>(buffer.base + static_cast<size_t>(r) * buffer.per_rank + offset) + a;
          src[static_cast<size_t>(r)] = t;
          outs[static_cast<size_t>(r)] = t;
        }
        reduce_part<T>(op, size, src, outs, b - a);
      });
    }
    barrier();
  }

  void broadcast(char* buf, size_t bytes, int root) {
    const size_t piece = data_bytes();
    barrier();
    for (size_t off = 0; off < bytes; off += piece) {
      const size_t m = std::min(piece, bytes - off);
      if (rank == root) std::memcpy(data, buf + off, m);
      barrier();
      if (rank != root) std::memcpy(buf + off, data, m);
      barrier();
    }
  }

  void all_gather(const Tensor& in, std::vector<Tensor>& out) {
    // 1. Every rank's (rows, elements per row, dtype).
    const bool scalar = in.dim() == 0;
    const int64_t rows = scalar ? 1 : in.size(0);
    const int64_t row_numel =
        rows == 0 ? shape_numel(Shape(in.shape().begin() + 1, in.shape().end())) : in.numel() / rows;
    barrier();
    ranks[rank].meta[0] = rows;
    ranks[rank].meta[1] = row_numel;
    ranks[rank].meta[2] = static_cast<int64_t>(in.dtype());
    barrier();
    std::vector<int64_t> counts(static_cast<size_t>(size));
    int64_t total_rows = 0;
    for (int r = 0; r < size; ++r) {
      const int64_t* m = ranks[r].meta;
      if (m[1] != row_numel || m[2] != static_cast<int64_t>(in.dtype()))
        fail(what + " failed: ranks disagree: rank " + std::to_string(rank) + " has " + dtype_name(in.dtype()) +
             " rows of " + std::to_string(row_numel) + " elements, rank " + std::to_string(r) + " has " +
             dtype_name(static_cast<DType>(m[2])) + " rows of " + std::to_string(m[1]) + " elements");
      counts[static_cast<size_t>(r)] = m[0];
      total_rows += m[0];
    }
    // 2. The data, concatenated along dim 0 in rank order, through one region per rank.
    Shape all_shape = scalar ? Shape{total_rows} : in.shape();
    if (!scalar) all_shape[0] = total_rows;
    Tensor all = empty(all_shape, in.dtype());
    const size_t row_bytes = static_cast<size_t>(row_numel) * element_size(in.dtype());
    const size_t region = data_bytes() / static_cast<size_t>(size);
    size_t longest = 0;
    for (int64_t c : counts) longest = std::max(longest, static_cast<size_t>(c) * row_bytes);
    const char* mine = in.numel() > 0 ? static_cast<const char*>(in.raw_data()) : nullptr;
    const size_t my_bytes = static_cast<size_t>(rows) * row_bytes;
    char* dst = all.numel() > 0 ? static_cast<char*>(all.raw_data()) : nullptr;
    for (size_t off = 0; off < longest; off += region) {
      if (off < my_bytes) std::memcpy(data + rank * region, mine + off, std::min(region, my_bytes - off));
      barrier();
      size_t at = 0;  // where rank r's bytes start in `all`
      for (int r = 0; r < size; ++r) {
        const size_t theirs = static_cast<size_t>(counts[static_cast<size_t>(r)]) * row_bytes;
        if (off < theirs) std::memcpy(dst + at + off, data + r * region, std::min(region, theirs - off));
        at += theirs;
      }
      barrier();
    }
    out.assign(static_cast<size_t>(size), Tensor());
    int64_t offset = 0;
    for (int r = 0; r < size; ++r) {
      const int64_t c = counts[static_cast<size_t>(r)];
      out[static_cast<size_t>(r)] = scalar ? all.select(0, offset) : all.narrow(0, offset, c);
      offset += c;
    }
  }

  // Debug mode: every rank's fingerprint of collective #n through the segment, compared.
  void check_fingerprint(int64_t n, const CollectiveDesc& desc) {
    const std::string mine = desc.fingerprint(n).substr(0, kFingerprintBytes);
    const std::string saved_what = what;
    what = "MINIDL_DIST_DEBUG: collective #" + std::to_string(n) + " (" + desc.human() + ")";
    barrier();
    std::memcpy(ranks[rank].fingerprint, mine.data(), mine.size());
    ranks[rank].fingerprint_length = static_cast<uint32_t>(mine.size());
    barrier();
    std::vector<std::string> all;
    for (int r = 0; r < size; ++r) all.emplace_back(ranks[r].fingerprint, ranks[r].fingerprint_length);
    barrier();  // nobody overwrites a fingerprint before every rank has read them
    what = saved_what;
    const std::string mismatch = fingerprint_mismatch(n, all);
    if (!mismatch.empty()) throw std::runtime_error(mismatch);
  }

  // ---- the communication thread, and callers that help it ----
  // Note [helping]: *_async queue the collective and wake the communication thread, so DDP's
  // backward goes on while its buckets are reduced; a caller that waits on a collective nobody
  // has started runs it (and any queued before it) itself instead of waiting for the thread to
  // wake up, so a blocking call costs what an inline one does. exec_mutex makes "take the
  // oldest task and run it" one step for whichever thread does it: tasks run in queue order.
  struct TaskState {
    std::atomic<bool> done{false};
    std::exception_ptr error;  // written before done
  };
  struct Task {
    std::function<void()> run;
    std::shared_ptr<TaskState> state;
    autograd::trace::Collective trace;  // tracing: launched at issue, run by whoever runs it
  };
  std::thread worker;
  std::mutex exec_mutex;  // held while a task runs
  std::mutex queue_mutex;
  std::condition_variable queue_cv;
  std::deque<Task> queue;
  bool stopping = false;

  // With exec_mutex held: runs the oldest queued task; false if there is none.
  bool run_oldest() {
    Task task;
    {
      std::lock_guard<std::mutex> lock(queue_mutex);
      if (queue.empty()) return false;
      task = std::move(queue.front());
      queue.pop_front();
    }
    try {
      task.trace.run(task.run);
    } catch (...) {
      task.state->error = std::current_exception();
    }
    task.state->done.store(true, std::memory_order_release);
    return true;
  }

  void loop() {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(queue_mutex);
        queue_cv.wait(lock, [&] { return stopping || !queue.empty(); });
        if (stopping && queue.empty()) return;
      }
      std::lock_guard<std::mutex> exec(exec_mutex);
      run_oldest();  // none if a waiting caller took it first
    }
  }

  class TaskWork : public Work {
   public:
    TaskWork(Impl& impl, std::shared_ptr<TaskState> state) : impl_(impl), state_(std::move(state)) {}
    void wait() override {
      if (!state_->done.load(std::memory_order_acquire)) {
        std::lock_guard<std::mutex> exec(impl_.exec_mutex);
        while (!state_->done.load(std::memory_order_acquire) && impl_.run_oldest()) {}
      }
      if (state_->error) std::rethrow_exception(state_->error);
    }
    bool is_completed() override { return state_->done.load(std::memory_order_acquire); }

   private:
    Impl& impl_;
    std::shared_ptr<TaskState> state_;
  };

  std::shared_ptr<Work> issue(const CollectiveDesc& desc, std::function<void()> body) {
    if (broken)
      throw std::runtime_error(desc.op + ": the process group is broken by an earlier failure: " + broken_reason);
    Task task;
    task.trace = autograd::trace::Collective::launch(desc.human());
    task.run = [this, desc, body = std::move(body)] { run_collective(desc, body); };
    task.state = std::make_shared<TaskState>();
    auto work = std::make_shared<TaskWork>(*this, task.state);
    {
      std::lock_guard<std::mutex> lock(queue_mutex);
      queue.push_back(std::move(task));
    }
    queue_cv.notify_one();
    return work;
  }

  // Numbers the collective, runs the debug check, runs body (on the thread that runs the task).
  void run_collective(const CollectiveDesc& desc, const std::function<void()>& body) {
    if (broken)
      throw std::runtime_error(desc.op + ": the process group is broken by an earlier failure: " + broken_reason);
    const int64_t n = seq.fetch_add(1) + 1;
    what = desc.op + " #" + std::to_string(n);
    if (!desc.sig().empty()) what += " (" + desc.sig() + ")";
    try {
      if (debug) check_fingerprint(n, desc);
      body();
    } catch (const std::exception& e) {
      broken_reason = e.what();
      broken = true;
      throw;
    }
  }

  void unmap() {
    if (base != nullptr) ::munmap(base, bytes);
    base = nullptr;
  }
};

ProcessGroupShm::ProcessGroupShm(TCPStore& store, int rank, int size, ProcessGroupOptions options, ShmOptions shm)
    : ProcessGroup(rank, size), options_(options), impl_(std::make_unique<Impl>()) {
  if (size < 1 || rank < 0 || rank >= size)
    throw std::invalid_argument("ProcessGroupShm: rank " + std::to_string(rank) + " of world size " +
                                std::to_string(size) + " is out of range");
  if (options.timeout.count() <= 0) throw std::invalid_argument("ProcessGroupShm: timeout must be positive");
  if (shm.slot_bytes < std::max<size_t>(4096, 64 * static_cast<size_t>(size)))
    throw std::invalid_argument("ProcessGroupShm: slot_bytes must be at least 4096 and 64 per rank; got " +
                                std::to_string(shm.slot_bytes));
  Impl& im = *impl_;
  im.rank = rank;
  im.size = size;
  im.options = options;
  im.debug = debug_mode(options);
  im.slot_bytes = shm.slot_bytes;
  im.bytes = segment_bytes(size, shm.slot_bytes);
  const std::string prefix =
      "minidl/shm/" + (options.group_name.empty() ? std::to_string(groups_created++) : options.group_name) + "/";
  const std::string who = "ProcessGroupShm: rank " + std::to_string(rank) + " of " + std::to_string(size);

  // 1. One host: the same id on every rank.
  const std::vector<std::string> ids =
      rank_host_ids(store, rank, size, prefix, options.timeout, shm.host_id);
  for (int r = 1; r < size; ++r)
    if (ids[static_cast<size_t>(r)] != ids[0])
      throw std::runtime_error(who + ": rank " + std::to_string(r) + " runs on another host than rank 0 (" +
                               ids[static_cast<size_t>(r)] + " vs " + ids[0] +
                               "); shared memory needs every rank on one host (use the hierarchical or gloo backend)");

  // 2. Rank 0 creates the segment and publishes its name; the others open it.
  int fd = -1;
  try {
    if (rank == 0) {
      for (int attempt = 0; fd < 0; ++attempt) {
        im.name = kShmNamePrefix + random_hex(8);
        fd = ::shm_open(im.name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd < 0 && (errno != EEXIST || attempt == 8))
          throw std::runtime_error("cannot create shared memory " + im.name + ": " + std::strerror(errno));
      }
      if (::ftruncate(fd, static_cast<off_t>(im.bytes)) != 0)
        throw std::runtime_error("cannot size shared memory " + im.name + " to " + std::to_string(im.bytes) +
                                 " bytes: " + std::strerror(errno) + " (is /dev/shm full?)");
    } else {
      store.wait({prefix + "name"}, options.timeout);
      im.name = store.get(prefix + "name");
      fd = ::shm_open(im.name.c_str(), O_RDWR, 0600);
      if (fd < 0) throw std::runtime_error("cannot open shared memory " + im.name + ": " + std::strerror(errno));
      struct stat st {};
      if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != im.bytes)
        throw std::runtime_error("shared memory " + im.name + " has " + std::to_string(st.st_size) +
                                 " bytes, expected " + std::to_string(im.bytes) + " (different slot_bytes?)");
    }
    im.base = ::mmap(nullptr, im.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (im.base == MAP_FAILED) {
      im.base = nullptr;
      throw std::runtime_error("cannot map shared memory " + im.name + ": " + std::strerror(errno));
    }
    ::close(fd);
    fd = -1;
    im.header = static_cast<Header*>(im.base);
    im.ranks = reinterpret_cast<RankState*>(static_cast<char*>(im.base) + sizeof(Header));
    im.data = static_cast<char*>(im.base) + data_offset(size);
    if (rank == 0) {
      im.header->magic = kMagic;
      im.header->world = size;
      im.header->slot_bytes = shm.slot_bytes;
      store.set(prefix + "name", im.name);
    } else if (im.header->magic != kMagic || im.header->world != size || im.header->slot_bytes != shm.slot_bytes) {
      throw std::runtime_error("shared memory " + im.name + " was made for another group");
    }
    im.ranks[rank].pid.store(static_cast<int32_t>(::getpid()), std::memory_order_release);

    // 3. Once every rank has mapped it, the name can go: the mappings keep the memory alive.
    store.set(prefix + "mapped/" + std::to_string(rank), "");
    std::vector<std::string> mapped;
    for (int r = 0; r < size; ++r) mapped.push_back(prefix + "mapped/" + std::to_string(r));
    store.wait(mapped, options.timeout);
    if (rank == 0) ::shm_unlink(im.name.c_str());
  } catch (const std::exception& e) {
    if (fd >= 0) ::close(fd);
    if (rank == 0 && !im.name.empty()) ::shm_unlink(im.name.c_str());
    im.unmap();
    throw std::runtime_error(who + " could not set up shared memory with the other ranks within " +
                             std::to_string(options.timeout.count()) + " ms: " + e.what());
  }
  im.worker = std::thread([&im] { im.loop(); });
}

ProcessGroupShm::~ProcessGroupShm() {
  {
    std::lock_guard<std::mutex> lock(impl_->queue_mutex);
    impl_->stopping = true;
  }
  impl_->queue_cv.notify_all();
  if (impl_->worker.joinable()) impl_->worker.join();  // runs what is still queued
  impl_->unmap();
}

int64_t ProcessGroupShm::sequence_number() const { return impl_->seq; }

bool ProcessGroupShm::is_broken() const { return impl_->broken; }

const std::string& ProcessGroupShm::segment_name() const { return impl_->name; }

std::shared_ptr<Work> ProcessGroupShm::all_reduce_async(Tensor& t, ReduceOp op) {
  CollectiveDesc desc = kChecks.all_reduce(t, op);
  const auto n = static_cast<size_t>(t.numel());
  // Every rank's tensor is in a symmetric buffer, or none is (debug mode compares "symmetric").
  std::optional<std::pair<SymmetricBuffer, size_t>> found;
  if (n > 0 && t.is_contiguous() && !is_half(t.dtype()))  // (16-bit floats are reduced in a float32 copy)
    found = impl_->find_symmetric(static_cast<const char*>(t.raw_data()), n * element_size(t.dtype()));
  if (found) desc.extra += " symmetric";
  return impl_->issue(desc, [this, t, op, n, found]() mutable {
    if (n == 0) return;
    if (found) return impl_->all_reduce_symmetric(found->first, found->second, t.dtype(), n, op);
    Tensor buf = reduction_buffer(t);  // 16-bit floats: summed in float32
    impl_->all_reduce(static_cast<char*>(buf.raw_data()), buf.dtype(), n, op);
    if (!buf.is_same(t)) t.copy_(buf);  // (rounded once)
  });
}

Tensor ProcessGroupShm::empty_symmetric(const Shape& shape, DType dtype, Device device) {
  if (!device.is_cpu())
    throw std::invalid_argument("ProcessGroupShm::empty_symmetric: shared memory holds CPU tensors, not " +
                                device.str());
  Tensor out;
  impl_->issue(CollectiveDesc{"empty_symmetric", dtype_name(dtype), shape_str(shape), ""},
               [this, &out, shape, dtype] { out = impl_->allocate_symmetric(shape, dtype); })
      ->wait();
  return out.defined() ? out : zeros(shape, dtype);
}

std::shared_ptr<Work> ProcessGroupShm::broadcast_async(Tensor& t, int root) {
  const CollectiveDesc desc = kChecks.broadcast(t, root, size_);
  return impl_->issue(desc, [this, t, root]() mutable {
    if (t.numel() == 0) return;
    Tensor buf = t.is_contiguous() ? t : t.contiguous();
    impl_->broadcast(static_cast<char*>(buf.raw_data()), static_cast<size_t>(buf.numel()) * element_size(buf.dtype()),
                     root);
    if (!buf.is_same(t)) t.copy_(buf);
  });
}

std::shared_ptr<Work> ProcessGroupShm::all_gather_async(const Tensor& t, std::vector<Tensor>& out) {
  const CollectiveDesc desc = kChecks.all_gather(t);
  return impl_->issue(desc, [this, t, result = &out] { impl_->all_gather(t.contiguous(), *result); });
}

std::shared_ptr<Work> ProcessGroupShm::reduce_scatter_async(const Tensor& input, Tensor& out, ReduceOp op) {
  const CollectiveDesc desc = kChecks.reduce_scatter(input, out, op, size_);
  return impl_->issue(desc, [this, input, out, op]() mutable {
    // all_reduce a copy of the whole input, keep this rank's slab.
    Tensor reduced = reduction_buffer(input);
    if (reduced.is_same(input)) reduced = input.clone();
    if (reduced.numel() > 0)
      impl_->all_reduce(static_cast<char*>(reduced.raw_data()), reduced.dtype(), static_cast<size_t>(reduced.numel()),
                        op);
    const int64_t n = out.dim() == 0 ? 0 : out.size(0);
    out.copy_(reduced.narrow(0, rank_ * n, n));
  });
}

std::shared_ptr<Work> ProcessGroupShm::barrier_async() {
  return impl_->issue(CollectiveDesc{"barrier", "", "[]", ""}, [this] { impl_->barrier(); });
}

}  // namespace minidl::dist
