// dist/host_staging.cpp — HostStagedProcessGroup: CUDA tensors through a CPU-only backend, by way
// of host copies (see host_staging.h).
#include "minidl/dist/host_staging.h"

#include <functional>
#include <mutex>
#include <stdexcept>
#include <utility>

namespace minidl::dist {
namespace {

bool on_cuda(const Tensor& t) { return t.defined() && t.device().is_cuda(); }

// The wrapped group's Work plus the copy of its host result back to the device. The copy runs
// once, on the thread that first calls wait() — or is_completed() once the collective is done —
// so the caller's CUDA device and stream are the ones used.
class StagedWork : public Work {
 public:
  StagedWork(std::shared_ptr<Work> inner, std::function<void()> copy_back)
      : inner_(std::move(inner)), copy_back_(std::move(copy_back)) {}
  void wait() override {
    inner_->wait();
    std::call_once(copied_, copy_back_);
  }
  bool is_completed() override {
    if (!inner_->is_completed()) return false;
    wait();  // rethrows the collective's error, as wait() would
    return true;
  }

 private:
  std::shared_ptr<Work> inner_;
  std::function<void()> copy_back_;
  std::once_flag copied_;
};

void same_device(const Tensor& a, const Tensor& b, const char* op) {
  if (a.defined() && b.defined() && a.device() != b.device())
    throw std::invalid_argument(std::string("ProcessGroup::") + op + ": input " + a.desc() + " and output " + b.desc() +
                                " are on different devices");
}

}  // namespace

HostStagedProcessGroup::HostStagedProcessGroup(std::unique_ptr<ProcessGroup> inner)
    : ProcessGroup(inner ? inner->rank() : 0, inner ? inner->size() : 1), inner_(std::move(inner)) {
  if (!inner_) throw std::invalid_argument("HostStagedProcessGroup: no process group to wrap");
}

std::shared_ptr<Work> HostStagedProcessGroup::all_reduce_async(Tensor& t, ReduceOp op) {
  if (!on_cuda(t)) return inner_->all_reduce_async(t, op);
  Tensor host = t.to(Device::cpu());  // waits for the kernels that wrote t
  auto work = inner_->all_reduce_async(host, op);
  return std::make_shared<StagedWork>(std::move(work), [t, host]() mutable { t.copy_(host); });
}

// CPU tensors take the inner group's blocking form; CUDA ones the staged collective above, waited.
void HostStagedProcessGroup::all_reduce(Tensor& t, ReduceOp op) {
  if (!on_cuda(t)) return inner_->all_reduce(t, op);
  all_reduce_async(t, op)->wait();
}

void HostStagedProcessGroup::broadcast(Tensor& t, int root) {
  if (!on_cuda(t)) return inner_->broadcast(t, root);
  broadcast_async(t, root)->wait();
}

std::shared_ptr<Work> HostStagedProcessGroup::broadcast_async(Tensor& t, int root) {
  if (!on_cuda(t)) return inner_->broadcast_async(t, root);
  Tensor host = t.to(Device::cpu());
  auto work = inner_->broadcast_async(host, root);
  return std::make_shared<StagedWork>(std::move(work), [t, host]() mutable { t.copy_(host); });
}

std::shared_ptr<Work> HostStagedProcessGroup::all_gather_async(const Tensor& t, std::vector<Tensor>& out) {
  if (!on_cuda(t)) return inner_->all_gather_async(t, out);
  const Device device = t.device();
  Tensor host = t.to(Device::cpu());
  auto work = inner_->all_gather_async(host, out);  // out holds host tensors until the copy-back
  return std::make_shared<StagedWork>(std::move(work), [&out, device, host] {
    (void)host;  // kept alive until the collective is done
    for (Tensor& piece : out) piece = piece.to(device);
  });
}

std::shared_ptr<Work> HostStagedProcessGroup::reduce_scatter_async(const Tensor& input, Tensor& out, ReduceOp op) {
  if (!out.defined()) throw std::invalid_argument("ProcessGroup::reduce_scatter: out is undefined");
  same_device(input, out, "reduce_scatter");
  if (!on_cuda(input)) return inner_->reduce_scatter_async(input, out, op);
  Tensor host_in = input.to(Device::cpu()), host_out = out.to(Device::cpu());
  auto work = inner_->reduce_scatter_async(host_in, host_out, op);
  return std::make_shared<StagedWork>(std::move(work), [out, host_in, host_out]() mutable {
    (void)host_in;  // kept alive until the collective is done
    out.copy_(host_out);
  });
}

}  // namespace minidl::dist
