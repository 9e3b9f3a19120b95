// dist/cuda/nccl_group_state.h — what a ProcessGroupNCCL shares with its Works (private to
// dist/cuda/): the communicator, its streams and watchdog, and the broken-group state
// (ProcessGroupNCCL::Impl), plus the CUDA error check and device scope both files use.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "minidl/dist/cuda/process_group_nccl.h"
#include "minidl/dist/work_watchdog.h"

namespace minidl::dist {

namespace nccl_detail {

inline void check_cuda(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw std::runtime_error(what + ": " + cudaGetErrorString(e));
}

// Makes the group's device current for a scope and restores the caller's afterwards.
class DeviceScope {
 public:
  DeviceScope(int device, const std::string& what) {
    check_cuda(cudaGetDevice(&previous_), what + ": cudaGetDevice");
    if (previous_ != device) check_cuda(cudaSetDevice(device), what + ": cudaSetDevice");
    switched_ = previous_ != device;
  }
  ~DeviceScope() {
    if (switched_ && cudaSetDevice(previous_) != cudaSuccess)
      std::fprintf(stderr, "minidl: ProcessGroupNCCL: cudaSetDevice(%d) failed restoring the device\n", previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
  bool switched_ = false;
};

}  // namespace nccl_detail

struct ProcessGroupNCCL::Impl {
  int rank = 0, size = 1, device = 0;
  ProcessGroupOptions options;
  ncclComm_t comm = nullptr;
  cudaStream_t compute = nullptr, comm_stream = nullptr;
  std::mutex mu;
  int64_t seq = 0;
  bool debug = false;  // MINIDL_DIST_DEBUG: compare each collective's fingerprint across ranks first
  bool broken = false;
  std::string broken_reason;
  // Watches every collective's completion event and the communicator's asynchronous error; on a
  // timeout or an error it aborts the communicator and breaks the group. Last: stopped and joined
  // first when the Impl goes, before the members its probes read.
  std::unique_ptr<WorkWatchdog> watchdog;

  // Polls until the communicator's pending operation (init or enqueue) has finished.
  void wait_comm_ready(const std::string& what) {
    const auto deadline = std::chrono::steady_clock::now() + options.timeout;
    for (;;) {
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm, &async);
      if (async == ncclSuccess) return;
      if (async != ncclInProgress) fail(what + ": NCCL error: " + ncclGetErrorString(async));
      if (std::chrono::steady_clock::now() > deadline)
        fail(what + " timed out after " + std::to_string(options.timeout.count()) + " ms: a rank did not arrive");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  // With mu held: aborts the communicator and marks the group broken (the first reason stays).
  void abort(const std::string& msg) {
    if (comm && !broken) {
      ncclCommAbort(comm);  // frees the communicator and unblocks any kernel still waiting for a peer
      comm = nullptr;
    }
    if (!broken) broken_reason = msg;
    broken = true;
  }

  [[noreturn]] void fail(const std::string& msg) {
    abort(msg);
    throw std::runtime_error(msg);
  }

  // The watchdog thread's look at the communicator: "" while it is healthy.
  std::string async_error() {
    std::lock_guard<std::mutex> lock(mu);
    if (!comm || broken) return "";
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm, &async);
    if (async == ncclSuccess || async == ncclInProgress) return "";
    return std::string("NCCL error on rank ") + std::to_string(rank) + ": " + ncclGetErrorString(async);
  }

  void start_watchdog() {
    watchdog = std::make_unique<WorkWatchdog>(WorkWatchdog::Options{
        .interval = std::chrono::milliseconds(2),
        // the thread's CUDA calls must use this group's device, not open a context on device 0
        .on_start =
            [d = device] { nccl_detail::check_cuda(cudaSetDevice(d), "ProcessGroupNCCL watchdog: cudaSetDevice"); },
        .async_error = [this] { return async_error(); },
        .on_failure =
            [this](const std::string& reason) {
              std::lock_guard<std::mutex> lock(mu);
              abort(reason + " (timeout " + std::to_string(options.timeout.count()) +
                    " ms; the watchdog aborted the communicator)");
            }});
  }

  void check_usable(const std::string& what) {
    if (broken)
      throw std::runtime_error(what + ": the NCCL process group is broken after an earlier failure (" + broken_reason +
                               ")");
  }

  void check_nccl(ncclResult_t r, const std::string& what) {
    if (r == ncclInProgress) {
      wait_comm_ready(what);
      return;
    }
    if (r != ncclSuccess) fail(what + ": " + ncclGetErrorString(r) + " (" + ncclGetLastError(comm) + ")");
  }
};

}  // namespace minidl::dist
