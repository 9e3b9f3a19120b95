// autograd/profiler.h — per-op timing of a training step, forward and backward separately
// (what `bench --profile` prints). Off by default; when off it costs one branch per op.
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
bool enabled();
void reset();  // clears the records
void mark();  // the next forward op's time starts here
// Adds `seconds` under the op kind of `name` ("Conv2dBackward" and "Conv2d" are both "Conv2d"),
// as forward or backward time; used by the engine and for things outside the graph (the
// optimizer step).
void add(const std::string& name, double seconds, bool backward);
// Called by Variable::make_result: records the forward time since the previous op or mark().
void record_forward(const char* node_name);
std::vector<Record> records();  // in order of first appearance

}  // namespace minidl::autograd::profiler
