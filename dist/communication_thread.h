// dist/communication_thread.h — CommunicationThread: the thread a CPU process group runs its
// collectives on (Gloo, and the hierarchical group), so that *_async returns at once and DDP's
// backward goes on while a bucket is reduced.
//
//   CommunicationThread thread(describe_failure);
//   std::shared_ptr<Work> w = thread.enqueue("all_reduce #3 (float32[4])", [&] { run it; }, trace);
//   w->wait();                                 // rethrows the collective's error
//
// Collectives run one at a time in the order they were enqueued. A failure breaks the thread's
// group: the Work of the failed collective and of every one queued after it throw, with the
// message describe_failure(what, error) made of the first failure ("... not run: the process
// group is broken by an earlier failure: <first message>"), and the group's issue path asks
// broken() to refuse new collectives at once. The destructor runs what is still queued, then
// joins. (The shared-memory group has its own queue: a waiting caller may run its collective
// itself there, Note [helping] in process_group_shm_impl.h.)
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "minidl/autograd/trace.h"
#include "minidl/dist/process_group.h"

namespace minidl::dist {

class CommunicationThread {
 public:
  // describe_failure(what, error): the message a failed collective's Work throws.
  using DescribeFailure = std::function<std::string(const std::string& what, const std::exception& error)>;

  explicit CommunicationThread(DescribeFailure describe_failure);
  ~CommunicationThread();
  CommunicationThread(const CommunicationThread&) = delete;
  CommunicationThread& operator=(const CommunicationThread&) = delete;

  // Queues run; trace: its Collective::launch (tracing), run on this thread.
  std::shared_ptr<Work> enqueue(std::string what, std::function<void()> run, autograd::trace::Collective trace = {});

  bool broken() const { return broken_; }
  std::string broken_reason();
  // Breaks the group from the issuing side (e.g. a failed debug-mode check); the first reason stays.
  void mark_broken(const std::string& reason);

 private:
  struct Task {
    std::string what;
    std::function<void()> run;
    std::promise<void> done;
    autograd::trace::Collective trace;
  };
  void loop();

  DescribeFailure describe_failure_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::atomic<bool> broken_{false};
  std::string broken_reason_;  // guarded by mutex_
  std::thread thread_;
};

}  // namespace minidl::dist
