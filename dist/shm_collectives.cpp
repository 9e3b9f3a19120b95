// dist/shm_collectives.cpp — ProcessGroupShm's futex barrier, which notices dead and missing
// ranks, and its collectives as copies and reductions between barriers (see
// process_group_shm.h for the algorithms and process_group_shm_impl.h for the state).
#include <linux/futex.h>
#include <sched.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "minidl/dist/process_group_shm_impl.h"
#include "minidl/tensor/creation.h"

namespace minidl::dist {

void ProcessGroupShm::Impl::fail(const std::string& message) {
  int32_t none = 0;
  header->failed_rank.compare_exchange_strong(none, rank + 1);
  futex(&header->generation, FUTEX_WAKE, INT_MAX, nullptr);  // the waiters look at failed_rank
  throw std::runtime_error(message);
}

std::vector<int> ProcessGroupShm::Impl::missing(uint32_t target) const {
  std::vector<int> out;
  for (int r = 0; r < size; ++r)
    if (static_cast<int32_t>(ranks[r].arrived.load(std::memory_order_acquire) - target) < 0) out.push_back(r);
  return out;
}

void ProcessGroupShm::Impl::check_alive(uint32_t target) {
  for (int r : missing(target)) {
    const pid_t pid = ranks[r].pid.load(std::memory_order_relaxed);
    if (process_exited(pid))
      fail(what + ": rank " + std::to_string(r) + " (pid " + std::to_string(pid) + ") exited while the others waited");
  }
}

void ProcessGroupShm::Impl::barrier() {
  const uint64_t k = ++barriers;
  const auto target = static_cast<uint32_t>(k);
  ranks[rank].arrived.store(target, std::memory_order_release);
  // The last to arrive releases everyone; its fetch_add reads every earlier arrival (a
  // release sequence), so every rank's writes before the barrier are visible after it.
  if (header->arrivals.fetch_add(1, std::memory_order_acq_rel) + 1 == k * static_cast<uint64_t>(size)) {
    header->generation.store(target, std::memory_order_seq_cst);
    if (header->sleepers.load(std::memory_order_seq_cst) > 0) futex(&header->generation, FUTEX_WAKE, INT_MAX, nullptr);
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

void ProcessGroupShm::Impl::all_reduce_one_shot(char* buf, DType dtype, size_t n, ReduceOp op) {
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

void ProcessGroupShm::Impl::all_reduce(char* buf, DType dtype, size_t n, ReduceOp op) {
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

std::optional<std::pair<SymmetricBuffer, size_t>> ProcessGroupShm::Impl::find_symmetric(const char* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(symmetric->mutex);
  for (const SymmetricBuffer& b : symmetric->buffers) {
    const char* mine = b.base + static_cast<size_t>(rank) * b.per_rank;
    if (p >= mine && p + bytes <= mine + b.per_rank) return std::make_pair(b, static_cast<size_t>(p - mine));
  }
  return std::nullopt;
}

void ProcessGroupShm::Impl::all_reduce_symmetric(const SymmetricBuffer& buffer, size_t offset, DType dtype, size_t n,
                                                 ReduceOp op) {
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

void ProcessGroupShm::Impl::reduce_scatter_symmetric(const SymmetricBuffer& buffer, size_t offset, DType dtype,
                                                     size_t n, ReduceOp op, char* out) {
  barrier();
  if (n > 0) {
    dispatch(dtype, "reduce_scatter", [&](auto zero) {
      using T = decltype(zero);
      std::vector<const T*> src(static_cast<size_t>(size));
      for (int r = 0; r < size; ++r)
        src[static_cast<size_t>(r)] =
            reinterpret_cast<const T*>(buffer.base + static_cast<size_t>(r) * buffer.per_rank + offset) +
            static_cast<size_t>(rank) * n;
      reduce_part<T>(op, size, src, {reinterpret_cast<T*>(out)}, n);
    });
  }
  barrier();  // nobody writes its tensor again while another rank still reads it
}

void ProcessGroupShm::Impl::all_gather_symmetric(const SymmetricBuffer& buffer, size_t offset, size_t slab_bytes) {
  barrier();
  char* mine = buffer.base + static_cast<size_t>(rank) * buffer.per_rank + offset;
  for (int r = 0; r < size; ++r)
    if (r != rank)
      std::memcpy(mine + static_cast<size_t>(r) * slab_bytes,
                  buffer.base + static_cast<size_t>(r) * buffer.per_rank + offset + static_cast<size_t>(r) * slab_bytes,
                  slab_bytes);
  barrier();  // nobody writes its slab again while another rank still reads it
}

void ProcessGroupShm::Impl::broadcast(char* buf, size_t bytes, int root) {
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

void ProcessGroupShm::Impl::all_gather(const Tensor& in, std::vector<Tensor>& out) {
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

void ProcessGroupShm::Impl::check_fingerprint(int64_t n, const CollectiveDesc& desc) {
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

}  // namespace minidl::dist
