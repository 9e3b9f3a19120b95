// dist/cuda/process_group_nccl.h — ProcessGroupNCCL: the collectives of dist/process_group.h on
// CUDA tensors through NCCL, for one process per GPU.
//
//   int device = kernels::cuda::select_device_from_env();     // LOCAL_RANK % visible devices
//   ProcessGroupNCCL pg(store, rank, world_size, {.timeout = 60s});
//   auto work = pg.all_reduce_async(grad_bucket);             // queued on the communication stream
//   ...                                                       // more backward kernels (compute stream)
//   work->wait();                                             // compute stream now ordered after it
//
// How it works:
//  - Rendezvous: rank 0 makes an ncclUniqueId and publishes it in the TCPStore; every rank reads
//    it and joins with ncclCommInitRankConfig in non-blocking mode, polled against the timeout,
//    so a missing rank gives an error instead of a hang.
//  - Ordering: each collective records an event on the device's compute stream, makes the
//    communication stream wait for it (the tensor's producers are done), runs NCCL on the
//    communication stream and records a completion event. Work::wait() polls that event (and
//    ncclCommGetAsyncError) up to the timeout, then makes the compute stream wait for it.
//  - Timeout or NCCL error: ncclCommAbort, then std::runtime_error naming the collective, its
//    sequence number, the tensor and the timeout; the group is broken afterwards and every later
//    call throws at once (ranks are out of step; there is no recovery).
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
