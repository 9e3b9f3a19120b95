// dist/trace_file.h — one Chrome trace of every rank: each rank's events (autograd/trace.h)
// gathered on rank 0, which writes them into one file, each rank as process `rank` named
// "rank N". Ranks of one machine share the steady clock, so their spans line up; ranks on other
// machines are written as recorded (their clocks are not aligned).
//
//   autograd::trace::enable(true);  ... a few training steps ...  autograd::trace::enable(false);
//   dist::write_trace("trace.json");   // collective: every rank calls it; rank 0 writes
//
// Open the file in https://ui.perfetto.dev or chrome://tracing, or draw it with
// tools/draw_trace.py.
#pragma once
#include <string>

#include "minidl/dist/process_group.h"

namespace minidl::dist {

// Stops tracing, gathers every rank's events on all ranks (one all_gather_object) and writes the
// file on rank 0; group nullptr: the default group (without dist::init: this process alone, as
// rank 0). Then clears this rank's events. Throws naming the path when it cannot be written.
void write_trace(const std::string& path, ProcessGroup* group = nullptr);

}  // namespace minidl::dist
