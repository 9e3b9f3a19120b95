// dist/future_work.h — FutureWork: a Work completed by a process group's communication thread
// through a std::promise (value: done; exception: the collective's error, rethrown by wait()).
#pragma once
#include <chrono>
#include <future>
#include <utility>

#include "minidl/dist/process_group.h"

namespace minidl::dist {

class FutureWork : public Work {
 public:
  explicit FutureWork(std::shared_future<void> done) : done_(std::move(done)) {}
  void wait() override { done_.get(); }
  bool is_completed() override { return done_.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }

 private:
  std::shared_future<void> done_;
};

}  // namespace minidl::dist
