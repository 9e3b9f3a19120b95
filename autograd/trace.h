// autograd/trace.h — a timeline tracer: spans of time on named tracks, written as a Chrome trace
// (the Trace Event Format JSON that Perfetto and chrome://tracing open). Off by default; when off
// every recording site costs one relaxed atomic load.
//
//   autograd::trace::enable(true);                   // the calling thread becomes track "main"
//   { autograd::trace::Span s("optimizer step", trace::kOptimizer); opt.step(); }
//   loss.backward();                                 // the engine records each node (profiler.h)
//   autograd::trace::enable(false);
//   autograd::trace::write("trace.json");            // one process; dist/trace_file.h gathers ranks
//
// Who records what (the categories, "cat" in the file; tools/draw_trace.py colours by them):
//   forward    each op's forward, backward  each backward node and AccumulateGrad (profiler.cpp),
//   allreduce  a DDP bucket's all-reduce from launch to completion, on a track of its own
//              ("DDP bucket k"), and a "launch" instant on the launching thread (dist/ddp.cpp),
//   comm       each collective as it runs on the communication thread (dist/process_group_gloo.cpp),
//   wait       DDP finalize waiting for a bucket, data  waiting for the next batch (data/dataloader.cpp),
//   optimizer  the optimizer step, step  one whole training step (the training loop).
//
// Recording is thread-safe: every thread appends to its own buffer (a mutex only that thread and
// the writer take); all timestamps come from one steady clock (CLOCK_MONOTONIC on Linux), so the
// processes of one machine share a time line. It lives in autograd, the lowest layer that every
// recorder (the engine, data, dist, the examples) can include.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace minidl::autograd::trace {

inline constexpr const char* kForward = "forward";
inline constexpr const char* kBackward = "backward";
inline constexpr const char* kAllReduce = "allreduce";
inline constexpr const char* kComm = "comm";
inline constexpr const char* kWait = "wait";
inline constexpr const char* kData = "data";
inline constexpr const char* kOptimizer = "optimizer";
inline constexpr const char* kStep = "step";

namespace detail {
extern std::atomic<bool> on;
}

// Whether spans are being recorded: the one check every recording site makes first.
inline bool enabled() { return detail::on.load(std::memory_order_relaxed); }
// Starts or stops recording; recorded events stay until clear(). Starting names the calling
// thread's track "main" unless it has a name.
void enable(bool on);
void clear();  // drops every thread's events (the track names stay)

// Nanoseconds on the steady clock (the time base of every event).
int64_t now_ns();

// Names the calling thread's track (shown in the viewer and by draw_trace.py).
void set_thread_name(const std::string& name);
// Names the calling thread's track unless it has a name already.
void name_thread_once(const std::string& name);
// A track that is not a thread (one per DDP bucket): the same name gives the same id.
int track(const std::string& name);

// A complete span [begin_ns, end_ns] on the calling thread's track, or on `track_id`.
void span(std::string name, const char* cat, int64_t begin_ns, int64_t end_ns);
void span_on(int track_id, std::string name, const char* cat, int64_t begin_ns, int64_t end_ns);
// A point in time on the calling thread's track.
void instant(std::string name, const char* cat, int64_t at_ns);
// The end of the latest span the calling thread recorded on its own track (or when it enabled
// tracing): a forward op's span starts no earlier (profiler.cpp), so spans on a track nest.
int64_t last_span_end_ns();

// Times its scope as one span on the calling thread's track (nothing when tracing is off).
class Span {
 public:
  Span(const char* name, const char* cat) : name_(name), cat_(cat), begin_(enabled() ? now_ns() : -1) {}
  ~Span() {
    if (begin_ >= 0) span(name_, cat_, begin_, now_ns());
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  const char* name_;
  const char* cat_;
  int64_t begin_;
};

// ---- collectives: launched on one thread, run on the communication thread ----

// While it lives, the collectives the calling thread launches belong to "<prefix> <index>" (DDP:
// "DDP bucket 3"): their launch-to-completion span goes on the track of that name.
class CollectiveLabel {
 public:
  CollectiveLabel(const char* prefix, int64_t index);
  ~CollectiveLabel();
  CollectiveLabel(const CollectiveLabel&) = delete;
  CollectiveLabel& operator=(const CollectiveLabel&) = delete;

 private:
  bool set_ = false;
};

// One collective's trace: launch() where it is issued (records a "launch" instant when it has a
// label), run() on the thread that executes it (records the run as a "comm" span on the track
// "communication", whichever thread ran it, and the label's launch-to-completion "allreduce" span).
class Collective {
 public:
  Collective() = default;
  static Collective launch(std::string what);  // inert when tracing is off
  template <class F> void run(F&& body) {
    if (!on_) return static_cast<void>(body());
    const Running running(*this);  // records even when body throws
    body();
  }

 private:
  struct Running {
    explicit Running(Collective& c);
    ~Running();
    Collective& c;
    int64_t begin;
  };
  bool on_ = false;
  std::string what_, label_;
  int track_ = -1;
  int64_t launched_ = 0;
};

// ---- the events and the file ----

struct Event {
  std::string name;
  const char* cat = "";
  char ph = 'X';  // 'X' complete span, 'i' instant
  int tid = 0;
  int64_t ts_ns = 0, dur_ns = 0;
};
struct Track {
  int tid = 0;
  std::string name;
  int sort_index = 0;  // viewer order: main first, then the bucket tracks, then other threads
};
std::vector<Event> events();  // every thread's, by track then time
std::vector<Track> tracks();  // every track that has a name or an event

// `s` as the inside of a JSON string: quotes, backslashes and control characters escaped.
std::string escape_json(std::string_view s);
// This process's events and track names as JSON objects separated by commas (no brackets), with
// pid `pid` and the process called `process_name`: one part of a "traceEvents" array.
std::string events_json(int pid, const std::string& process_name);
// A complete trace file from the parts of events_json (one per process).
std::string document(const std::vector<std::string>& parts);
// Writes document({events_json(0, "process")}) to `path`; throws naming the path on failure.
void write(const std::string& path);
void write_file(const std::string& path, const std::string& text);

}  // namespace minidl::autograd::trace
