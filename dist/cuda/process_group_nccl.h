// dist/cuda/process_group_nccl.h — ProcessGroupNCCL: the collectives of dist/process_group.h on
// CUDA tensors through NCCL, for one process per GPU.
//
//   int device = kernels::cuda::select_device_from_env();     // LOCAL_RANK % visible devices
//   ProcessGroupNCCL pg(store, rank, world_size, {.timeout = 60s});
//   auto work = pg.all_reduce_async(grad_bucket);             // queued on the communication stream
//   ...                                                       // more backward kernels (compute stream)
//   work->wait();                                             // compute stream now ordered after it
//                                                             // (returns at once: no host wait)
//
// How it works:
//  - Rendezvous: rank 0 makes an ncclUniqueId and publishes it in the TCPStore; every rank reads
//    it and joins with ncclCommInitRankConfig in non-blocking mode, polled against the timeout,
//    so a missing rank gives an error instead of a hang.
//  - Ordering: each collective records an event on the device's compute stream, makes the
//    communication stream wait for it (the tensor's producers are done), runs NCCL on the
//    communication stream and records a completion event. Work::wait() makes the compute stream
//    wait for that event (cudaStreamWaitEvent) and returns: kernels queued afterwards see the
//    result, and the host never drains the GPU per gradient bucket (PyTorch's WorkNCCL::wait).
//    The host does wait where it reads the result itself: staged CPU tensors, barrier(), and the
//    row counts of all_gather and the debug-mode fingerprints.
//  - A Work dropped before wait() marks its tensors' blocks as used by the communication stream
//    (kernels::cuda::record_stream), so the caching allocator does not hand them to new tensors
//    while NCCL may still read or write them.
//  - Watchdog (dist/work_watchdog.h, one thread per group, on the group's device): every 2 ms
//    it looks at the outstanding collectives' events and at ncclCommGetAsyncError. A collective
//    past the timeout, or an NCCL error: ncclCommAbort (which also ends the kernels waiting for
//    a peer) and the group is broken; the next wait(), is_completed() or collective throws
//    std::runtime_error naming the collective, its sequence number, the tensor, the rank and the
//    timeout. Broken is final (ranks are out of step; there is no recovery).
//  - CPU tensors (all_gather_object / broadcast_object use them) are staged through the device.
//  - all_gather allows different first dims (gathers the row counts first, pads to the longest);
//    AVG needs a floating dtype. dtypes: float32, float64, int64, uint8.
//  - Zero elements (an empty tensor; all_gather of empty rows on every rank): after the argument
//    checks, a completed Work and no NCCL call.
//  - Teardown: destruction (dist::shutdown()) finalizes, then destroys the communicator. A group
//    still alive at exit() (no shutdown) is aborted with a warning by an exit handler that runs
//    before the CUDA runtime's teardown, instead of being finalized during static destruction.
// Debug mode (MINIDL_DIST_DEBUG): each collective's fingerprint (dist/process_group.h) is first
// all-gathered and compared, as in the Gloo group (the encoding: dist/cuda/fingerprint.h).
// Registered as backend "nccl" with dist::register_backend. Tested by
// tests/dist/test_process_group_nccl.cpp (world size 1; skipped without a device) and by
// tools/gpu_check.sh.
#pragma once
#include <memory>
#include <string>

#include "minidl/dist/process_group.h"
#include "minidl/dist/store.h"

namespace minidl::dist {

class ProcessGroupNCCL : public ProcessGroup {
 public:
  // device < 0: kernels::cuda::select_device_from_env(). Blocks until every rank has joined (at
  // most options.timeout).
  ProcessGroupNCCL(TCPStore& store, int rank, int size, ProcessGroupOptions options = {}, int device = -1);
  ~ProcessGroupNCCL() override;

  std::string backend_name() const override { return "nccl"; }
  int device() const;

  std::shared_ptr<Work> all_reduce_async(Tensor& t, ReduceOp op = ReduceOp::SUM) override;
  std::shared_ptr<Work> broadcast_async(Tensor& t, int root) override;
  std::shared_ptr<Work> all_gather_async(const Tensor& t, std::vector<Tensor>& out) override;
  std::shared_ptr<Work> reduce_scatter_async(const Tensor& input, Tensor& out, ReduceOp op = ReduceOp::SUM) override;
  std::shared_ptr<Work> barrier_async() override;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace minidl::dist
