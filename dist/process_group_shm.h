// dist/process_group_shm.h — ProcessGroupShm: collectives on CPU tensors between processes on one
// host, through one POSIX shared-memory segment that every rank maps (no sockets, no kernel
// copies: a collective is a few memcpys and a reduction loop between barriers).
//
//   TCPStore store("127.0.0.1", {.port = port, .is_server = rank == 0, .timeout = 30s});
//   ProcessGroupShm pg(store, rank, world_size, {.timeout = std::chrono::seconds(30)});
//   pg.all_reduce(grad);                        // sum over ranks, in place
//
// dist::init() builds it for backend "shm", and for "auto" when every rank is on this host (see
// distributed.h). Ranks on several hosts use it inside each host, under Gloo between the hosts
// (dist/process_group_hierarchical.h).
//
// How it works:
//  - Rendezvous through the TCPStore: every rank publishes a host id (hostname, boot id, pid
//    namespace, the /dev/shm mount); ranks on different hosts fail at construction, naming both.
//    Rank 0 creates a segment named /minidl-shm-<16 random hex digits> (O_CREAT | O_EXCL, so two
//    jobs on one host never share one), publishes the name, the others map it, and once every
//    rank has mapped it (a store barrier) rank 0 unlinks the name: a killed job leaves nothing in
//    /dev/shm. Each rank writes its pid into the segment.
//  - Barriers: a counter of arrivals and a 32-bit generation word in the segment. The last rank
//    to arrive bumps the generation; the others spin on it for up to 1 ms, yielding the core
//    between rounds of a microsecond or two (dist/shm_segment.h says why so long), then sleep in
//    futex(FUTEX_WAIT) (shared, not FUTEX_PRIVATE_FLAG: the word is in another process's mapping
//    too), waking every few ms to check the timeout and whether a rank they wait for has exited
//    (kill(pid, 0) / a zombie in /proc/<pid>/stat).
//  - all_reduce: reduce-scatter + all-gather in pieces of slot_bytes per rank (so any size goes
//    through a bounded segment, and one piece stays in cache). Rank r copies the parts of its
//    piece that other ranks reduce into its slot, all wait, rank r reduces part r over every
//    rank in rank order (rank 0 + rank 1 + ..., so every rank gets the same bits, run after run)
//    straight into its own tensor and into its slot, and the next barrier lets every rank copy
//    the other parts out. Two sets of slots alternate, so a piece's copy-out, the next piece's
//    reduction and the one after's copy-in share one barrier: pieces + 1 barriers in all.
//  - Symmetric buffers (empty_symmetric(), as PyTorch's symmetric memory): a tensor in a
//    segment of its own that every rank maps. all_reduce of one (DDP keeps its buckets there)
//    skips the slots: after one barrier rank r reduces part r over every rank's tensor, in rank
//    order, straight into every rank's tensor, and a second barrier ends it — the same bits as
//    the slot path, half its memory traffic. Every rank passes its symmetric tensor or none
//    does (debug mode compares it). No room in /dev/shm: an ordinary tensor, said once.
//  - broadcast, all_gather (ranks may contribute different first dims; a header exchange
//    first) and barrier go through the same segment between barriers. reduce_scatter of a
//    symmetric tensor (DDP's buckets under ZeroRedundancyOptimizer) reduces like its all_reduce
//    but writes only this rank's slab (`out` may be that slab, in place): the same bits, half
//    the writes; of any other tensor it is an all_reduce of a copy of the input, keeping this
//    rank's slab (as ProcessGroupGloo). all_gather_into_tensor into a symmetric tensor (the
//    parameters under ZeroRedundancyOptimizer) copies every other rank's slab straight from its
//    tensor between two barriers; into any other, it is the all_gather's copies.
//  - Failure: a rank that exits, or does not arrive within options.timeout, makes the others
//    throw std::runtime_error naming the collective, its number and the rank:
//      "all_reduce #17 (float32[1024]): rank 1 (pid 1234) exited while the others waited"
//      "all_reduce #17 (float32[1024]) timed out after 5000 ms: rank 1 did not arrive"
//    A rank that fails marks the segment, so the ranks still waiting fail at once too. The group
//    is then broken: every later call throws at once, saying so.
//  - Debug mode (ProcessGroupOptions::debug or MINIDL_DIST_DEBUG=1): ranks compare the
//    collective's fingerprint (dist/process_group.h) through the segment before running it.
//  - *_async queue the collective for the group's communication thread (asleep on a condition
//    variable while there is nothing to do) and return; Work::wait() on a collective that has not
//    started runs it, and any queued before it, on the waiting thread (Note [helping] in the
//    .cpp), so a blocking call does not pay for waking the thread. Collectives run one at a time
//    in issue order. Why a thread at all on a 2-core machine: measured with
//    `bench --nproc 2 --backend shm` (docs/benchmarks.md), running each collective inline in
//    DDP's backward hook made every bucket a point where the two ranks wait for each other, and
//    on busy cores one of them is often preempted; with the thread, backward goes on and the
//    ranks meet once per step. MLP step 2.2 ms (thread) against 3.0 ms (inline), median of 6.
// dtypes: float32, float64, int64, uint8. AVG needs a floating dtype (sum, then divide).
// Tensors must be on the CPU (dist::init wraps the group in HostStagedProcessGroup for CUDA);
// a non-contiguous one is reduced through a contiguous copy.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "minidl/dist/process_group.h"
#include "minidl/dist/store.h"

namespace minidl::dist {

struct ShmOptions {
  // Bytes per rank in each of the two slot sets: the all_reduce piece size. The segment holds
  // 2 * size * slot_bytes of data (1 MB for 2 ranks by default).
  size_t slot_bytes = 256 << 10;
  // This rank's host id for the one-host check; empty: shm_host_id(). (Tests set it to play
  // ranks on other hosts.)
  std::string host_id = "";
};

// The prefix of every segment name this backend creates ("/minidl-shm-", seen as
// /dev/shm/minidl-shm-*).
inline constexpr const char* kShmNamePrefix = "/minidl-shm-";

// This process's host identity: equal for two processes exactly when they can share a segment
// and see each other's pids (hostname, boot id, pid namespace, /dev/shm mount).
std::string shm_host_id();

// Every rank's host id, by rank: each rank publishes `mine` (empty: shm_host_id()) under
// `key_prefix` in the store and reads every other's.
std::vector<std::string> rank_host_ids(TCPStore& store, int rank, int size, const std::string& key_prefix,
                                       std::chrono::milliseconds timeout, const std::string& mine = "");

class ProcessGroupShm : public ProcessGroup {
 public:
  // Creates or maps the segment (at most options.timeout for the other ranks to arrive). store:
  // the rendezvous store; used only during construction.
  ProcessGroupShm(TCPStore& store, int rank, int size, ProcessGroupOptions options = {}, ShmOptions shm = {});
  ~ProcessGroupShm() override;

  std::string backend_name() const override { return "shm"; }

  std::shared_ptr<Work> all_reduce_async(Tensor& t, ReduceOp op = ReduceOp::SUM) override;
  // The blocking all_reduce, broadcast and barrier run on the calling thread: queued behind the
  // collectives issued before them (which the caller helps finish, Note [helping] in
  // process_group_shm_impl.h), without waking the communication thread, whose wake-up would take
  // a core from the ranks' own work on a busy machine.
  void all_reduce(Tensor& t, ReduceOp op = ReduceOp::SUM) override;
  void broadcast(Tensor& t, int root) override;
  void barrier() override;
  std::shared_ptr<Work> broadcast_async(Tensor& t, int root) override;
  std::shared_ptr<Work> all_gather_async(const Tensor& t, std::vector<Tensor>& out) override;
  std::shared_ptr<Work> reduce_scatter_async(const Tensor& input, Tensor& out, ReduceOp op = ReduceOp::SUM) override;
  std::shared_ptr<Work> barrier_async() override;
  std::shared_ptr<Work> all_gather_into_tensor_async(Tensor& out, const Tensor& input) override;
  // A tensor in a segment of its own that every rank maps (Note [symmetric buffers] in
  // shm_segment.h): all_reduce of it, or of a contiguous part of it, reduces straight between the ranks'
  // copies. Blocking; CPU only.
  Tensor empty_symmetric(const Shape& shape, DType dtype, Device device = Device::cpu()) override;

  // Collectives issued so far on this group (the last one's number).
  int64_t sequence_number() const;
  // Whether an earlier collective failed (every later call throws).
  bool is_broken() const;
  const ProcessGroupOptions& options() const { return options_; }
  // The segment's name as it was created (already unlinked once construction returns).
  const std::string& segment_name() const;

 private:
  struct Impl;
  // The async and blocking forms; wake: whether to hand the collective to the thread.
  std::shared_ptr<Work> issue_all_reduce(Tensor& t, ReduceOp op, bool wake);
  std::shared_ptr<Work> issue_broadcast(Tensor& t, int root, bool wake);
  std::shared_ptr<Work> issue_barrier(bool wake);
  ProcessGroupOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace minidl::dist
