// tools/peers.h — the launchers of a multi-node minidl-run meeting in a store: node 0's launcher
// hosts a TCPStore on --master-port, forms every round of the run from the live launchers that
// ask for it (tools/elastic_membership.h: who, in which order) and decides how each round ends
// (tools/round_end.h); every launcher sends a heartbeat there. See worker_group.h for the
// behaviour, this file for the keys.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "minidl/dist/store.h"
#include "tools/elastic_membership.h"
#include "tools/round_end.h"
#include "tools/worker_group.h"

namespace minidl::launcher {

using Clock = std::chrono::steady_clock;

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
    for (size_t k = 0; k < members.size(); ++k) {
      if (k > 0) s += ' ';
      s += std::to_string(members[k]) + ":" + nonces[k];
    }
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
//   <r>/stop (its cause), <r>/end/<id>, <r>/verdict   ending round r;  over: the run's exit status
//   finished             how many members have read the last verdict
// A node id is the launcher's --node-rank. Every call comes from the supervisor loop's one thread.
class Peers {
 public:
  explicit Peers(const LaunchConfig& c);

  // The round a launcher takes part in first: 0 for node 0; the one running now for the others
  // (a launcher that starts late waits for the next round).
  int first_round() { return coordinator() ? 0 : std::stoi(store_->get("minidl-run/open")); }

  // Takes part in round `index` — or, if node 0 leaves this launcher out (it came too late, or
  // MAX nodes are there), in a later one. Node 0 closes each round (torchrun's rule: at once
  // with MAX nodes, last_call after MIN). Returns nothing when the run ended first.
  std::optional<Round> join(int index);

  // Heartbeat, and on node 0 the check of everyone else's; throttled to heartbeat_interval.
  void tick();

  // Whether this round's workers must stop: another node asked (its workers failed), or, on
  // node 0, a member's heartbeat stopped or a newcomer waits to be admitted.
  bool stop_requested(const Round& r);
  // Why the workers stop: "another node failed", "node 1 lost (...)", "node 1 waits to join".
  const std::string& stop_cause() const { return stop_cause_; }
  void request_stop(int index, const std::string& cause = "another node failed");

  // Posts this node's end of the round and returns the common verdict (node 0 decides).
  Verdict settle(const Round& r, const NodeEnd& mine);

  // The end of the run: node 0 tells launchers still waiting to be admitted, and keeps the store
  // up until every member has read the verdict.
  void finish(const Round& r, int status);
  // For a launcher that was never admitted: the run's exit status.
  int over_status() { return std::stoi(store_->get("minidl-run/over")); }

 private:
  struct Beat {
    std::string value;
    Clock::time_point changed;
  };
  static std::string key(int round, const std::string& name);
  bool coordinator() const { return c_.node_rank == 0; }
  bool alive(int id) const;
  std::string lost_cause(int id) const;
  // Live launchers that asked for round `index`, by id.
  std::vector<int> present(int index);
  // Live launchers asking for the round after r that are not in r.
  std::vector<int> newcomers_of(const Round& r);

  // Node 0's verdict: a node that left ends the round like a failure (torchrun's workers see
  // their peers vanish: a restart that counts, with the survivors if MIN remain); a round
  // stopped only to admit newcomers restarts without counting (torchrun: "membership changes do
  // not count as retries"); anything else as on one node.
  Verdict decide_round(const Round& r, const std::vector<NodeEnd>& ends, const std::vector<int>& left);

  // Node 0 forms round `index`: waits for the rendezvous to close, publishes the round.
  Round form(int index);

  // The line every member logs about a new round.
  std::string describe(const RoundMembers& next) const;

  const LaunchConfig& c_;
  std::unique_ptr<minidl::dist::TCPStore> store_;
  std::string nonce_;
  Clock::time_point next_tick_{}, next_beat_{};
  int64_t beats_ = 0;
  // node 0's state
  std::map<int, Beat> beats_seen_;
  std::map<int, std::string> why_left_;  // id -> "node 1 lost (...)" for nodes leaving the current round
  std::vector<int> previous_;  // the members of the last round formed
  std::string stop_cause_;  // why the current round's workers were stopped
  std::string next_cause_;  // a worker failure that ended the last round ("" if none)
  bool next_counted_ = false;  // the next round is a restart that counts
  bool admitting_ = false;  // the current round was stopped to admit newcomers
  int restarts_ = 0;
  int64_t last_failure_step_ = -1;
};

}  // namespace minidl::launcher
