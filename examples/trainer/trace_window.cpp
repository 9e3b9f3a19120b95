// examples/trainer/trace_window.cpp — the step window of `train --trace` (see trace_window.h).
#include "examples/trainer/trace_window.h"

#include <charconv>

#include "examples/trainer/config.h"
#include "minidl/autograd/trace.h"
#include "minidl/dist/trace_file.h"

namespace trainer {

namespace trace = minidl::autograd::trace;

std::string step_window_error(const std::string& text) {
  const size_t colon = text.find(':');
  int64_t a = 0, b = 0;
  auto number = [](std::string_view s, int64_t& v) {
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    return !s.empty() && ec == std::errc() && end == s.data() + s.size();
  };
  if (colon == std::string::npos || !number(std::string_view(text).substr(0, colon), a) ||
      !number(std::string_view(text).substr(colon + 1), b) || a < 1 || b < a)
    return "must be A:B, the first and last global step to trace with 1 <= A <= B, got '" + text + "'";
  return "";
}

StepWindow parse_step_window(const std::string& text) {
  if (const std::string error = step_window_error(text); !error.empty()) throw ConfigError("--trace-steps: " + error);
  const size_t colon = text.find(':');
  return {.first = std::stoll(text.substr(0, colon)), .last = std::stoll(text.substr(colon + 1))};
}

TraceWindow::TraceWindow(const std::optional<std::string>& path, const std::string& steps)
    : path_(path), window_(parse_step_window(steps)) {
  if (path_ && window_.first == 1) step_done(0);
}

void TraceWindow::step_done(int64_t step) {
  if (!path_ || written_) return;
  const int64_t now = trace::now_ns();
  if (on_) trace::span("step " + std::to_string(step), trace::kStep, step_begin_ns_, now);
  if (step + 1 == window_.first && !on_) {
    trace::enable(true);
    on_ = true;
  }
  step_begin_ns_ = trace::now_ns();
  if (step >= window_.last) write();
}

void TraceWindow::finish() {
  if (path_ && !written_) write();
}

void TraceWindow::write() {
  minidl::dist::write_trace(*path_);
  on_ = false;
  written_ = true;
}

}  // namespace trainer
