// tools/peers.cpp — the launchers' store: rounds formed and ended by node 0. See peers.h.
#include "tools/peers.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <thread>

#include "minidl/dist/socket.h"

namespace minidl::launcher {

namespace dist = minidl::dist;

Peers::Peers(const LaunchConfig& c) : c_(c) {
  const bool loopback = c.master_addr == "127.0.0.1" || c.master_addr == "localhost";
  store_ = std::make_unique<dist::TCPStore>(
      c.master_addr, dist::TCPStoreOptions{.port = c.master_port,
                                           .is_server = c.node_rank == 0,
                                           .timeout = c.join_timeout,
                                           .bind_all_interfaces = c.node_rank == 0 && !loopback});
  nonce_ = std::to_string(::getpid()) + "." + std::to_string(Clock::now().time_since_epoch().count() % 1000000007);
  tick();
}

std::optional<Round> Peers::join(int index) {
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

void Peers::tick() {
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

bool Peers::stop_requested(const Round& r) {
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

void Peers::request_stop(int index, const std::string& cause) { store_->set(key(index, "stop"), cause); }

Verdict Peers::settle(const Round& r, const NodeEnd& mine) {
  store_->set(key(r.index, "end/" + std::to_string(c_.node_rank)), mine.encode());
  if (!coordinator()) {
    // a launcher that was stopped (a signal) leaves the run; the others go on without it
    if (mine.kind == EndKind::aborted) return {VerdictKind::give_up, mine.cause, mine.step};
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

void Peers::finish(const Round& r, int status) {
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

std::string Peers::key(int round, const std::string& name) {
  return "minidl-run/" + std::to_string(round) + "/" + name;
}

bool Peers::alive(int id) const {
  if (id == 0) return true;
  auto it = beats_seen_.find(id);
  return it != beats_seen_.end() && Clock::now() - it->second.changed <= c_.heartbeat_timeout;
}

std::string Peers::lost_cause(int id) const {
  auto it = beats_seen_.find(id);
  const double ago =
      it == beats_seen_.end() ? 0.0 : std::chrono::duration<double>(Clock::now() - it->second.changed).count();
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", ago);
  return "node " + std::to_string(id) + " lost (heartbeat stopped " + buf + " s ago)";
}

std::vector<int> Peers::present(int index) {
  std::vector<int> ids;
  for (int id = 0; id < c_.nnodes; ++id) {
    if (alive(id) && store_->check({key(index, "want/" + std::to_string(id))})) ids.push_back(id);
  }
  return ids;
}

std::vector<int> Peers::newcomers_of(const Round& r) {
  std::vector<int> ids;
  for (int id : present(r.index + 1))
    if (std::find(r.members.begin(), r.members.end(), id) == r.members.end()) ids.push_back(id);
  return ids;
}

Verdict Peers::decide_round(const Round& r, const std::vector<NodeEnd>& ends, const std::vector<int>& left) {
  if (ends[0].kind == EndKind::aborted) return {VerdictKind::give_up, ends[0].cause, ends[0].step};
  std::vector<int> survivors;
  std::string cause;
  for (int id : r.members) {
    if (std::find(left.begin(), left.end(), id) == left.end())
      survivors.push_back(id);
    else
      cause += (cause.empty() ? "" : "; ") + why_left_[id];
  }
  if (!left.empty()) {
    const RoundMembers next = next_round(r.members, survivors, c_.min_nodes, c_.nnodes);
    if (!next.error.empty()) return {VerdictKind::give_up, "failed: " + cause + ": " + next.error, -1};
    if (restarts_ >= c_.max_restarts)
      return {
          VerdictKind::give_up,
          "failed: " + cause + "; no restarts left (--max-restarts " + std::to_string(c_.max_restarts) + " used up)",
          -1};
    ++restarts_;
    next_cause_.clear();  // the next round's line names the nodes that left (why_left_)
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

Round Peers::form(int index) {
  store_->set("minidl-run/open", std::to_string(index));
  store_->set(key(index, "want/0"), nonce_);
  const auto start = Clock::now(), deadline = start + c_.join_timeout;
  std::optional<Clock::time_point> min_reached;
  std::vector<int> ids;
  while (true) {
    tick();
    ids = present(index);
    const int n = static_cast<int>(ids.size());
    if (n < c_.min_nodes)
      min_reached.reset();
    else if (!min_reached)
      min_reached = Clock::now();
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

std::string Peers::describe(const RoundMembers& next) const {
  const int n = static_cast<int>(next.members.size()), world = n * c_.nproc_per_node;
  const std::string restart = "restart " + std::to_string(restarts_) + "/" + std::to_string(c_.max_restarts);
  std::string changes;
  for (int id : next.left) {
    auto it = why_left_.find(id);
    changes += (changes.empty() ? "" : "; ") +
               (it != why_left_.end() ? it->second : "node " + std::to_string(id) + " did not come back");
  }
  if (!next.joined.empty()) changes += (changes.empty() ? "" : "; ") + name_nodes(next.joined) + " joined";
  const std::string size = std::to_string(n) + (n == 1 ? " node" : " nodes") + ", world size " + std::to_string(world);
  if (previous_.empty())
    return c_.min_nodes < c_.nnodes
               ? "rendezvous round 0: " + name_nodes(next.members) + ", world size " + std::to_string(world)
               : "";
  if (next.left.empty() && next.joined.empty())
    return restart + " (cause: " + next_cause_ + "): starting a new group of " + std::to_string(world) + " worker(s)";
  std::string all = next_cause_;
  if (!changes.empty()) all += (all.empty() ? "" : "; ") + changes;
  return all + ": continuing with " + size +
         (next_counted_ ? " (" + restart + ")" : " (a membership change: not counted against --max-restarts)");
}

}  // namespace minidl::launcher
