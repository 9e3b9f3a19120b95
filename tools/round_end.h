// tools/round_end.h — how one round of minidl-run's workers ended on a node (NodeEnd), what
// happens next for the whole run (Verdict), and the rule from the one to the other (decide):
// done, a restart, or giving up. Both travel between launchers as text on the store.
#pragma once
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace minidl::launcher {

// How this node's part of one round ended.
enum class EndKind : char {
  ok = 'o',  // every worker exited 0
  failed = 'f',  // a worker failed
  stopped = 's',  // stopped for another node: its failure, its loss, or a newcomer to admit
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
inline Verdict decide(const std::vector<NodeEnd>& ends, int restarts_done, int max_restarts,
                      int64_t last_failure_step) {
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

}  // namespace minidl::launcher
