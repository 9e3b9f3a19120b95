// dist/process_group_gloo.h — ProcessGroupGloo: collectives on CPU tensors through Gloo's TCP
// transport (Debian's libgloo), with rendezvous through our TCPStore.
//
//   TCPStore store("127.0.0.1", {.port = port, .is_server = rank == 0, .timeout = 30s});
//   ProcessGroupGloo pg(store, rank, world_size, {.timeout = std::chrono::seconds(30)});
//   pg.all_reduce(grad);                        // sum over ranks, in place
//   auto work = pg.all_reduce_async(bucket);    // returns at once; runs on the group's thread
//   ...                                          // (more backward work here)
//   work->wait();                                // rethrows the collective's error
//
// How it works:
//  - Rendezvous: each rank opens a Gloo TCP device on the address of its interface that routes
//    to the store's host (MASTER_ADDR; 127.0.0.1 in tests; GLOO_SOCKET_IFNAME names an
//    interface instead), publishes its address in the store, and connects to every other rank
//    (gloo::rendezvous::Context::connectFullMesh over a gloo::rendezvous::Store adapter).
//  - One communication thread per group runs the collectives one at a time, in FIFO order.
//    Gloo calls block, so *_async enqueues and returns a Work; since every rank enqueues in its
//    program order, every rank runs the same sequence — and DDP can overlap all-reduce with
//    backward. Collective number N (from 1) is the N-th call on this group.
//  - Every Gloo call carries options.timeout and the collective number as its tag. A timeout or
//    I/O error becomes std::runtime_error "all_reduce #17 (float32[1024]) timed out after
//    5000 ms: a rank did not arrive (<gloo's message>)". The group is then broken: every later
//    call throws at once, saying so (the ranks are out of step; there is no recovery).
//  - Debug mode (ProcessGroupOptions::debug or MINIDL_DIST_DEBUG=1): before enqueueing, the
//    calling thread publishes "seq=N op=... dtype=... shape=[...]" under a key per (N, rank) in
//    the store, through the group's own store connection, reads every rank's, and throws naming
//    the first rank whose fingerprint differs from rank 0's.
//  - reduce_scatter is an all_reduce of a copy of the input followed by taking this rank's slab:
//    it moves size() times more data than a ring reduce-scatter, but is simple and exact.
//  - all_gather first gathers every rank's (rows, row size, dtype), then the data (allgatherv),
//    so ranks may contribute different numbers of rows.
// dtypes: float32, float64, int64, uint8. AVG needs a floating dtype (sum, then divide).
// Tensors must be on the CPU; a non-contiguous one is reduced through a contiguous copy.
// The destructor runs what is still queued (each bounded by the timeout) and joins the thread.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "minidl/dist/process_group.h"
#include "minidl/dist/store.h"

namespace minidl::dist {

class ProcessGroupGloo : public ProcessGroup {
 public:
  // Connects to every other rank (at most options.timeout). store: the rendezvous store; it is
  // used only during construction (debug mode opens its own connection to the same server).
  ProcessGroupGloo(TCPStore& store, int rank, int size, ProcessGroupOptions options = {});
  ~ProcessGroupGloo() override;

  std::string backend_name() const override { return "gloo"; }

  std::shared_ptr<Work> all_reduce_async(Tensor& t, ReduceOp op = ReduceOp::SUM) override;
  std::shared_ptr<Work> broadcast_async(Tensor& t, int root) override;
  std::shared_ptr<Work> all_gather_async(const Tensor& t, std::vector<Tensor>& out) override;
  std::shared_ptr<Work> reduce_scatter_async(const Tensor& input, Tensor& out, ReduceOp op = ReduceOp::SUM) override;
  std::shared_ptr<Work> barrier_async() override;

  // Collectives issued so far on this group (the last one's number).
  int64_t sequence_number() const;
  // Whether an earlier collective failed (every later call throws).
  bool is_broken() const;
  const ProcessGroupOptions& options() const { return options_; }

 private:
  struct Impl;
  ProcessGroupOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace minidl::dist
