// examples/trainer/progress.h — what rank 0 shows while training: a Log (lines to stdout and to
// OUT/train.log) and a Progress display per phase — a redrawn bar when stdout is a terminal
//   epoch 3/8 [##########..........] 235/469  loss 0.3121  1840 img/s  ETA 0:13
// and, when it is not (a pipe, a CI log), a plain line every tenth of the epoch.
// Other ranks construct them disabled, so the training code calls them unconditionally.
// Part of the `train` example (examples/train.cpp); not a library module.
#pragma once
#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <string>

namespace trainer {

class Log {
 public:
  // enabled: print and write (rank 0); path: the log file, "" for none (appended to).
  Log(bool enabled, const std::string& path);
  // Prints `line` (with a newline) and writes it to the file with a time stamp, flushed; a
  // failed write (a full disk) is a std::runtime_error naming the file.
  void line(const std::string& text);
  bool enabled() const { return enabled_; }

 private:
  bool enabled_;
  std::string path_;
  std::ofstream file_;
};

class Progress {
 public:
  // title: "epoch 3/8" or "eval"; total: batches in the phase; images_per_batch: global images.
  Progress(Log& log, std::string title, int64_t total, int64_t images_per_batch);
  // After batch `done` (1-based); `loss` gives the running mean loss, called only when a line or
  // the bar is drawn (on a GPU reading it is a synchronisation: at most 10 a second, or 10 lines
  // an epoch).
  void update(int64_t done, const std::function<double()>& loss);
  // Clears the bar (terminal mode) so that the next line starts clean.
  void finish();

 private:
  std::string status(int64_t done, double loss) const;

  Log& log_;
  std::string title_;
  int64_t total_, images_per_batch_;
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  int64_t next_line_ = 0;  // plain mode: the batch of the next printed line
};

// "1:05:03" / "2:07"
std::string format_duration(double seconds);
// printf-style formatting of one value: format("%.2f", 91.234) == "91.23".
std::string format(const char* spec, double v);

}  // namespace trainer
