// dist/cuda/process_group_nccl.cpp — see dist/cuda/process_group_nccl.h. Compiled only in CUDA
// builds (the CMake filter keeps /cuda/ paths out of CPU-only builds). Compiled here without a
// GPU; run by tools/gpu_check.sh and tests/dist/test_process_group_nccl.cpp on a GPU machine.
#include "minidl/dist/cuda/process_group_nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

#include "minidl/dist/cuda/nccl_group_state.h"
#include "minidl/dist/cuda/work_nccl.h"
#include "minidl/dist/distributed.h"
#include "minidl/kernels/cuda_api.h"
#include "minidl/tensor/creation.h"

extern "C" {
// Referenced with --undefined by the link line (CMakeLists.txt) so this object, and with it the
// "nccl" backend registration below, is always linked from the static library.
int minidl_nccl_backend_anchor = 0;
}

namespace minidl::dist {

using nccl_detail::check_fingerprint;
using nccl_detail::CompletedWork;
using nccl_detail::describe;
using nccl_detail::DeviceScope;
using nccl_detail::launch;
using nccl_detail::on_device;

namespace {

ncclDataType_t nccl_type(DType t, const char* op) {
  switch (t) {
    case DType::Float32:
      return ncclFloat32;
    case DType::Float64:
      return ncclFloat64;
    case DType::Int64:
      return ncclInt64;
    case DType::UInt8:
      return ncclUint8;
    case DType::BFloat16:
      return ncclBfloat16;
    case DType::Float16:
      return ncclFloat16;
  }
  throw std::invalid_argument(std::string(op) + ": unsupported dtype for NCCL");
}

ncclRedOp_t nccl_op(ReduceOp op, DType t, const char* name) {
  switch (op) {
    case ReduceOp::SUM:
      return ncclSum;
    case ReduceOp::AVG:
      if (!is_floating(t))
        throw std::invalid_argument(std::string(name) + ": AVG needs a floating dtype, got " + dtype_name(t));
      return ncclAvg;
    case ReduceOp::MAX:
      return ncclMax;
    case ReduceOp::MIN:
      return ncclMin;
  }
  throw std::invalid_argument(std::string(name) + ": unknown reduce op");
}

}  // namespace

namespace {

// The groups alive in this process, for abort_groups_at_exit. Never destroyed on purpose: a group
// held by a static (dist's default group) is destroyed after this file's statics would be.
struct LiveGroups {
  std::mutex mu;
  std::set<ProcessGroupNCCL::Impl*> groups;
};
LiveGroups& live_groups() {
  static auto* live = new LiveGroups;
  return *live;
}

// Registered with std::atexit by the first group, after the CUDA runtime was initialised, so it
// runs before the runtime's own teardown and before static destruction. A group still alive here
// was not shut down (dist::shutdown(), or destroyed before exit): its destructor would run during
// static destruction, possibly after the CUDA runtime is gone, and a finalize can wait the whole
// timeout for peers that left. Instead, as PyTorch's ProcessGroupNCCL destructor does for a group
// that was not destroyed, warn and abort the communicator; the destructor then has nothing left.
void abort_groups_at_exit() {
  LiveGroups& live = live_groups();
  std::lock_guard<std::mutex> lock(live.mu);
  for (ProcessGroupNCCL::Impl* im : live.groups) {
    im->watchdog.reset();  // joined first (without im->mu, which its failure path takes): no
        // event queries once the CUDA runtime starts unloading
    std::lock_guard<std::mutex> group_lock(im->mu);
    if (!im->comm) continue;
    std::fprintf(stderr,
                 "minidl: warning: ProcessGroupNCCL (rank %d of %d) was not shut down before exit; aborting its NCCL "
                 "communicator (call dist::shutdown() before exit to finish pending collectives)\n",
                 im->rank, im->size);
    ncclCommAbort(im->comm);
    im->comm = nullptr;
  }
}

}  // namespace

ProcessGroupNCCL::ProcessGroupNCCL(TCPStore& store, int rank, int size, ProcessGroupOptions options, int device)
    : ProcessGroup(rank, size), impl_(std::make_shared<Impl>()) {
  static int instance = 0;  // groups are created in the same order on every rank
  const std::string key = "minidl/nccl/unique_id/" + std::to_string(instance++);
  impl_->rank = rank;
  impl_->size = size;
  impl_->options = options;
  impl_->debug = debug_mode(options);
  impl_->device = device >= 0 ? device : kernels::cuda::select_device_from_env();
  kernels::cuda::set_device(impl_->device);
  impl_->compute = static_cast<cudaStream_t>(kernels::cuda::compute_stream(impl_->device));
  impl_->comm_stream = static_cast<cudaStream_t>(kernels::cuda::communication_stream(impl_->device));
  ncclUniqueId id;
  if (rank == 0) {
    if (ncclGetUniqueId(&id) != ncclSuccess) throw std::runtime_error("ProcessGroupNCCL: ncclGetUniqueId failed");
    store.set(key, std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
  } else {
    const std::string bytes = store.get(key);
    if (bytes.size() != sizeof(id))
      throw std::runtime_error("ProcessGroupNCCL: malformed ncclUniqueId in the store under " + key);
    std::memcpy(&id, bytes.data(), sizeof(id));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // init and calls return at once; we poll against the timeout
  const ncclResult_t r = ncclCommInitRankConfig(&impl_->comm, size, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress)
    throw std::runtime_error(std::string("ProcessGroupNCCL: ncclCommInitRankConfig failed on rank ") +
                             std::to_string(rank) + ": " + ncclGetErrorString(r));
  impl_->wait_comm_ready("ProcessGroupNCCL init (rank " + std::to_string(rank) + " of " + std::to_string(size) + ")");
  impl_->start_watchdog();
  static std::once_flag at_exit;
  std::call_once(at_exit, [] { std::atexit(abort_groups_at_exit); });
  std::lock_guard<std::mutex> lock(live_groups().mu);
  live_groups().groups.insert(impl_.get());
}

// Finalize (flushes the communicator's outstanding work; polled, as the communicator is
// non-blocking), then destroy, and clear the handle; an aborted (broken) group has none left.
// A destructor cannot throw: failures are reported on stderr, and abort replaces destroy. A group
// still alive at exit() was aborted by abort_groups_at_exit first and returns at once here.
ProcessGroupNCCL::~ProcessGroupNCCL() {
  {
    std::lock_guard<std::mutex> live_lock(live_groups().mu);
    live_groups().groups.erase(impl_.get());
  }
  Impl& im = *impl_;
  std::lock_guard<std::mutex> lock(im.mu);
  if (!im.comm) return;
  auto report = [](const std::string& what) { std::fprintf(stderr, "minidl: ProcessGroupNCCL: %s\n", what.c_str()); };
  try {
    const DeviceScope scope(im.device, "ProcessGroupNCCL teardown");
    const cudaError_t e = cudaStreamSynchronize(im.comm_stream);
    if (e != cudaSuccess) report(std::string("cudaStreamSynchronize before finalize: ") + cudaGetErrorString(e));
    ncclResult_t r = ncclCommFinalize(im.comm);
    const auto deadline = std::chrono::steady_clock::now() + im.options.timeout;
    while (r == ncclInProgress || r == ncclSuccess) {
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(im.comm, &async);
      if (async != ncclInProgress) {
        r = async;
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        r = ncclInProgress;
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (r == ncclSuccess) {
      const ncclResult_t d = ncclCommDestroy(im.comm);
      if (d != ncclSuccess) report(std::string("ncclCommDestroy: ") + ncclGetErrorString(d));
    } else {
      report(std::string("ncclCommFinalize did not complete (") +
             (r == ncclInProgress ? "timed out" : ncclGetErrorString(r)) + "): aborting the communicator");
      ncclCommAbort(im.comm);
    }
  } catch (const std::exception& e) {
    report(e.what());
  }
  im.comm = nullptr;
}

int ProcessGroupNCCL::device() const { return impl_->device; }

std::shared_ptr<Work> ProcessGroupNCCL::all_reduce_async(Tensor& t, ReduceOp op) {
  const std::string what = describe("all_reduce", ++impl_->seq, t);
  const ncclRedOp_t rop = nccl_op(op, t.dtype(), "all_reduce");
  check_fingerprint(
      impl_, impl_->seq,
      {"all_reduce", dtype_name(t.dtype()), shape_str(t.shape()), std::string("op=") + reduce_op_name(op)});
  Tensor d = on_device(t, impl_->device, "all_reduce");
  if (d.numel() == 0) return std::make_shared<CompletedWork>();
  auto impl = impl_;
  std::function<void()> finish;
  if (!d.is_same(t)) finish = [t, d]() mutable { t.copy_(d); };  // staged: write back
  return launch(
      impl, what, {t, d},
      [&] {
        impl->check_nccl(ncclAllReduce(d.raw_data(), d.raw_data(), static_cast<size_t>(d.numel()),
                                       nccl_type(d.dtype(), "all_reduce"), rop, impl->comm, impl->comm_stream),
                         what);
      },
      finish, /*host_result=*/!t.device().is_cuda());
}

std::shared_ptr<Work> ProcessGroupNCCL::broadcast_async(Tensor& t, int root) {
  const std::string what = describe("broadcast", ++impl_->seq, t);
  if (root < 0 || root >= size_) throw std::invalid_argument(what + ": root " + std::to_string(root) + " out of range");
  check_fingerprint(impl_, impl_->seq,
                    {"broadcast", dtype_name(t.dtype()), shape_str(t.shape()), "root=" + std::to_string(root)});
  Tensor d = on_device(t, impl_->device, "broadcast");
  if (d.numel() == 0) return std::make_shared<CompletedWork>();
  auto impl = impl_;
  std::function<void()> finish;
  if (!d.is_same(t)) finish = [t, d]() mutable { t.copy_(d); };
  return launch(
      impl, what, {t, d},
      [&] {
        impl->check_nccl(ncclBroadcast(d.raw_data(), d.raw_data(), static_cast<size_t>(d.numel()),
                                       nccl_type(d.dtype(), "broadcast"), root, impl->comm, impl->comm_stream),
                         what);
      },
      finish, /*host_result=*/!t.device().is_cuda());
}

std::shared_ptr<Work> ProcessGroupNCCL::all_gather_async(const Tensor& t, std::vector<Tensor>& out) {
  const std::string what = describe("all_gather", ++impl_->seq, t);
  if (t.dim() == 0) throw std::invalid_argument(what + ": expected at least a 1-d tensor");
  {
    std::string rest = shape_str(Shape(t.shape().begin() + 1, t.shape().end()));  // "[4]" -> "[*, 4]"
    rest = rest == "[]" ? "[*]" : "[*, " + rest.substr(1);
    check_fingerprint(impl_, impl_->seq, {"all_gather", dtype_name(t.dtype()), rest, ""});
  }
  Tensor d = on_device(t, impl_->device, "all_gather");
  auto impl = impl_;
  // 1. every rank's row count (a small blocking all-gather)
  Tensor rows = from_vector<int64_t>({d.size(0)}, {1}).to(Device::cuda(impl->device));
  Tensor all_rows(Shape{static_cast<int64_t>(size_)}, DType::Int64, Device::cuda(impl->device));
  launch(impl, what + " (row counts)", {rows, all_rows}, [&] {
    impl->check_nccl(ncclAllGather(rows.raw_data(), all_rows.raw_data(), 1, ncclInt64, impl->comm, impl->comm_stream),
                     what);
  })->synchronize();  // read on the host below
  const std::vector<int64_t> counts = all_rows.to_vector<int64_t>();
  int64_t longest = 0;
  for (int64_t c : counts) longest = std::max(longest, c);
  // 2. the data, padded to the longest; none at all (every rank's is empty): empty results at once
  Shape padded_shape = d.shape();
  padded_shape[0] = longest;
  if (shape_numel(padded_shape) == 0) {
    out.assign(static_cast<size_t>(size_), Tensor());
    for (int r = 0; r < size_; ++r) {
      Shape rs = padded_shape;
      rs[0] = counts[static_cast<size_t>(r)];
      out[static_cast<size_t>(r)] = Tensor(rs, d.dtype(), t.device());
    }
    return std::make_shared<CompletedWork>();
  }
  Tensor padded = d;
  if (d.size(0) != longest) {
    padded = zeros(padded_shape, d.dtype(), d.device());
    if (d.size(0) > 0) padded.narrow(0, 0, d.size(0)).copy_(d);
  }
  Shape gathered_shape = padded_shape;
  gathered_shape.insert(gathered_shape.begin(), size_);
  Tensor gathered(gathered_shape, d.dtype(), d.device());  // (size, longest, ...)
  out.assign(static_cast<size_t>(size_), Tensor());
  const Device result_device = t.device();
  std::vector<Tensor>* out_ptr = &out;
  const int n = size_;
  auto finish = [out_ptr, gathered, counts, result_device, n]() {
    for (int r = 0; r < n; ++r) (*out_ptr)[r] = gathered[r].narrow(0, 0, counts[r]).contiguous().to(result_device);
  };
  return launch(
      impl, what, {padded, gathered},
      [&] {
        impl->check_nccl(ncclAllGather(padded.raw_data(), gathered.raw_data(), static_cast<size_t>(padded.numel()),
                                       nccl_type(d.dtype(), "all_gather"), impl->comm, impl->comm_stream),
                         what);
      },
      finish, /*host_result=*/!result_device.is_cuda());
}

std::shared_ptr<Work> ProcessGroupNCCL::reduce_scatter_async(const Tensor& input, Tensor& out, ReduceOp op) {
  const std::string what = describe("reduce_scatter", ++impl_->seq, input);
  if (input.dim() == 0 || input.size(0) % size_ != 0)
    throw std::invalid_argument(what + ": the first dim must be a multiple of the world size " + std::to_string(size_));
  const ncclRedOp_t rop = nccl_op(op, input.dtype(), "reduce_scatter");
  check_fingerprint(
      impl_, impl_->seq,
      {"reduce_scatter", dtype_name(input.dtype()), shape_str(input.shape()), std::string("op=") + reduce_op_name(op)});
  Tensor d = on_device(input, impl_->device, "reduce_scatter");
  Shape os = d.shape();
  os[0] /= size_;
  if (!out.defined() || out.shape() != os || out.dtype() != d.dtype()) out = Tensor(os, d.dtype(), input.device());
  if (d.numel() == 0) return std::make_shared<CompletedWork>();
  Tensor od = out.device().is_cuda() && out.is_contiguous() ? out : Tensor(os, d.dtype(), d.device());
  auto impl = impl_;
  std::function<void()> finish;
  if (!od.is_same(out)) finish = [out, od]() mutable { out.copy_(od); };
  return launch(
      impl, what, {d, od, out},
      [&] {
        impl->check_nccl(ncclReduceScatter(d.raw_data(), od.raw_data(), static_cast<size_t>(od.numel()),
                                           nccl_type(d.dtype(), "reduce_scatter"), rop, impl->comm, impl->comm_stream),
                         what);
      },
      finish, /*host_result=*/!out.device().is_cuda());
}

std::shared_ptr<Work> ProcessGroupNCCL::barrier_async() {
  Tensor one = ones({1}, DType::Float32, Device::cuda(impl_->device));
  const std::string what = "barrier #" + std::to_string(++impl_->seq);
  check_fingerprint(impl_, impl_->seq, {"barrier", "", "", ""});
  auto impl = impl_;
  // a barrier orders the hosts: its wait() blocks until every rank has arrived
  return launch(
      impl, what, {one},
      [&] {
        impl->check_nccl(
            ncclAllReduce(one.raw_data(), one.raw_data(), 1, ncclFloat32, ncclSum, impl->comm, impl->comm_stream),
            what);
      },
      {}, /*host_result=*/true);
}

namespace {
const bool registered = [] {
  register_backend("nccl", [](TCPStore& store, int rank, int size, ProcessGroupOptions options) {
    return std::unique_ptr<ProcessGroup>(new ProcessGroupNCCL(store, rank, size, options));
  });
  return true;
}();
}  // namespace

}  // namespace minidl::dist
