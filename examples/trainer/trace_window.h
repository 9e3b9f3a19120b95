// examples/trainer/trace_window.h — `train --trace FILE --trace-steps A:B`: records a Chrome
// trace (autograd/trace.h) of global steps A..B (1-based, counted over the whole run as in the
// log; default 3:4, after two warm-up steps) and writes every rank's events into FILE (rank 0
// writes; dist/trace_file.h). Each step is one "step" span from the end of the previous step's
// body, so it includes the wait for its batch. Part of the `train` example; not a library module.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace trainer {

struct StepWindow {
  int64_t first = 3, last = 4;
};
// "A:B" with 1 <= A <= B; throws ConfigError naming the flag otherwise.
StepWindow parse_step_window(const std::string& text);
// "" when `text` is a valid window, else what is wrong (a CLI11 validator's answer).
std::string step_window_error(const std::string& text);

class TraceWindow {
 public:
  // Inert without a path. Starts tracing at once when the window starts at step 1.
  TraceWindow(const std::optional<std::string>& path, const std::string& steps);
  // At the end of global step `step`'s body: records its span; starts tracing before the
  // window's first step (so its batch wait is in), stops and writes the file after its last
  // (a collective: every rank reaches the same steps).
  void step_done(int64_t step);
  // After training: writes the file if the window was not closed yet (a collective).
  void finish();

 private:
  void write();
  std::optional<std::string> path_;
  StepWindow window_;
  bool on_ = false, written_ = false;
  int64_t step_begin_ns_ = 0;
};

}  // namespace trainer
