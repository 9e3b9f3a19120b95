// autograd/profiler.cpp — the per-op step profiler (see profiler.h).
#include "minidl/autograd/profiler.h"

#include <chrono>
#include <string_view>
#include <unordered_map>

namespace minidl::autograd::profiler {

namespace {
using Clock = std::chrono::steady_clock;
struct State {
  bool on = false;
  Clock::time_point last = Clock::now();
  std::vector<Record> records;
  std::unordered_map<std::string, size_t> index;
};
State& state() {
  static State s;
  return s;
}
// "Conv2dBackward" -> "Conv2d": forward and backward of one op kind share a row.
std::string kind_of(std::string_view name) {
  if (name.ends_with("Backward")) name.remove_suffix(8);
  return std::string(name);
}
Record& entry(State& s, const std::string& name) {
  auto it = s.index.find(name);
  if (it != s.index.end()) return s.records[it->second];
  s.index.emplace(name, s.records.size());
  s.records.push_back({.name = name});
  return s.records.back();
}
}  // namespace

void enable(bool on) {
  state().on = on;
  mark();
}
bool enabled() { return state().on; }
void reset() {
  state().records.clear();
  state().index.clear();
}
void mark() { state().last = Clock::now(); }

void add(const std::string& name, double seconds, bool backward) {
  State& s = state();
  if (!s.on) return;
  Record& r = entry(s, kind_of(name));
  (backward ? r.backward_s : r.forward_s) += seconds;
  ++(backward ? r.backward_calls : r.forward_calls);
}

void record_forward(const char* node_name) {
  State& s = state();
  if (!s.on) return;
  const Clock::time_point now = Clock::now();
  add(node_name, std::chrono::duration<double>(now - s.last).count(), false);
  s.last = now;
}

std::vector<Record> records() { return state().records; }

}  // namespace minidl::autograd::profiler
