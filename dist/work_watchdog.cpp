// dist/work_watchdog.cpp — see dist/work_watchdog.h.
#include "minidl/dist/work_watchdog.h"

#include <cstdio>
#include <exception>
#include <utility>

namespace minidl::dist {

WorkWatchdog::WorkWatchdog(Options options) : options_(std::move(options)), thread_([this] { loop(); }) {}

WorkWatchdog::~WorkWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void WorkWatchdog::watch(std::string what, Clock::time_point deadline, std::function<bool()> done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.empty()) return;  // the group is broken: nothing more to watch
    entries_.push_back({std::move(what), deadline, std::move(done)});
  }
  cv_.notify_all();
}

std::string WorkWatchdog::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

size_t WorkWatchdog::watched() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size() + in_look_;
}

std::string WorkWatchdog::look(std::vector<Entry>& entries) {
  if (options_.async_error) {
    std::string e = options_.async_error();
    if (!e.empty()) return e;
  }
  const Clock::time_point now = Clock::now();
  std::vector<Entry> pending;
  for (Entry& e : entries) {
    try {
      if (e.done()) continue;
    } catch (const std::exception& ex) {
      return e.what + ": " + ex.what();
    }
    if (now > e.deadline) return e.what + " timed out";
    pending.push_back(std::move(e));
  }
  entries.swap(pending);
  return "";
}

void WorkWatchdog::loop() {
  if (options_.on_start) {
    try {
      options_.on_start();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "minidl: WorkWatchdog: thread setup failed: %s\n", e.what());
    }
  }
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !entries_.empty(); });
    if (stop_) return;
    if (cv_.wait_for(lock, options_.interval, [&] { return stop_; })) return;
    std::vector<Entry> taken;
    taken.swap(entries_);
    in_look_ = taken.size();
    lock.unlock();
    const std::string reason = look(taken);
    if (!reason.empty() && options_.on_failure) {
      try {
        options_.on_failure(reason);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "minidl: WorkWatchdog: on_failure(%s) threw: %s\n", reason.c_str(), e.what());
      }
    }
    lock.lock();
    in_look_ = 0;
    if (!reason.empty()) {
      failure_ = reason;
      entries_.clear();
      continue;
    }
    // entries watched meanwhile go after the older ones
    taken.insert(taken.end(), std::make_move_iterator(entries_.begin()), std::make_move_iterator(entries_.end()));
    entries_.swap(taken);
  }
}

}  // namespace minidl::dist
