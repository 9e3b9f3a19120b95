// tools/worker_group.h — the process management behind minidl-run: start this node's workers,
// prefix their output lines with their rank, forward signals, stop everyone when one fails.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace minidl::launcher {

struct LaunchConfig {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  uint16_t master_port = 0;
  std::vector<std::string> command;  // PROGRAM ARGS...
  std::chrono::milliseconds kill_grace = std::chrono::seconds(3);  // SIGTERM, then SIGKILL
};

// Runs the workers of this node until they all end; returns the launcher's exit status:
// 0 when every worker exited 0, 1 when a worker failed (named on stderr), 128 + signal when the
// launcher itself was asked to stop (SIGINT, SIGTERM, SIGHUP).
int run_workers(const LaunchConfig& config);

}  // namespace minidl::launcher
