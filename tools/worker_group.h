// tools/worker_group.h — the process management behind minidl-run: start this node's workers,
// prefix their output lines with their rank, forward signals, stop everyone when one fails,
// and — with max_restarts > 0 — start a fresh group, up to max_restarts times.
//
// Restarts (torchrun's --max-restarts): when a worker fails, the others are stopped (SIGTERM +
// SIGCONT, SIGKILL after kill_grace), and a new group is started on a new MASTER_PORT (a new
// rendezvous round: a fresh store and process group). Each restart is logged with its cause:
// the rank, its exit status or signal, the training step it was in, and any worker found stopped
// (SIGSTOP: it hung the others' collectives). The run gives up — exit 1, a clear message — when
// max_restarts restarts are used up or when a failure happens at the same step as the previous
// one (a deterministic crash that restarting would only repeat); a worker that exits with
// status 2 (a bad flag or input, as `train` reports them) is never restarted, and the launcher
// exits 2 as well. Workers see:
//   MINIDL_RESTART_COUNT  0 for the first group, then 1, 2, ... (torchrun: TORCHELASTIC_RESTART_COUNT)
//   MINIDL_MAX_RESTARTS   max_restarts
//   MINIDL_STEP_DIR       a directory where a worker may keep its current step in step.<RANK>
//                         (train does); the launcher reads it to tell which step failed.
// Several nodes with max_restarts > 0, or an elastic size (--nnodes MIN:MAX): node 0's launcher
// hosts a TCPStore on master_port (the rendezvous endpoint) and every launcher joins it. Node 0
// forms each round from the live launchers that asked for it — at once when MAX are there, else
// last_call after MIN are (torchrun's rule; a fixed N is N:N) — gives its members contiguous node
// ranks (GROUP_RANK; node 0 stays 0, the others keep their order, newcomers come last), and a
// fresh MASTER_PORT. A failure on any node stops the workers of every node; node 0 decides
// restart or give-up for all, and every launcher starts its part of the new group. Each launcher
// writes a heartbeat every heartbeat_interval; node 0 declares a node lost when its heartbeat has
// not changed for heartbeat_timeout (6 s at most by default); a node whose launcher was stopped
// (a signal) says so and has left at once. Either ends the round like a failure — a restart that
// counts, as in torchrun, whose surviving workers see their peers vanish — with the nodes left,
// if at least MIN; fewer is the end of the run. A launcher that starts while a round runs waits for the
// next one; below MAX the running round is ended to admit it at once, and that restart does not
// count (torchrun's agent: "membership changes do not count as retries"). Each new round is logged
// by every member with its cause ("node 1 lost (heartbeat stopped 5.0 s ago): continuing with 1
// node, world size 2 (restart 1/3)"). MINIDL_RESTART_COUNT counts every new group, membership
// changes included (torchrun's TORCHELASTIC_RESTART_COUNT counts failures only; train resumes
// from --out whenever it is above 0). Node 0 is the store: losing it ends the run on every node
// (a launcher that loses the store stops its workers and exits 1).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace minidl::launcher {

struct LaunchConfig {
  int nproc_per_node = 1;
  int nnodes = 1;  // with min_nodes < nnodes: elastic, from min_nodes to nnodes nodes (--nnodes MIN:MAX)
  int min_nodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  uint16_t master_port = 0;
  std::vector<std::string> command;  // PROGRAM ARGS...
  std::chrono::milliseconds kill_grace = std::chrono::seconds(3);  // SIGTERM, then SIGKILL
  int max_restarts = 0;
  std::chrono::milliseconds heartbeat_interval = std::chrono::seconds(1);
  std::chrono::milliseconds heartbeat_timeout = std::chrono::seconds(5);
  std::chrono::milliseconds join_timeout = std::chrono::seconds(300);  // MIN nodes joining a round
  std::chrono::milliseconds last_call = std::chrono::seconds(30);  // elastic: wait for more than MIN
};

// Runs the workers of this node until they all end (restarting them as configured); returns the
// launcher's exit status: 0 when every worker exited 0, 1 when the run failed (named on stderr),
// 2 when it failed because a worker exited 2 (a bad flag or input), 128 + signal when the launcher itself was asked to stop (SIGINT, SIGTERM, SIGHUP).
int run_workers(const LaunchConfig& config);

}  // namespace minidl::launcher
