// autograd/profiler.cpp — the per-op step profiler and the ops' spans for the tracer (see profiler.h).
#include "minidl/autograd/profiler.h"

#include <algorithm>
#include <atomic>
#include <string_view>
#include <unordered_map>

#include "minidl/autograd/trace.h"

namespace minidl::autograd::profiler {

namespace {
struct State {
  std::atomic<bool> on{false};
  std::vector<Record> records;
  std::unordered_map<std::string, size_t> index;
};
State& state() {
  static State s;
  return s;
}
// Where the next forward op's time starts (mark(), or the end of the previous one), per thread.
thread_local int64_t last_ns = 0;  // (a constant: a lazily run initialiser would run after `now`)

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
double seconds(int64_t begin_ns, int64_t end_ns) { return 1e-9 * static_cast<double>(end_ns - begin_ns); }
}  // namespace

void enable(bool on) {
  state().on.store(on, std::memory_order_relaxed);
  mark();
}
bool enabled() { return state().on.load(std::memory_order_relaxed); }
bool active() { return enabled() || trace::enabled(); }
void reset() {
  state().records.clear();
  state().index.clear();
}
void mark() { last_ns = trace::now_ns(); }

void add(const std::string& name, double seconds, bool backward) {
  State& s = state();
  if (!enabled()) return;
  Record& r = entry(s, kind_of(name));
  (backward ? r.backward_s : r.forward_s) += seconds;
  ++(backward ? r.backward_calls : r.forward_calls);
}

void record_forward(const char* node_name) {
  const int64_t now = trace::now_ns();
  if (enabled()) add(node_name, seconds(last_ns, now), false);
  if (trace::enabled())
    trace::span(kind_of(node_name), trace::kForward, std::max(last_ns, trace::last_span_end_ns()), now);
  last_ns = now;
}

void record_backward(const std::string& name, int64_t begin_ns) {
  const int64_t now = trace::now_ns();
  if (enabled()) add(name, seconds(begin_ns, now), true);
  if (trace::enabled()) trace::span(name, trace::kBackward, begin_ns, now);
}

Scope::Scope(const char* name, const char* cat) : name_(name), cat_(cat), begin_ns_(active() ? trace::now_ns() : -1) {}

Scope::~Scope() {
  if (begin_ns_ < 0) return;
  const int64_t now = trace::now_ns();
  if (enabled()) add(name_, seconds(begin_ns_, now), false);
  if (trace::enabled()) trace::span(name_, cat_, begin_ns_, now);
  last_ns = now;
}

std::vector<Record> records() { return state().records; }

}  // namespace minidl::autograd::profiler
