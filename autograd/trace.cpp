// autograd/trace.cpp — the timeline tracer (see trace.h): per-thread event buffers, the JSON writer.
#include "minidl/autograd/trace.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <stdexcept>

namespace minidl::autograd::trace {

namespace detail {
std::atomic<bool> on{false};
}

namespace {

// One thread's events. Only its thread appends; the writer and clear() read under `mutex`.
struct ThreadBuffer {
  std::mutex mutex;
  std::vector<Event> events;
  int tid = 0;
  std::string name;
  int64_t last_end = 0;  // end of its latest span on its own track (only its thread touches it)
};

constexpr int kFirstVirtualTrack = 10000;  // ids of tracks that are not threads

struct Registry {
  std::mutex mutex;
  std::vector<std::shared_ptr<ThreadBuffer>> threads;  // kept after a thread ends
  std::vector<std::string> virtual_tracks;  // id kFirstVirtualTrack + index
  int next_tid = 1;
};
Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: threads may record during static destruction
  return *r;
}

thread_local std::shared_ptr<ThreadBuffer> this_thread_buffer;

ThreadBuffer& mine() {
  if (!this_thread_buffer) {
    auto b = std::make_shared<ThreadBuffer>();
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    b->tid = r.next_tid++;
    r.threads.push_back(b);
    this_thread_buffer = std::move(b);
  }
  return *this_thread_buffer;
}

void append(ThreadBuffer& b, Event e) {
  std::lock_guard<std::mutex> lock(b.mutex);
  b.events.push_back(std::move(e));
}

// The label of the collectives this thread launches (CollectiveLabel).
struct Label {
  std::string name;
  int track = -1;
};
thread_local Label current_label;

// Microseconds with three decimals, exactly: 1234567 ns -> "1234.567".
std::string micros(int64_t ns) {
  char buf[40];
  const int64_t sign = ns < 0 ? -1 : 1;
  const int64_t a = ns * sign;
  std::snprintf(buf, sizeof buf, "%s%lld.%03lld", sign < 0 ? "-" : "", static_cast<long long>(a / 1000),
                static_cast<long long>(a % 1000));
  return buf;
}

}  // namespace

void enable(bool on) {
  if (on) {
    ThreadBuffer& b = mine();
    name_thread_once("main");
    b.last_end = now_ns();
  }
  detail::on.store(on, std::memory_order_relaxed);
}

void clear() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (auto& t : r.threads) {
    std::lock_guard<std::mutex> tl(t->mutex);
    t->events.clear();
  }
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void set_thread_name(const std::string& name) {
  ThreadBuffer& b = mine();
  std::lock_guard<std::mutex> lock(b.mutex);
  b.name = name;
}

void name_thread_once(const std::string& name) {
  ThreadBuffer& b = mine();
  std::lock_guard<std::mutex> lock(b.mutex);
  if (b.name.empty()) b.name = name;
}

int track(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = std::find(r.virtual_tracks.begin(), r.virtual_tracks.end(), name);
  if (it == r.virtual_tracks.end()) it = r.virtual_tracks.insert(it, name);
  return kFirstVirtualTrack + static_cast<int>(it - r.virtual_tracks.begin());
}

void span(std::string name, const char* cat, int64_t begin_ns, int64_t end_ns) {
  ThreadBuffer& b = mine();
  b.last_end = std::max(b.last_end, end_ns);
  append(b, {.name = std::move(name), .cat = cat, .ph = 'X', .tid = b.tid, .ts_ns = begin_ns,
             .dur_ns = std::max<int64_t>(0, end_ns - begin_ns)});
}

void span_on(int track_id, std::string name, const char* cat, int64_t begin_ns, int64_t end_ns) {
  append(mine(), {.name = std::move(name), .cat = cat, .ph = 'X', .tid = track_id, .ts_ns = begin_ns,
                  .dur_ns = std::max<int64_t>(0, end_ns - begin_ns)});
}

void instant(std::string name, const char* cat, int64_t at_ns) {
  ThreadBuffer& b = mine();
  append(b, {.name = std::move(name), .cat = cat, .ph = 'i', .tid = b.tid, .ts_ns = at_ns, .dur_ns = 0});
}

int64_t last_span_end_ns() { return mine().last_end; }

// ---- collectives ----

CollectiveLabel::CollectiveLabel(const char* prefix, int64_t index) {
  if (!enabled()) return;
  current_label.name = std::string(prefix) + " " + std::to_string(index);
  current_label.track = track(current_label.name);
  set_ = true;
}

CollectiveLabel::~CollectiveLabel() {
  if (set_) current_label = Label{};
}

Collective Collective::launch(std::string what) {
  Collective c;
  if (!enabled()) return c;
  c.on_ = true;
  c.what_ = std::move(what);
  c.label_ = current_label.name;
  c.track_ = current_label.track;
  c.launched_ = now_ns();
  if (c.track_ >= 0) instant("launch " + c.label_, kAllReduce, c.launched_);
  return c;
}

Collective::Running::Running(Collective& collective) : c(collective) { begin = now_ns(); }

// On the "communication" track whichever thread ran it: a group's collectives run one at a time,
// on its communication thread or (shared memory) on a caller that helped, so they never overlap.
Collective::Running::~Running() {
  const int64_t end = now_ns();
  span_on(track("communication"), c.label_.empty() ? c.what_ : c.label_ + ": " + c.what_, kComm, begin, end);
  if (c.track_ >= 0) span_on(c.track_, c.label_ + " all-reduce", kAllReduce, c.launched_, end);
}

// ---- the events and the file ----

std::vector<Event> events() {
  std::vector<Event> out;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (auto& t : r.threads) {
    std::lock_guard<std::mutex> tl(t->mutex);
    out.insert(out.end(), t->events.begin(), t->events.end());
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Event& a, const Event& b) { return std::pair(a.tid, a.ts_ns) < std::pair(b.tid, b.ts_ns); });
  return out;
}

std::vector<Track> tracks() {
  std::vector<Track> out;
  std::vector<int> used;
  for (const Event& e : events()) used.push_back(e.tid);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (auto& t : r.threads) {
    std::lock_guard<std::mutex> tl(t->mutex);
    if (t->name.empty() && std::find(used.begin(), used.end(), t->tid) == used.end()) continue;
    const std::string name = t->name.empty() ? "thread " + std::to_string(t->tid) : t->name;
    out.push_back({.tid = t->tid, .name = name, .sort_index = name == "main" ? 0 : 1000 + t->tid});
  }
  for (size_t i = 0; i < r.virtual_tracks.size(); ++i)
    out.push_back({.tid = kFirstVirtualTrack + static_cast<int>(i), .name = r.virtual_tracks[i],
                   .sort_index = 1 + static_cast<int>(i)});
  return out;
}

std::string escape_json(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(ch)));
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out;
}

std::string events_json(int pid, const std::string& process_name) {
  const std::string p = std::to_string(pid);
  std::string out;
  auto meta = [&](const char* what, int tid, const std::string& args) {
    if (!out.empty()) out += ",\n";
    out += "{\"name\":\"" + std::string(what) + "\",\"ph\":\"M\",\"pid\":" + p + ",\"tid\":" + std::to_string(tid) +
           ",\"args\":{" + args + "}}";
  };
  meta("process_name", 0, "\"name\":\"" + escape_json(process_name) + "\"");
  meta("process_sort_index", 0, "\"sort_index\":" + p);
  for (const Track& t : tracks()) {
    meta("thread_name", t.tid, "\"name\":\"" + escape_json(t.name) + "\"");
    meta("thread_sort_index", t.tid, "\"sort_index\":" + std::to_string(t.sort_index));
  }
  for (const Event& e : events()) {
    out += ",\n{\"name\":\"" + escape_json(e.name) + "\",\"cat\":\"" + escape_json(e.cat) + "\",\"ph\":\"" + e.ph +
           "\",\"ts\":" + micros(e.ts_ns);
    out += e.ph == 'X' ? ",\"dur\":" + micros(e.dur_ns) : std::string(",\"s\":\"t\"");
    out += ",\"pid\":" + p + ",\"tid\":" + std::to_string(e.tid) + "}";
  }
  return out;
}

std::string document(const std::vector<std::string>& parts) {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  for (const std::string& part : parts) {
    if (part.empty()) continue;
    if (!first) out += ",\n";
    out += part;
    first = false;
  }
  return out + "\n]}\n";
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) throw std::runtime_error("trace: cannot write " + path);
}

void write(const std::string& path) { write_file(path, document({events_json(0, "process")})); }

}  // namespace minidl::autograd::trace
