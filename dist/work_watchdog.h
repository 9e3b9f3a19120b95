// dist/work_watchdog.h — WorkWatchdog: one thread per process group that watches its outstanding
// collectives and breaks the group when one outlives its deadline or the backend reports an
// asynchronous error — PyTorch's ProcessGroupNCCL watchdog (ncclCommWatchdog / workCleanupLoop).
// It lets Work::wait() return at once (the compute stream waits on the device, not the host)
// while a rank that never arrives still ends in an error instead of a hang.
//
//   WorkWatchdog dog({.on_start = [d] { set_device(d); },                // the thread's setup
//                     .async_error = [&] { return backend error or ""; },
//                     .on_failure = [&](const std::string& why) { abort the communicator; }});
//   dog.watch("all_reduce #3 (...) on rank 0", deadline, [event] { return event completed; });
//
// Every interval (a condition-variable wait, no busy spin), while anything is watched: the
// async_error probe (non-empty: a failure), then each entry's done probe (a probe that throws is
// a failure with its message); finished entries are dropped; an entry past its deadline is a
// failure. The first failure calls on_failure(reason) once, drops every entry and stops the
// watching: failure() returns the reason from then on, and watch() ignores new entries. Probes and
// on_failure run on the watchdog thread without its lock held. The destructor stops and joins.
// Device-independent; tested on the CPU by tests/dist/test_work_watchdog.cpp; ProcessGroupNCCL
// (dist/cuda/process_group_nccl.cpp) watches CUDA events with it.
#pragma once
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace minidl::dist {

class WorkWatchdog {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    std::chrono::milliseconds interval{2};  // between looks
    std::function<void()> on_start;  // run first on the watchdog thread (e.g. select the device)
    std::function<std::string()> async_error;  // "" while the backend is healthy
    std::function<void(const std::string& reason)> on_failure;
  };

  explicit WorkWatchdog(Options options);
  ~WorkWatchdog();
  WorkWatchdog(const WorkWatchdog&) = delete;
  WorkWatchdog& operator=(const WorkWatchdog&) = delete;

  // Watches one collective until done() returns true; `what` names it in the failure reason.
  void watch(std::string what, Clock::time_point deadline, std::function<bool()> done);
  std::string failure() const;  // "" until a failure
  size_t watched() const;  // entries not yet seen done

 private:
  struct Entry {
    std::string what;
    Clock::time_point deadline;
    std::function<bool()> done;
  };
  void loop();
  std::string look(std::vector<Entry>& entries);  // drops finished entries; a failure's reason or ""

  Options options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Entry> entries_;  // guarded by mu_, as are the three below
  size_t in_look_ = 0;  // entries taken out for the current look
  bool stop_ = false;
  std::string failure_;
  std::thread thread_;  // last: started once everything above is ready
};

}  // namespace minidl::dist
