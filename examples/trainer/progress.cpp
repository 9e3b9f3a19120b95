// examples/trainer/progress.cpp — the rank-0 log and progress display (see progress.h).
#include "examples/trainer/progress.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <stdexcept>

namespace trainer {

Log::Log(bool enabled, const std::string& path) : enabled_(enabled), path_(path) {
  if (!enabled_ || path.empty()) return;
  file_.open(path, std::ios::app);
  if (!file_) throw std::runtime_error("cannot open the log file " + path);
}

void Log::line(const std::string& text) {
  if (!enabled_) return;
  std::cout << text << std::endl;
  if (file_.is_open()) {
    const std::time_t now = std::time(nullptr);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
    errno = 0;
    file_ << stamp << "  " << text << std::endl;
    if (!file_)
      throw std::runtime_error("cannot write the log file " + path_ + ": " +
                               (errno != 0 ? std::strerror(errno) : "write failed"));
  }
}

std::string format(const char* spec, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, spec, v);
  return buf;
}

std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  return buf;
}

Progress::Progress(Log& log, std::string title, int64_t total, int64_t images_per_batch)
    : log_(log),
      title_(std::move(title)),
      total_(total),
      images_per_batch_(images_per_batch),
      tty_(log.enabled() && ::isatty(STDOUT_FILENO)),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

std::string Progress::status(int64_t done, double loss) const {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = elapsed > 0 ? static_cast<double>(done * images_per_batch_) / elapsed : 0.0;
  const double eta = done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total_ - done) : 0.0;
  char buf[128];
  std::snprintf(buf, sizeof buf, "%lld/%lld  loss %.4f  %.0f img/s  ETA %s", static_cast<long long>(done),
                static_cast<long long>(total_), loss, rate, format_duration(eta).c_str());
  return buf;
}

void Progress::update(int64_t done, const std::function<double()>& loss) {
  if (!log_.enabled()) return;
  if (tty_) {
    const auto now = std::chrono::steady_clock::now();
    if (done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;  // redraw 10x a second
    last_draw_ = now;
    constexpr int kWidth = 24;
    const int filled = total_ > 0 ? static_cast<int>(kWidth * done / total_) : kWidth;
    std::cout << "\r\033[K" << title_ << " [" << std::string(filled, '#') << std::string(kWidth - filled, '.') << "] "
              << status(done, loss()) << std::flush;
  } else if (done >= next_line_ || done == total_) {
    log_.line(title_ + "  " + status(done, loss()));
    next_line_ = done + std::max<int64_t>(1, total_ / 10);
  }
}

void Progress::finish() {
  if (tty_) std::cout << "\r\033[K" << std::flush;
}

}  // namespace trainer
