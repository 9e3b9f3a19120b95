// dist/host_staging.h — HostStagedProcessGroup: a CPU-only backend (Gloo) used with CUDA tensors.
//
// Each collective on a CUDA tensor copies it to host memory, runs the wrapped group's collective
// on that copy, and copies the result back into the CUDA tensor when the Work is waited on (or
// found completed); CPU tensors go straight through. This is how two ranks share one GPU (NCCL
// refuses two ranks on one device) and how a machine without NCCL still trains on its GPUs — at
// the price of a device-to-host and a host-to-device copy per collective, and no overlap of those
// copies with compute. The "gloo" backend is always wrapped this way.
//
//   auto pg = std::make_unique<HostStagedProcessGroup>(std::make_unique<ProcessGroupGloo>(store, r, n));
//   pg->all_reduce(cuda_grad);   // staged through the host; cuda_grad holds the sum afterwards
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "minidl/dist/process_group.h"

namespace minidl::dist {

class HostStagedProcessGroup : public ProcessGroup {
 public:
  explicit HostStagedProcessGroup(std::unique_ptr<ProcessGroup> inner);

  std::string backend_name() const override { return inner_->backend_name(); }
  ProcessGroup& inner() { return *inner_; }

  std::shared_ptr<Work> all_reduce_async(Tensor& t, ReduceOp op = ReduceOp::SUM) override;
  // The blocking forms: the inner group's for a CPU tensor; for a CUDA one the staged *_async, waited.
  void all_reduce(Tensor& t, ReduceOp op = ReduceOp::SUM) override;
  void broadcast(Tensor& t, int root) override;
  void barrier() override { inner_->barrier(); }
  std::shared_ptr<Work> broadcast_async(Tensor& t, int root) override;
  std::shared_ptr<Work> all_gather_async(const Tensor& t, std::vector<Tensor>& out) override;
  std::shared_ptr<Work> reduce_scatter_async(const Tensor& input, Tensor& out, ReduceOp op = ReduceOp::SUM) override;
  std::shared_ptr<Work> barrier_async() override { return inner_->barrier_async(); }
  // CPU tensors come from the inner group (its symmetric memory); CUDA ones are ordinary, since
  // every collective copies them through the host anyway.
  Tensor empty_symmetric(const Shape& shape, DType dtype, Device device = Device::cpu()) override {
    return device.is_cpu() ? inner_->empty_symmetric(shape, dtype, device)
                           : ProcessGroup::empty_symmetric(shape, dtype, device);
  }

 private:
  std::unique_ptr<ProcessGroup> inner_;
};

}  // namespace minidl::dist
