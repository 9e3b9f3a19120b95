// dist/cuda/work_nccl.h — the Work of a ProcessGroupNCCL collective and how one is launched
// (private to dist/cuda/): launch() orders the collective after the compute stream's work on the
// communication stream and hands its completion event to the group's watchdog; WorkNCCL::wait()
// makes the compute stream wait for that event, with no host round trip.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "minidl/dist/cuda/nccl_group_state.h"
#include "minidl/dist/process_group.h"

namespace minidl::dist::nccl_detail {

struct CudaEvent;

// wait() makes the compute stream wait for the collective's completion event and returns at once
// (PyTorch's WorkNCCL::wait -> synchronizeStream): no host round trip per gradient bucket. The
// group's watchdog turns a timeout or an NCCL error into a broken group, which the next wait()
// or collective reports. A result bound for a CPU tensor (staged) is waited for on the host.
// Dropped unwaited, it marks its tensors' blocks as in use by the communication stream.
class WorkNCCL : public Work {
 public:
  WorkNCCL(std::shared_ptr<ProcessGroupNCCL::Impl> pg, std::string what, std::shared_ptr<const CudaEvent> done,
           std::vector<Tensor> keep_alive, std::function<void()> finish, bool host_result);
  ~WorkNCCL() override;
  bool is_completed() override;
  void wait() override;
  // Blocks the host until the collective has run (the watchdog bounds this by the timeout:
  // it aborts the communicator, which completes the event), then throws if the group broke.
  void synchronize();

 private:
  void throw_if_broken();

  std::shared_ptr<ProcessGroupNCCL::Impl> pg_;
  std::string what_;
  std::shared_ptr<const CudaEvent> done_;
  std::vector<Tensor> keep_;
  std::function<void()> finish_;
  bool host_result_ = false;
  bool waited_ = false;  // wait() has ordered the compute stream after the collective
};

// A collective with no elements on any rank: after the argument checks it is complete at once,
// without a call into NCCL (as PyTorch's ProcessGroupNCCL does for numel 0).
class CompletedWork : public Work {
 public:
  void wait() override {}
  bool is_completed() override { return true; }
};

// Runs `enqueue` on the communication stream after everything queued on the compute stream, and
// hands the completion event to the watchdog. host_result: the result lands in a CPU tensor.
std::shared_ptr<WorkNCCL> launch(const std::shared_ptr<ProcessGroupNCCL::Impl>& pg, const std::string& what,
                                 std::vector<Tensor> keep, const std::function<void()>& enqueue,
                                 std::function<void()> finish = {}, bool host_result = false);

// "all_reduce #7 (float32[4] on cuda:0)": a collective's name in messages.
std::string describe(const char* op, int64_t seq, const Tensor& t);

// Debug mode: every rank's fingerprint of collective #seq, gathered with one small blocking
// ncclAllGather before the collective is enqueued; a mismatch breaks the group with a message
// naming both calls (dist/process_group.h; the encoding: dist/cuda/fingerprint.h).
void check_fingerprint(const std::shared_ptr<ProcessGroupNCCL::Impl>& pg, int64_t seq, const CollectiveDesc& desc);

// The tensor NCCL works on: t itself when it is contiguous on the group's device, else a device copy.
Tensor on_device(const Tensor& t, int device, const char* op);

}  // namespace minidl::dist::nccl_detail
