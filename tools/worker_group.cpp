// tools/worker_group.cpp — minidl-run's supervisor loop. See worker_group.h.
//
// Each worker is fork()+execvp() of the command, in its own process group (so a signal to the
// group also reaches anything the worker started), with PR_SET_PDEATHSIG so it gets SIGTERM if
// the launcher dies without cleaning up. Its stdout and stderr are pipes read here by one poll()
// loop that also watches a self-pipe fed by the signal handlers (SIGCHLD, SIGINT, SIGTERM,
// SIGHUP): the launcher has a single thread and no work happens inside a signal handler.
// A run is a sequence of rounds (one group of workers each); with several nodes and restarts,
// the launchers agree on each round's members and end through a store (class Peers).
#include "tools/worker_group.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "minidl/dist/process.h"
#include "minidl/dist/socket.h"
#include "minidl/dist/step_record.h"
#include "minidl/dist/store.h"
#include "tools/elastic_membership.h"

namespace minidl::launcher {

namespace dist = minidl::dist;

namespace {

using Clock = std::chrono::steady_clock;

const int kHandledSignals[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};
int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  int saved = errno;
  unsigned char byte = static_cast<unsigned char>(sig);
  (void)!::write(g_signal_pipe[1], &byte, 1);
  errno = saved;
}

// Throws for a failed pipe2() (errno set): what the pipe was for, and why it failed; out of
// descriptors, with the limit and `ulimit -n`.
[[noreturn]] void throw_pipe_failed(const std::string& what_for) {
  const int err = errno;
  throw std::runtime_error(
      "cannot create " + what_for + ": " +
      (dist::is_out_of_descriptors(err) ? dist::out_of_descriptors_message(err) : std::string(std::strerror(err))));
}

void install_signal_handlers() {
  if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) throw_pipe_failed("the pipe for signals");
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  for (int sig : kHandledSignals) sigaction(sig, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the launcher (reset in workers)
}

void write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // stdout gone: drop the output, keep supervising
    }
    done += static_cast<size_t>(n);
  }
}

void say(const std::string& message) { write_all(STDERR_FILENO, "minidl-run: " + message + "\n"); }

// One worker's stdout or stderr: lines are re-emitted on ours, prefixed with "[rank R] ".
struct Stream {
  int fd = -1;
  int dest = STDOUT_FILENO;
  std::string prefix;
  std::string partial;  // bytes after the last newline
};

void pump(Stream& s) {
  char buf[65536];
  ssize_t n = ::read(s.fd, buf, sizeof(buf));
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n > 0) s.partial.append(buf, static_cast<size_t>(n));
  std::string out;
  size_t start = 0;
  for (size_t nl; (nl = s.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    out += s.prefix;
    out.append(s.partial, start, nl + 1 - start);
  }
  s.partial.erase(0, start);
  bool eof = n <= 0;
  if (!s.partial.empty() && (eof || s.partial.size() > 65536)) {  // an unterminated last line
    out += s.prefix + s.partial + "\n";
    s.partial.clear();
  }
  write_all(s.dest, out);
  if (eof) {
    ::close(s.fd);
    s.fd = -1;
  }
}

struct Worker {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  bool exited = false;
  int status = 0;
};

// Where this node's workers sit in one round: the round's number, MASTER_PORT, this node's rank
// among the round's nodes, and how many there are.
struct Placement {
  int round = 0;
  uint16_t port = 0;
  int group_rank = 0;
  int nnodes = 1;
};

[[noreturn]] void exec_worker(const LaunchConfig& c, const Placement& p, int local_rank, const std::string& step_dir,
                              int out_fd, int err_fd, pid_t launcher) {
  ::setpgid(0, 0);
  minidl::dist::die_with_parent(SIGTERM, launcher);
  ::signal(SIGPIPE, SIG_DFL);
  int null_fd = ::open("/dev/null", O_RDONLY);
  if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  auto set = [](const char* name, int value) { ::setenv(name, std::to_string(value).c_str(), 1); };
  set("RANK", p.group_rank * c.nproc_per_node + local_rank);
  set("WORLD_SIZE", p.nnodes * c.nproc_per_node);
  set("LOCAL_RANK", local_rank);
  set("LOCAL_WORLD_SIZE", c.nproc_per_node);
  set("GROUP_RANK", p.group_rank);
  set("MASTER_PORT", p.port);
  set("MINIDL_RESTART_COUNT", p.round);
  set("MINIDL_MAX_RESTARTS", c.max_restarts);
  ::setenv("MINIDL_STEP_DIR", step_dir.c_str(), 1);
  ::setenv("MASTER_ADDR", c.master_addr.c_str(), 1);
  std::vector<char*> argv;
  for (const auto& a : c.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  std::string msg = "minidl-run: cannot run '" + c.command[0] + "': " + std::strerror(errno) + "\n";
  (void)!::write(STDERR_FILENO, msg.data(), msg.size());
  _exit(127);
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "a signal";
  }
}

void signal_groups(const std::vector<Worker>& workers, int sig, bool include_exited) {
  for (const auto& w : workers) {
    if (!w.exited || include_exited) ::kill(-w.pid, sig);  // the worker's whole process group
  }
}

// How this node's part of one round ended.
enum class EndKind : char {
  ok = 'o',  // every worker exited 0
  failed = 'f',  // a worker failed
  stopped = 's',  // stopped for another node's failure
  aborted = 'a',  // the launcher got a signal, or lost node 0
};
struct NodeEnd {
  EndKind kind = EndKind::ok;
  int64_t step = -1;  // the failed worker's step, when it wrote one
  bool by_signal = false;  // the failed worker was killed by a signal (a primary cause)
  bool usage = false;  // it exited with status 2: a bad flag or input, which a restart repeats
  std::string cause;
  int exit_code = 1;  // for aborted: what the launcher exits with

  // On the store: the kind's letter, the step, "1"/"0" for by_signal (+ "u" for usage), the cause.
  std::string encode() const {
    return std::string(1, static_cast<char>(kind)) + "\n" + std::to_string(step) + "\n" + (by_signal ? "1" : "0") +
           (usage ? "u" : "") + "\n" + cause;
  }
  static NodeEnd decode(const std::string& s) {
    NodeEnd e;
    std::istringstream in(s);
    std::string kind, step, sig;
    std::getline(in, kind);
    std::getline(in, step);
    std::getline(in, sig);
    std::getline(in, e.cause, '\0');
    e.kind = kind.empty() ? EndKind::failed : static_cast<EndKind>(kind[0]);
    e.step = step.empty() ? -1 : std::stoll(step);
    e.by_signal = !sig.empty() && sig[0] == '1';
    e.usage = sig.find('u') != std::string::npos;
    return e;
  }
};

// What happens after a round: done, a restart, or the end of the run.
enum class VerdictKind : char {
  done = 'd',
  restart = 'r',
  give_up = 'g',
  give_up_usage = 'u',  // give up on a bad flag or input (the launcher exits 2)
};
struct Verdict {
  VerdictKind kind = VerdictKind::done;
  std::string message;
  int64_t step = -1;
  // On the store: the kind's letter, the step, the message.
  std::string encode() const {
    return std::string(1, static_cast<char>(kind)) + "\n" + std::to_string(step) + "\n" + message;
  }
  static Verdict decode(const std::string& s) {
    Verdict v;
    std::istringstream in(s);
    std::string kind, step;
    std::getline(in, kind);
    std::getline(in, step);
    std::getline(in, v.message, '\0');
    v.kind = kind.empty() ? VerdictKind::give_up : static_cast<VerdictKind>(kind[0]);
    v.step = step.empty() ? -1 : std::stoll(step);
    return v;
  }
};

// One verdict from every node's end: the primary failure is a worker killed by a signal, else
// the first reported (the others' "connection broke" errors are its consequences).
Verdict decide(const std::vector<NodeEnd>& ends, int restarts_done, int max_restarts, int64_t last_failure_step) {
  const NodeEnd* primary = nullptr;
  for (const auto& e : ends) {
    if (e.kind == EndKind::aborted) return {VerdictKind::give_up, e.cause, e.step};
    if (e.kind == EndKind::failed && (primary == nullptr || (e.by_signal && !primary->by_signal))) primary = &e;
  }
  if (primary == nullptr) return {VerdictKind::done, "", -1};
  const std::string cause = primary->cause;
  if (primary->usage)  // passed on as the launcher's own exit status 2
    return {VerdictKind::give_up_usage,
            "failed: " + cause +
                (restarts_done < max_restarts
                     ? "; exit status 2 means a bad flag or input, which a restart would repeat: not restarting"
                     : ""),
            primary->step};
  if (restarts_done >= max_restarts) {
    std::string msg = "failed: " + cause;
    if (max_restarts > 0) msg += "; no restarts left (--max-restarts " + std::to_string(max_restarts) + " used up)";
    return {VerdictKind::give_up, msg, primary->step};
  }
  if (primary->step >= 0 && primary->step == last_failure_step)
    return {VerdictKind::give_up,
            "failed: " + cause + "; the previous failure was at the same step " + std::to_string(primary->step) +
                ": a deterministic crash that a restart would repeat, not restarting",
            primary->step};
  return {VerdictKind::restart, cause, primary->step};
}

// One round of a multi-node run, as node 0 published it: its MASTER_PORT, its members (node ids
// with their launcher's nonce, in node-rank order), and the line every member logs about it.
struct Round {
  int index = 0;
  uint16_t port = 0;
  std::vector<int> members;
  std::vector<std::string> nonces;
  std::string message;
  int group_rank = -1;  // this launcher's node rank in it (-1: not a member)

  // On the store: the port, the members ("id:nonce" separated by spaces), the message.
  std::string encode() const {
    std::string s = std::to_string(port) + "\n";
    for (size_t k = 0; k < members.size(); ++k) s += (k ? " " : "") + std::to_string(members[k]) + ":" + nonces[k];
    return s + "\n" + message;
  }
  static Round decode(int index, const std::string& s) {
    Round r;
    r.index = index;
    std::istringstream in(s);
    std::string port, members;
    std::getline(in, port);
    std::getline(in, members);
    std::getline(in, r.message, '\0');
    r.port = static_cast<uint16_t>(std::stoi(port));
    std::istringstream m(members);
    for (std::string item; m >> item;) {
      const size_t colon = item.find(':');
      r.members.push_back(std::stoi(item.substr(0, colon)));
      r.nonces.push_back(item.substr(colon + 1));
    }
    return r;
  }
};

// The launchers of a multi-node run, meeting in a TCPStore hosted by node 0's launcher on
// master_port; node 0 forms every round and decides how it ends. Keys (minidl-run/...):
//   hb/<id>              each launcher's heartbeat ("<nonce> <count>")
//   open                 the round node 0 is forming or running
//   <r>/want/<id>        a launcher's wish to take part in round r (its nonce)
//   <r>/round            round r as node 0 closed it (class Round)
//   <r>/stop, <r>/end/<id>, <r>/verdict   ending round r;  over: the run's exit status
//   finished             how many members have read the last verdict
// A node id is the launcher's --node-rank. Every call comes from the supervisor loop's one thread.
class Peers {
 public:
  explicit Peers(const LaunchConfig& c) : c_(c) {
    const bool loopback = c.master_addr == "127.0.0.1" || c.master_addr == "localhost";
    store_ = std::make_unique<dist::TCPStore>(
        c.master_addr, dist::TCPStoreOptions{.port = c.master_port,
                                             .is_server = c.node_rank == 0,
                                             .timeout = c.join_timeout,
                                             .bind_all_interfaces = c.node_rank == 0 && !loopback});
    nonce_ = std::to_string(::getpid()) + "." + std::to_string(Clock::now().time_since_epoch().count() % 1000000007);
    tick();
  }

  // The round a launcher takes part in first: 0 for node 0; the one running now for the others
  // (a launcher that starts late waits for the next round).
  int first_round() { return coordinator() ? 0 : std::stoi(store_->get("minidl-run/open")); }

  // Takes part in round `index` — or, if node 0 leaves this launcher out (it came too late, or
  // MAX nodes are there), in a later one. Node 0 closes each round (torchrun's rule: at once
  // with MAX nodes, last_call after MIN). Returns nothing when the run ended first.
  std::optional<Round> join(int index) {
    if (coordinator()) return form(index);
    const auto deadline = Clock::now() + c_.join_timeout;
    for (;; ++index) {
      store_->set(key(index, "want/" + std::to_string(c_.node_rank)), nonce_);
      while (!store_->check({key(index, "round")})) {
        tick();
        if (store_->check({"minidl-run/over"})) return std::nullopt;
        if (Clock::now() > deadline)
          throw std::runtime_error("not admitted to a rendezvous round within " +
                                   std::to_string(c_.join_timeout.count() / 1000) + " s");
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      Round r = Round::decode(index, store_->get(key(index, "round")));
      for (size_t k = 0; k < r.members.size(); ++k) {
        if (r.members[k] == c_.node_rank && r.nonces[k] == nonce_) {
          r.group_rank = static_cast<int>(k);
          return r;
        }
      }
    }
  }

  // Heartbeat, and on node 0 the check of everyone else's; throttled to heartbeat_interval.
  void tick() {
    const auto now = Clock::now();
    if (now < next_tick_) return;
    next_tick_ = now + std::min<std::chrono::milliseconds>(c_.heartbeat_interval, std::chrono::milliseconds(200));
    if (now >= next_beat_) {
      store_->set("minidl-run/hb/" + std::to_string(c_.node_rank), nonce_ + " " + std::to_string(++beats_));
      next_beat_ = now + c_.heartbeat_interval;
    }
    if (!coordinator()) return;
    for (int id = 1; id < c_.nnodes; ++id) {
      const std::string hb = "minidl-run/hb/" + std::to_string(id);
      if (!store_->check({hb})) continue;
      const std::string value = store_->get(hb);
      auto [it, fresh] = beats_seen_.try_emplace(id, Beat{value, now});
      if (!fresh && value != it->second.value) it->second = {value, now};
    }
  }

  // Whether this round's workers must stop: another node asked (its workers failed), or, on
  // node 0, a member's heartbeat stopped or a newcomer waits to be admitted.
  bool stop_requested(const Round& r) {
    tick();
    if (!coordinator()) {
      if (!store_->check({key(r.index, "stop")})) return false;
      stop_cause_ = store_->get(key(r.index, "stop"));
      return true;
    }
    std::string cause;
    for (int id : r.members) {
      if (id == 0 || alive(id)) continue;
      why_left_[id] = lost_cause(id);
      cause += (cause.empty() ? "" : "; ") + why_left_[id];
    }
    admitting_ = false;
    if (cause.empty()) {
      const std::vector<int> newcomers = newcomers_of(r);
      if (admit_now(static_cast<int>(r.members.size()), static_cast<int>(newcomers.size()), c_.nnodes)) {
        cause = name_nodes(newcomers) + (newcomers.size() == 1 ? " waits" : " wait") + " to join";
        admitting_ = true;
      }
    }
    if (cause.empty()) {
      if (!store_->check({key(r.index, "stop")})) return false;
      cause = store_->get(key(r.index, "stop"));
    }
    stop_cause_ = cause;
    request_stop(r.index, cause);
    return true;
  }
  // Why the workers stop: "another node failed", "node 1 lost (...)", "a node waits to join".
  const std::string& stop_cause() const { return stop_cause_; }
  void request_stop(int index, const std::string& cause = "another node failed") {
    store_->set(key(index, "stop"), cause);
  }

  // Posts this node's end of the round and returns the common verdict (node 0 decides).
  Verdict settle(const Round& r, const NodeEnd& mine) {
    store_->set(key(r.index, "end/" + std::to_string(c_.node_rank)), mine.encode());
    if (!coordinator()) {
      while (!store_->check({key(r.index, "verdict")})) {
        tick();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      return Verdict::decode(store_->get(key(r.index, "verdict")));
    }
    std::vector<NodeEnd> ends{mine};
    std::vector<int> left;
    for (int id : r.members) {
      if (id == 0) continue;
      const std::string k = key(r.index, "end/" + std::to_string(id));
      while (!store_->check({k}) && alive(id)) {
        tick();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (!store_->check({k})) {
        if (!why_left_.count(id)) why_left_[id] = lost_cause(id);
        left.push_back(id);
        continue;
      }
      NodeEnd e = NodeEnd::decode(store_->get(k));
      if (e.kind == EndKind::aborted) {  // its launcher was stopped: the node leaves
        why_left_[id] = "node " + std::to_string(id) + " left (" + e.cause + ")";
        left.push_back(id);
        continue;
      }
      ends.push_back(e);
    }
    Verdict v = decide_round(r, ends, left);
    store_->set(key(r.index, "verdict"), v.encode());
    return v;
  }

  // The end of the run: node 0 tells launchers still waiting to be admitted, and keeps the store
  // up until every member has read the verdict.
  void finish(const Round& r, int status) {
    store_->add("minidl-run/finished", 1);
    if (!coordinator()) return;
    store_->set("minidl-run/over", std::to_string(status));
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    int expected = 0;
    for (int id : r.members) expected += id == 0 || alive(id) ? 1 : 0;
    while (store_->add("minidl-run/finished", 0) < expected && Clock::now() < deadline) {
      tick();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  // For a launcher that was never admitted: the run's exit status.
  int over_status() { return std::stoi(store_->get("minidl-run/over")); }

 private:
  struct Beat {
    std::string value;
    Clock::time_point changed;
  };
  static std::string key(int round, const std::string& name) {
    return "minidl-run/" + std::to_string(round) + "/" + name;
  }
  bool coordinator() const { return c_.node_rank == 0; }
  bool alive(int id) const {
    if (id == 0) return true;
    auto it = beats_seen_.find(id);
    return it != beats_seen_.end() && Clock::now() - it->second.changed <= c_.heartbeat_timeout;
  }
  std::string lost_cause(int id) const {
    auto it = beats_seen_.find(id);
    const double ago = it == beats_seen_.end() ? 0.0
                                               : std::chrono::duration<double>(Clock::now() - it->second.changed).count();
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f", ago);
    return "node " + std::to_string(id) + " lost (heartbeat stopped " + buf + " s ago)";
  }
  // Live launchers that asked for round `index`, by id.
  std::vector<int> present(int index) {
    std::vector<int> ids;
    for (int id = 0; id < c_.nnodes; ++id) {
      if (alive(id) && store_->check({key(index, "want/" + std::to_string(id))})) ids.push_back(id);
    }
    return ids;
  }
  // Live launchers asking for the round after r that are not in r.
  std::vector<int> newcomers_of(const Round& r) {
    std::vector<int> ids;
    for (int id : present(r.index + 1))
      if (std::find(r.members.begin(), r.members.end(), id) == r.members.end()) ids.push_back(id);
    return ids;
  }

  // Node 0's verdict: a node that left ends the round like a failure (torchrun's workers see
  // their peers vanish: a restart that counts, with the survivors if MIN remain); a round
  // stopped only to admit newcomers restarts without counting (torchrun: "membership changes do
  // not count as retries"); anything else as on one node.
  Verdict decide_round(const Round& r, const std::vector<NodeEnd>& ends, const std::vector<int>& left) {
    if (ends[0].kind == EndKind::aborted) return {VerdictKind::give_up, ends[0].cause, ends[0].step};
    std::vector<int> survivors;
    std::string cause;
    for (int id : r.members) {
      if (std::find(left.begin(), left.end(), id) == left.end()) survivors.push_back(id);
      else cause += (cause.empty() ? "" : "; ") + why_left_[id];
    }
    if (!left.empty()) {
      const RoundMembers next = next_round(r.members, survivors, c_.min_nodes, c_.nnodes);
      if (!next.error.empty()) return {VerdictKind::give_up, "failed: " + cause + ": " + next.error, -1};
      if (restarts_ >= c_.max_restarts)
        return {VerdictKind::give_up,
                "failed: " + cause + "; no restarts left (--max-restarts " + std::to_string(c_.max_restarts) +
                    " used up)",
                -1};
      ++restarts_;
      next_cause_ = cause;
      next_counted_ = true;
      return {VerdictKind::restart, cause, -1};
    }
    const bool any_failed =
        std::any_of(ends.begin(), ends.end(), [](const NodeEnd& e) { return e.kind == EndKind::failed; });
    if (!any_failed && admitting_) {
      next_cause_.clear();
      next_counted_ = false;
      return {VerdictKind::restart, stop_cause_, -1};
    }
    const Verdict v = decide(ends, restarts_, c_.max_restarts, last_failure_step_);
    if (v.kind == VerdictKind::restart) {
      ++restarts_;
      last_failure_step_ = v.step;
      next_cause_ = v.message;
      next_counted_ = true;
    }
    return v;
  }

  // Node 0 forms round `index`: waits for the rendezvous to close, publishes the round.
  Round form(int index) {
    store_->set("minidl-run/open", std::to_string(index));
    store_->set(key(index, "want/0"), nonce_);
    const auto start = Clock::now(), deadline = start + c_.join_timeout;
    std::optional<Clock::time_point> min_reached;
    std::vector<int> ids;
    while (true) {
      tick();
      ids = present(index);
      const int n = static_cast<int>(ids.size());
      if (n < c_.min_nodes) min_reached.reset();
      else if (!min_reached) min_reached = Clock::now();
      const auto since = min_reached ? std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - *min_reached)
                                     : std::chrono::milliseconds(0);
      if (rendezvous_closes(n, c_.min_nodes, c_.nnodes, since, c_.last_call)) break;
      if (Clock::now() > deadline)
        throw std::runtime_error("rendezvous round " + std::to_string(index) + ": " + name_nodes(ids) +
                                 " joined within " + std::to_string(c_.join_timeout.count() / 1000) +
                                 " s, fewer than the minimum " + std::to_string(c_.min_nodes));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const RoundMembers next = next_round(previous_, ids, c_.min_nodes, c_.nnodes);
    Round r;
    r.index = index;
    r.port = dist::find_free_port(c_.master_addr);
    r.members = next.members;
    for (int id : r.members) r.nonces.push_back(store_->get(key(index, "want/" + std::to_string(id))));
    r.message = describe(next);
    store_->set(key(index, "round"), r.encode());
    previous_ = r.members;
    why_left_.clear();
    stop_cause_.clear();
    admitting_ = false;
    r.group_rank = 0;
    return r;
  }

  // The line every member logs about a new round.
  std::string describe(const RoundMembers& next) const {
    const int n = static_cast<int>(next.members.size()), world = n * c_.nproc_per_node;
    const std::string restart = "restart " + std::to_string(restarts_) + "/" + std::to_string(c_.max_restarts);
    std::string changes;
    for (int id : next.left) {
      auto it = why_left_.find(id);
      if (!(next_cause_.find("node " + std::to_string(id) + " ") != std::string::npos))
        changes += (changes.empty() ? "" : "; ") +
                   (it != why_left_.end() ? it->second : "node " + std::to_string(id) + " did not come back");
    }
    if (!next.joined.empty())
      changes += (changes.empty() ? "" : "; ") + name_nodes(next.joined) + " joined";
    const std::string size = std::to_string(n) + (n == 1 ? " node" : " nodes") + ", world size " + std::to_string(world);
    if (previous_.empty())
      return c_.min_nodes < c_.nnodes ? "rendezvous round 0: " + name_nodes(next.members) + ", world size " +
                                            std::to_string(world)
                                      : "";
    if (next.left.empty() && next.joined.empty())
      return restart + " (cause: " + next_cause_ + "): starting a new group of " + std::to_string(world) + " worker(s)";
    std::string all = next_cause_;
    if (!changes.empty()) all += (all.empty() ? "" : "; ") + changes;
    return all + ": continuing with " + size +
           (next_counted_ ? " (" + restart + ")" : " (a membership change: not counted against --max-restarts)");
  }

  const LaunchConfig& c_;
  std::unique_ptr<dist::TCPStore> store_;
  std::string nonce_;
  Clock::time_point next_tick_{}, next_beat_{};
  int64_t beats_ = 0;
  // node 0's state
  std::map<int, Beat> beats_seen_;
  std::map<int, std::string> why_left_;  // id -> "node 1 lost (...)" for nodes leaving the current round
  std::vector<int> previous_;            // the members of the last round formed
  std::string stop_cause_, next_cause_;
  bool next_counted_ = false;
  bool admitting_ = false;  // the current round was stopped to admit newcomers
  int restarts_ = 0;
  int64_t last_failure_step_ = -1;
};

// Starts this node's workers of one round and supervises them until they have all ended.
// `round` and `peers` are null for a node on its own.
NodeEnd run_round(const LaunchConfig& c, const Placement& p, const std::string& step_dir, Peers* peers,
                  const Round* round) {
  pid_t launcher = ::getpid();
  std::vector<Worker> workers;
  std::vector<Stream> streams;
  for (int local = 0; local < c.nproc_per_node; ++local) {
    ::unlink((step_dir + "/step." + std::to_string(p.group_rank * c.nproc_per_node + local)).c_str());
  }
  for (int local = 0; local < c.nproc_per_node; ++local) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
      throw_pipe_failed("the pipes for local rank " + std::to_string(local) + "'s output");
    Worker w;
    w.local_rank = local;
    w.rank = p.group_rank * c.nproc_per_node + local;
    // Block our signals across fork(): a signal meant for the worker that arrived before exec
    // would otherwise run the launcher's handler in the child and be lost.
    sigset_t block, old;
    sigemptyset(&block);
    for (int sig : kHandledSignals) sigaddset(&block, sig);
    sigprocmask(SIG_BLOCK, &block, &old);
    w.pid = ::fork();
    if (w.pid == 0) {
      for (int sig : kHandledSignals) ::signal(sig, SIG_DFL);
      sigprocmask(SIG_SETMASK, &old, nullptr);  // pending signals now act with default dispositions
      exec_worker(c, p, local, step_dir, out[1], err[1], launcher);
    }
    sigprocmask(SIG_SETMASK, &old, nullptr);
    if (w.pid < 0) {
      const int e = errno;
      throw std::runtime_error(
          "cannot start local rank " + std::to_string(local) + ": fork failed: " + std::strerror(e) +
          (e == EAGAIN || e == ENOMEM ? " (the limit on processes and threads, `ulimit -u`, or memory)" : ""));
    }
    ::setpgid(w.pid, w.pid);  // also here, so it holds before we ever signal the group
    ::close(out[1]);
    ::close(err[1]);
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    std::string prefix = "[rank " + std::to_string(w.rank) + "] ";
    streams.push_back({out[0], STDOUT_FILENO, prefix, ""});
    streams.push_back({err[0], STDERR_FILENO, prefix, ""});
    workers.push_back(w);
  }

  NodeEnd end;
  bool stopping = false, killed = false;
  Clock::time_point kill_at, all_exited_at, stop_at;
  bool all_exited = false;
  std::optional<std::string> store_error;
  auto stop = [&]() {
    stopping = true;
    stop_at = Clock::now();
    kill_at = stop_at + c.kill_grace;
    signal_groups(workers, SIGTERM, false);
    signal_groups(workers, SIGCONT, false);  // a stopped worker acts on SIGTERM only once continued
  };

  while (true) {
    std::vector<pollfd> fds{{g_signal_pipe[0], POLLIN, 0}};
    for (auto& s : streams) {
      if (s.fd >= 0) fds.push_back({s.fd, POLLIN, 0});
    }
    ::poll(fds.data(), fds.size(), 50);

    // Signals that reached the launcher: forward to every worker, then stop.
    unsigned char sigs[64];
    ssize_t nsig = ::read(g_signal_pipe[0], sigs, sizeof(sigs));
    for (ssize_t i = 0; i < nsig; ++i) {
      int sig = sigs[i];
      if (sig == SIGCHLD) continue;
      if (!stopping) {
        say(std::string("received ") + signal_name(sig) + ", forwarding it to the workers");
        signal_groups(workers, sig, false);
        signal_groups(workers, SIGCONT, false);
        stopping = true;
        kill_at = Clock::now() + c.kill_grace;
        end = {.kind = EndKind::aborted,
               .cause = std::string("node ") + std::to_string(c.node_rank) + "'s launcher received " + signal_name(sig),
               .exit_code = 128 + sig};
      } else if (sig == SIGINT && !killed) {  // a second Ctrl-C: no more patience
        signal_groups(workers, SIGKILL, true);
        killed = true;
      }
    }

    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      for (auto& s : streams) {
        if (s.fd == fds[i].fd) pump(s);
      }
    }

    for (auto& w : workers) {
      if (w.exited || ::waitpid(w.pid, &w.status, WNOHANG) != w.pid) continue;
      w.exited = true;
      if (minidl::dist::exited_ok(w.status)) continue;
      // The first failure, or one killed by a signal soon after a first plain exit: a worker
      // killed with -9 takes the others down with it, and they may be reaped first.
      const bool by_signal = WIFSIGNALED(w.status) && WTERMSIG(w.status) != SIGTERM;
      const bool primary = !stopping || (end.kind == EndKind::failed && !end.by_signal && by_signal &&
                                         Clock::now() - stop_at < std::chrono::milliseconds(500));
      if (!primary) continue;
      const int64_t step = dist::read_step(step_dir, w.rank);
      std::string cause = "rank " + std::to_string(w.rank) +
                          (c.nnodes > 1 ? " (node " + std::to_string(c.node_rank) + ")" : "") + " " +
                          minidl::dist::describe_exit(w.status) + (step >= 0 ? " at step " + std::to_string(step) : "");
      for (const auto& other : workers) {
        if (!other.exited && minidl::dist::is_stopped(other.pid))
          cause += "; rank " + std::to_string(other.rank) + " (pid " + std::to_string(other.pid) +
                   ") was stopped (SIGSTOP?) and hung the others' collectives";
      }
      if (!stopping) {
        say("rank " + std::to_string(w.rank) + " (local rank " + std::to_string(w.local_rank) + ", pid " +
            std::to_string(w.pid) + ") " + minidl::dist::describe_exit(w.status) +
            (step >= 0 ? " at step " + std::to_string(step) : "") + "; stopping the other workers");
        stop();
        if (peers) {
          try {
            peers->request_stop(round->index);
          } catch (const std::exception& e) {
            store_error = e.what();
          }
        }
      } else {
        say("rank " + std::to_string(w.rank) + " " + minidl::dist::describe_exit(w.status) +
            ": that is the cause of the failure");
      }
      end = {.kind = EndKind::failed,
             .step = step,
             .by_signal = by_signal,
             .usage = WIFEXITED(w.status) && WEXITSTATUS(w.status) == 2,
             .cause = cause};
    }

    if (peers && !stopping && !store_error) {
      try {
        if (peers->stop_requested(*round)) {
          say(peers->stop_cause() + "; stopping this node's workers");
          stop();
          end.kind = EndKind::stopped;
        }
      } catch (const std::exception& e) {
        store_error = e.what();
      }
      if (store_error) {
        say("lost the launchers' store on node 0 (" + c.master_addr + ":" + std::to_string(c.master_port) +
            "): " + *store_error + "; node 0 hosts the run's store, the run cannot go on without it: stopping this "
            "node's workers");
        if (!stopping) stop();
        end = {.kind = EndKind::aborted, .cause = "failed: lost the launchers' store on node 0: " + *store_error};
      }
    }

    if (stopping && !killed && Clock::now() >= kill_at) {
      signal_groups(workers, SIGKILL, true);
      killed = true;
    }
    bool done = std::all_of(workers.begin(), workers.end(), [](const Worker& w) { return w.exited; });
    if (done && !all_exited) {
      all_exited = true;
      all_exited_at = Clock::now();
      // Leave nothing behind: whatever a stopped worker started dies with its process group.
      if (stopping) signal_groups(workers, SIGKILL, true);
    }
    // Output still buffered in the pipes gets a moment after the last worker ends; a pipe held
    // open by a stray grandchild does not keep the launcher alive.
    bool streams_open = std::any_of(streams.begin(), streams.end(), [](const Stream& s) { return s.fd >= 0; });
    if (all_exited && (!streams_open || Clock::now() - all_exited_at > std::chrono::seconds(1))) break;
  }
  for (auto& s : streams) {
    if (s.fd < 0) continue;
    pump(s);  // non-blocking: what is there
    if (s.fd >= 0) {
      if (!s.partial.empty()) write_all(s.dest, s.prefix + s.partial + "\n");
      ::close(s.fd);
    }
  }
  if (store_error) throw std::runtime_error(end.cause.substr(std::string("failed: ").size()));
  return end;
}

// One node on its own (or several without restarts, each on its own): rounds decided here.
int run_alone(const LaunchConfig& c, const std::string& step_dir) {
  int64_t last_failure_step = -1;
  for (int round = 0;; ++round) {
    // a fresh store for each new group
    const uint16_t port = round == 0 ? c.master_port : dist::find_free_port(c.master_addr);
    const NodeEnd end = run_round(c, {round, port, c.node_rank, c.nnodes}, step_dir, nullptr, nullptr);
    const Verdict v = decide({end}, round, c.max_restarts, last_failure_step);
    if (v.kind == VerdictKind::restart) {
      say("restart " + std::to_string(round + 1) + "/" + std::to_string(c.max_restarts) + " (cause: " + v.message +
          "): starting a new group of " + std::to_string(c.nproc_per_node * c.nnodes) + " worker(s)");
      last_failure_step = v.step;
      continue;
    }
    if (v.kind == VerdictKind::done) return 0;
    say(v.message);
    return end.kind == EndKind::aborted ? end.exit_code : v.kind == VerdictKind::give_up_usage ? 2 : 1;
  }
}

// Several nodes with restarts or elastic sizes: node 0 forms each round and decides its end.
int run_together(const LaunchConfig& c, const std::string& step_dir) {
  Peers peers(c);
  for (int index = peers.first_round();;) {
    const std::optional<Round> round = peers.join(index);
    if (!round) {
      const int status = peers.over_status();
      say("the run ended (exit status " + std::to_string(status) + ") before node " + std::to_string(c.node_rank) +
          " was admitted");
      return status;
    }
    if (!round->message.empty()) say(round->message);
    const Placement p{round->index, round->port, round->group_rank, static_cast<int>(round->members.size())};
    const NodeEnd end = run_round(c, p, step_dir, &peers, &*round);
    const Verdict v = peers.settle(*round, end);
    if (v.kind == VerdictKind::restart) {
      index = round->index + 1;
      continue;
    }
    const int status =
        end.kind == EndKind::aborted ? end.exit_code
        : v.kind == VerdictKind::done ? 0
        : v.kind == VerdictKind::give_up_usage ? 2
                                                : 1;
    peers.finish(*round, status);
    if (v.kind != VerdictKind::done) say(v.message);
    return status;
  }
}

}  // namespace

int run_workers(const LaunchConfig& c) {
  install_signal_handlers();
  const dist::StepDir step_dir;  // the workers' step files
  if (c.nnodes > 1 && (c.max_restarts > 0 || c.min_nodes < c.nnodes)) return run_together(c, step_dir.path());
  return run_alone(c, step_dir.path());
}

}  // namespace minidl::launcher
