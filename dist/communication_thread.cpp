// dist/communication_thread.cpp — a CPU process group's communication thread (see the header).
#include "minidl/dist/communication_thread.h"

#include <stdexcept>
#include <utility>

#include "minidl/dist/future_work.h"

namespace minidl::dist {

CommunicationThread::CommunicationThread(DescribeFailure describe_failure)
    : describe_failure_(std::move(describe_failure)), thread_([this] { loop(); }) {}

CommunicationThread::~CommunicationThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<Work> CommunicationThread::enqueue(std::string what, std::function<void()> run,
                                                   autograd::trace::Collective trace) {
  Task task{std::move(what), std::move(run), {}, std::move(trace)};
  std::shared_future<void> done = task.done.get_future().share();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return std::make_shared<FutureWork>(std::move(done));
}

std::string CommunicationThread::broken_reason() {
  std::lock_guard<std::mutex> lock(mutex_);
  return broken_reason_;
}

void CommunicationThread::mark_broken(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!broken_.exchange(true)) broken_reason_ = reason;
}

void CommunicationThread::loop() {
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    if (broken_) {
      task.done.set_exception(std::make_exception_ptr(std::runtime_error(
          task.what + " not run: the process group is broken by an earlier failure: " + broken_reason())));
      continue;
    }
    try {
      task.trace.run(task.run);
      task.done.set_value();
    } catch (const std::exception& e) {
      const std::string message = describe_failure_(task.what, e);
      mark_broken(message);
      task.done.set_exception(std::make_exception_ptr(std::runtime_error(message)));
    }
  }
}

}  // namespace minidl::dist
