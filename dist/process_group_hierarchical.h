// dist/process_group_hierarchical.h — ProcessGroupHierarchical: ranks on several hosts, shared
// memory inside each host and Gloo between the hosts (one connection per host, not per rank).
//
//   TCPStore store(master_addr, {.port = port, .is_server = rank == 0});
//   ProcessGroupHierarchical pg(store, rank, world_size);
//   pg.all_reduce(grad);                         // sum over every rank of every host
//
// dist::init() builds it for backend "hierarchical", and for "auto" when the ranks span several
// hosts and some host runs more than one of them (see distributed.h).
//
// How it works:
//  - Construction: every rank publishes its host id (shm_host_id(), dist/process_group_shm.h);
//    hosts are numbered by their lowest rank, a host's ranks keep their order, and the first
//    rank of each host is its leader. Each host gets a ProcessGroupShm of its ranks, and the
//    leaders a ProcessGroupGloo among themselves (both named after this group, so other groups'
//    keys never collide with theirs, although only some ranks create each), then a barrier of
//    every rank, so none tears its groups down while another still connects.
//  - all_reduce: reduce inside each host (shm), all-reduce the host sums between the leaders
//    (Gloo), broadcast the result inside each host (shm). AVG sums, then divides by the world
//    size. Sums are formed host by host, in rank order within a host, then in host order: the
//    same bits run after run for one placement of ranks (not the bits of a flat rank-order sum;
//    the deterministic mode sums through all_gather and a fixed tree of its own, so its results
//    do not depend on the transport).
//  - broadcast(root): inside root's host from root, between the leaders from root's host, then
//    inside every other host from its leader.
//  - all_gather: inside each host, then the leaders exchange their hosts' rows (and every rank's
//    first dim) and each leader hands the whole world's rows to its host; ranks may contribute
//    different first dims. reduce_scatter is an all_reduce of a copy of the input, keeping this
//    rank's slab; barrier is a barrier inside each host, between the leaders, and inside again.
//  - *_async queue the collective for the group's communication thread; collectives run one at a
//    time in issue order (the inner groups' own threads then run each step).
//  - Failure: an inner group's error (a rank that exited or did not arrive within the timeout,
//    named by that group) fails the collective with "ProcessGroupHierarchical: all_reduce #3
//    (float32[4]) failed: ..." and breaks this group: every later call throws at once. A rank of
//    another host that dies reaches the ranks of this host through their leader: its Gloo call
//    fails, and so does the broadcast the others wait in, within the timeout.
// Tensors must be on the CPU (dist::init wraps the group in HostStagedProcessGroup for CUDA).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "minidl/dist/process_group.h"
#include "minidl/dist/store.h"

namespace minidl::dist {

struct HierarchicalOptions {
  // This rank's host id; empty: shm_host_id(). (Tests set it to play ranks on other hosts.)
  std::string host_id = "";
  // Bytes per rank of each host's shared-memory slots (ShmOptions::slot_bytes).
  size_t slot_bytes = 256 << 10;
};

class ProcessGroupHierarchical : public ProcessGroup {
 public:
  // Builds the host groups and the leaders' group (at most options.timeout for the others).
  ProcessGroupHierarchical(TCPStore& store, int rank, int size, ProcessGroupOptions options = {},
                           HierarchicalOptions hierarchical = {});
  ~ProcessGroupHierarchical() override;

  std::string backend_name() const override { return "hierarchical"; }

  std::shared_ptr<Work> all_reduce_async(Tensor& t, ReduceOp op = ReduceOp::SUM) override;
  std::shared_ptr<Work> broadcast_async(Tensor& t, int root) override;
  std::shared_ptr<Work> all_gather_async(const Tensor& t, std::vector<Tensor>& out) override;
  std::shared_ptr<Work> reduce_scatter_async(const Tensor& input, Tensor& out, ReduceOp op = ReduceOp::SUM) override;
  std::shared_ptr<Work> barrier_async() override;
  // This host's shared-memory group's symmetric memory (its all-reduce inside the host then
  // reduces in place). Blocking.
  Tensor empty_symmetric(const Shape& shape, DType dtype, Device device = Device::cpu()) override;

  int num_hosts() const;
  int host() const;  // this rank's host (0 .. num_hosts() - 1)
  const std::vector<int>& ranks_of_host(int host) const;  // ascending; the first is the leader
  bool is_broken() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace minidl::dist
