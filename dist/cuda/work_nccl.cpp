// dist/cuda/work_nccl.cpp — WorkNCCL, launch() and the debug-mode fingerprint check (see
// dist/cuda/work_nccl.h). Compiled only in CUDA builds.
#include "minidl/dist/cuda/work_nccl.h"

#include <cstring>

#include "minidl/dist/cuda/fingerprint.h"
#include "minidl/kernels/cuda_api.h"

namespace minidl::dist::nccl_detail {

// A CUDA event shared by a Work and the watchdog's look at it; destroyed when both are done.
struct CudaEvent {
  cudaEvent_t event = nullptr;
  CudaEvent() { check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate"); }
  ~CudaEvent() { cudaEventDestroy(event); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  // true once the collective has run; throws on a CUDA error
  bool query(const std::string& what) const {
    const cudaError_t q = cudaEventQuery(event);
    if (q == cudaErrorNotReady) return false;
    check_cuda(q, what + ": CUDA error");
    return true;
  }
};

WorkNCCL::WorkNCCL(std::shared_ptr<ProcessGroupNCCL::Impl> pg, std::string what, std::shared_ptr<const CudaEvent> done,
                   std::vector<Tensor> keep_alive, std::function<void()> finish, bool host_result)
    : pg_(std::move(pg)),
      what_(std::move(what)),
      done_(std::move(done)),
      keep_(std::move(keep_alive)),
      finish_(std::move(finish)),
      host_result_(host_result) {}

// Dropped unwaited: NCCL may still read or write the tensors on the communication stream, so
// their blocks are marked as in use by that stream (record_stream) before they can be freed;
// the caching allocator hands them out again only once the stream has got past this point.
WorkNCCL::~WorkNCCL() {
  if (waited_ || keep_.empty()) return;
  try {
    if (done_->query(what_)) return;
    for (const Tensor& t : keep_)
      if (t.defined() && t.device().is_cuda() && t.storage())
        kernels::cuda::record_stream(t.storage()->data(), pg_->device, pg_->comm_stream);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "minidl: ProcessGroupNCCL: %s dropped unwaited: %s\n", what_.c_str(), e.what());
  }
}

// The collective has run on the device (its event has fired), waited for or not: wait() only
// orders the compute stream after it.
bool WorkNCCL::is_completed() {
  if (!done_->query(what_)) return false;
  throw_if_broken();  // an aborted collective completes too, without a result
  return true;
}

void WorkNCCL::wait() {
  if (waited_) return;
  throw_if_broken();
  if (host_result_) synchronize();
  check_cuda(cudaStreamWaitEvent(pg_->compute, done_->event, 0), what_ + ": cudaStreamWaitEvent");
  waited_ = true;
  if (finish_) finish_();
  keep_.clear();
}

void WorkNCCL::synchronize() {
  while (!done_->query(what_)) {
    throw_if_broken();
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  throw_if_broken();
}

void WorkNCCL::throw_if_broken() {
  std::lock_guard<std::mutex> lock(pg_->mu);
  if (pg_->broken)
    throw std::runtime_error(what_ + " on rank " + std::to_string(pg_->rank) + ": the NCCL process group is broken (" +
                             pg_->broken_reason + ")");
}

std::shared_ptr<WorkNCCL> launch(const std::shared_ptr<ProcessGroupNCCL::Impl>& pg, const std::string& what,
                                 std::vector<Tensor> keep, const std::function<void()>& enqueue,
                                 std::function<void()> finish, bool host_result) {
  std::lock_guard<std::mutex> lock(pg->mu);
  pg->check_usable(what);
  const DeviceScope scope(pg->device, what);
  cudaEvent_t ready;
  check_cuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), what + ": cudaEventCreate");
  auto done = std::make_shared<const CudaEvent>();
  check_cuda(cudaEventRecord(ready, pg->compute), what + ": cudaEventRecord");
  check_cuda(cudaStreamWaitEvent(pg->comm_stream, ready, 0), what + ": cudaStreamWaitEvent");
  cudaEventDestroy(ready);
  enqueue();
  check_cuda(cudaEventRecord(done->event, pg->comm_stream), what + ": cudaEventRecord");
  const std::string watched = what + " on rank " + std::to_string(pg->rank);
  pg->watchdog->watch(watched, std::chrono::steady_clock::now() + pg->options.timeout,
                      [done, watched] { return done->query(watched); });
  return std::make_shared<WorkNCCL>(pg, what, std::move(done), std::move(keep), std::move(finish), host_result);
}

std::string describe(const char* op, int64_t seq, const Tensor& t) {
  return std::string(op) + " #" + std::to_string(seq) + " (" + t.desc() + ")";
}

void check_fingerprint(const std::shared_ptr<ProcessGroupNCCL::Impl>& pg, int64_t seq, const CollectiveDesc& desc) {
  if (!pg->debug) return;
  constexpr int64_t kBytes = static_cast<int64_t>(nccl_debug::kFingerprintBytes);
  const nccl_debug::Encoded mine = nccl_debug::encode(desc.fingerprint(seq));
  Tensor host(Shape{kBytes}, DType::UInt8);
  std::memcpy(host.raw_data(), mine.data(), mine.size());
  Tensor send = host.to(Device::cuda(pg->device));
  Tensor all(Shape{static_cast<int64_t>(pg->size), kBytes}, DType::UInt8, Device::cuda(pg->device));
  const std::string what =
      "MINIDL_DIST_DEBUG fingerprint of collective #" + std::to_string(seq) + " (" + desc.human() + ")";
  launch(pg, what, {send, all}, [&] {
    pg->check_nccl(ncclAllGather(send.raw_data(), all.raw_data(), static_cast<size_t>(kBytes), ncclUint8, pg->comm,
                                 pg->comm_stream),
                   what);
  })->synchronize();  // read on the host below
  const Tensor got = all.cpu();
  std::vector<nccl_debug::Encoded> per_rank(static_cast<size_t>(pg->size));
  for (int r = 0; r < pg->size; ++r)
    std::memcpy(per_rank[static_cast<size_t>(r)].data(), static_cast<const char*>(got.raw_data()) + r * kBytes,
                static_cast<size_t>(kBytes));
  const std::string msg = fingerprint_mismatch(seq, nccl_debug::decode_all(per_rank));
  if (!msg.empty()) {
    std::lock_guard<std::mutex> lock(pg->mu);
    pg->fail(msg);
  }
}

Tensor on_device(const Tensor& t, int device, const char* op) {
  if (!t.defined()) throw std::invalid_argument(std::string(op) + ": undefined tensor");
  if (t.device().is_cuda() && t.device().index != device)
    throw std::invalid_argument(std::string(op) + ": tensor on " + t.device().str() +
                                " but the NCCL group uses cuda:" + std::to_string(device));
  return t.to(Device::cuda(device)).contiguous();
}

}  // namespace minidl::dist::nccl_detail
