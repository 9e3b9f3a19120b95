// tools/elastic_membership.h — who takes part in the next round of an elastic minidl-run
// (--nnodes MIN:MAX), as pure functions: node 0's launcher calls them, tests check them.
//
// A node is named by its id, the --node-rank its launcher was started with; in each round the
// members get contiguous node ranks (GROUP_RANK) in the order of `members`. The next round keeps
// the previous members that are still there, in their order (node 0, the store's host, stays
// node rank 0), then admits newcomers by id, up to MAX; fewer than MIN is the end of the run.
//
//   next_round({0, 1}, {0},    1, 2)  ->  members {0}        left {1}
//   next_round({0},    {0, 1}, 1, 2)  ->  members {0, 1}     joined {1}
//   next_round({0, 1}, {0},    2, 2)  ->  error: "1 node left (node 0), fewer than the minimum 2 ..."
#pragma once
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

namespace minidl::launcher {

struct RoundMembers {
  std::vector<int> members;  // node ids; members[k] gets node rank k
  std::vector<int> left;  // previous members not in this round
  std::vector<int> joined;  // members that were not in the previous round
  std::vector<int> waiting;  // newcomers over MAX: they wait for a free place
  std::string error;  // non-empty: fewer than MIN nodes; the run ends
};

// "node 0", "nodes 0 and 2", "nodes 0, 1 and 3"
inline std::string name_nodes(const std::vector<int>& ids) {
  if (ids.empty()) return "no node";
  std::string s = ids.size() == 1 ? "node " : "nodes ";
  for (size_t i = 0; i < ids.size(); ++i)
    s += (i == 0 ? "" : i + 1 == ids.size() ? " and " : ", ") + std::to_string(ids[i]);
  return s;
}

// previous: the members of the round that ended, in node-rank order (empty before the first);
// present: the nodes registered for the next round and still alive (any order).
inline RoundMembers next_round(const std::vector<int>& previous, std::vector<int> present, int min_nodes,
                               int max_nodes) {
  RoundMembers r;
  std::sort(present.begin(), present.end());
  const auto has = [](const std::vector<int>& v, int id) { return std::find(v.begin(), v.end(), id) != v.end(); };
  for (int id : previous) (has(present, id) ? r.members : r.left).push_back(id);
  for (int id : present) {
    if (has(previous, id)) continue;
    if (static_cast<int>(r.members.size()) < max_nodes) {
      r.members.push_back(id);
      r.joined.push_back(id);
    } else {
      r.waiting.push_back(id);
    }
  }
  if (static_cast<int>(r.members.size()) < min_nodes)
    r.error = std::to_string(r.members.size()) + (r.members.size() == 1 ? " node" : " nodes") + " left (" +
              name_nodes(r.members) + "), fewer than the minimum " + std::to_string(min_nodes) + " (--nnodes " +
              std::to_string(min_nodes) + ":" + std::to_string(max_nodes) + ")";
  return r;
}

// Whether node 0 closes a round's rendezvous now (torchrun's rule): at once with MAX nodes; with
// MIN or more, once last_call has passed since MIN were there; never below MIN.
inline bool rendezvous_closes(int present, int min_nodes, int max_nodes, std::chrono::milliseconds since_min_reached,
                              std::chrono::milliseconds last_call) {
  if (present >= max_nodes) return true;
  return present >= min_nodes && since_min_reached >= last_call;
}

// Whether a running round ends to admit newcomers (torchrun restarts a healthy group when nodes
// wait, unless it is at MAX already).
inline bool admit_now(int members, int newcomers, int max_nodes) { return newcomers > 0 && members < max_nodes; }

}  // namespace minidl::launcher
