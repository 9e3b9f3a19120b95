// autograd/profiler.h — per-op timing of a training step, forward and backward separately
// (what `bench --profile` prints), and the one place that records ops for the timeline tracer
// (trace.h): each op's forward and each node's backward become a row of the table when profiling
// and a span on the thread's track when tracing. Off by default; when both are off it costs one
// branch per op.
//
//   autograd::profiler::enable(true);
//   autograd::profiler::mark();            // forward starts now
//   loss = cross_entropy(model(x), y);     // each op's forward time is recorded
//   loss.backward();                       // each node's backward time is recorded
//   for (auto& r : autograd::profiler::records()) ...
//
// Forward: an op's time is the wall time from the previous recorded op (or mark()) to the moment
// its result is recorded, so the module code between two ops counts towards the second one. The
// op kind is its backward node's name without "Backward" ("Conv2d", "MaxPool2d"). Backward: the
// time of each node's backward closure, under the node's name; adding gradients that meet at one
// Variable is "AccumulateGrad" (and so is copying a leaf's gradient into .grad, with the
// post-accumulate hooks, where DDP launches its all-reduces). Only the thread that runs the step
// records; timings are wall clock, so take them from a quiet machine.
// Tracing: a forward span starts where the previous one (or any span of the thread: the data
// wait, the optimizer step) ended, so the spans of one track never cross; backward spans are the
// closures' own times (a DDP wait inside AccumulateGrad nests inside it).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace minidl::autograd::profiler {

struct Record {
  std::string name;  // op kind
  double forward_s = 0, backward_s = 0;
  int64_t forward_calls = 0, backward_calls = 0;
};

void enable(bool on);
bool enabled();  // the table
bool active();  // the table or the tracer: whether the engine times an op at all
void reset();  // clears the records
void mark();  // the next forward op's time starts here
// Adds `seconds` under the op kind of `name` ("Conv2dBackward" and "Conv2d" are both "Conv2d"),
// as forward or backward time; used by the engine and for things outside the graph (the
// optimizer step).
void add(const std::string& name, double seconds, bool backward);
// Called by Variable::make_result: records the forward time since the previous op or mark().
void record_forward(const char* node_name);
// Called by the engine: the backward node (or "AccumulateGrad") that ran from begin_ns
// (trace::now_ns()) until now, into the table and the trace.
void record_backward(const std::string& name, int64_t begin_ns);

// Times a phase of the step outside the graph (zero_grad, the optimizer step): a row of the table
// (its time in the forward column) and a span of category `cat` (trace.h) on the thread's track.
class Scope {
 public:
  Scope(const char* name, const char* cat);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* name_;
  const char* cat_;
  int64_t begin_ns_;
};
std::vector<Record> records();  // in order of first appearance

}  // namespace minidl::autograd::profiler
