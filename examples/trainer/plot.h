// examples/trainer/plot.h — the picture a run ends with: OUT/curves.png, the loss, accuracy and
// learning rate per epoch (train and validation) drawn from OUT/metrics.jsonl by
// tools/plot_metrics.py (matplotlib). `train --plot none` skips it.
// Part of the `train` example (examples/train.cpp); not a library module.
#pragma once
#include <string>

namespace trainer {

// tools/plot_metrics.py: in the source tree (compiled in) or, for an installed train,
// PREFIX/share/minidl/tools/. Empty when neither exists.
std::string plot_script_path();

// Runs the script on out_dir/metrics.jsonl (it prints the path it wrote), waits for it. A plot that
// cannot be drawn (no python3, no matplotlib, no script) is not a failed run: it prints why and
// how to draw it later to stderr, and returns false; the figures stay in metrics.jsonl.
bool draw_curves(const std::string& out_dir);

}  // namespace trainer
