// tools/minidl_run.cpp — minidl-run, the launcher (torchrun's counterpart):
//
//   minidl-run --nproc-per-node N [--nnodes M|MIN:MAX --node-rank K --master-addr A --master-port P]
//              [--max-restarts R] [--rdzv-conf K=V,...] PROGRAM ARGS...
//
// starts N copies of PROGRAM on this node with RANK = K*N + local, WORLD_SIZE = M*N, LOCAL_RANK,
// LOCAL_WORLD_SIZE = N, GROUP_RANK = K, MASTER_ADDR, MASTER_PORT in their environment, prefixes
// their output lines with "[rank R] ", forwards SIGINT/SIGTERM/SIGHUP, and when a worker fails
// stops the others and exits 1 naming the rank and how it ended (2 when the worker exited 2: a
// bad flag or input, passed on) — or, with --max-restarts R,
// starts a fresh group up to R times (worker_group.h: causes logged, a crash that repeats at the
// same step ends the run, several nodes restart together). Bad flags: usage, exit 2.
// torchrun's spellings work too: --nproc_per_node, --standalone, --rdzv-endpoint HOST:PORT,
// --nnodes MIN:MAX (elastic: nodes may leave and join between rounds, worker_group.h), --rdzv-conf.
//
// Defaults: one node; MASTER_ADDR 127.0.0.1; MASTER_PORT a free port on one node, 29500 with
// several (every node must be given the same one). Like torchrun, when OMP_NUM_THREADS is not
// set and N > 1 it is set for the workers — to cores / N rather than torchrun's 1.
// Workers get MINIDL_STORE_TOKEN, the secret their rendezvous store checks: the launcher's own
// if set, else a fresh random one (one node; several nodes need it set, the same on each).
// Workers read stdin from /dev/null and run in their own process groups (a stop signal reaches
// whatever they started, too); they get SIGTERM if the launcher itself is killed.
// Two nodes on one machine:  minidl-run --nproc-per-node 2 --nnodes 2 --node-rank 0 --master-port 29500 ./train
//                            minidl-run --nproc-per-node 2 --nnodes 2 --node-rank 1 --master-port 29500 ./train
// Elastic, 1 or 2 nodes:     the same with --nnodes 1:2 --max-restarts 3 (node 1 may go and come back)
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "minidl/dist/socket.h"
#include "minidl/dist/store.h"
#include "tools/worker_group.h"

namespace {

constexpr const char* kUsage =
    "usage: minidl-run --nproc-per-node N [--nnodes M | MIN:MAX] [--node-rank K] [--master-addr A]\n"
    "                  [--master-port P] [--max-restarts R] [--rdzv-conf K=V,...] PROGRAM [ARGS...]\n"
    "  --nproc-per-node N     workers on this node (default 1)\n"
    "  --nnodes M | MIN:MAX   nodes in the job (default 1); MIN:MAX: elastic, see below\n"
    "  --node-rank K          this node's index in [0, M) or [0, MAX) (default 0); node 0 hosts the rendezvous\n"
    "  --master-addr A        address of the node hosting rank 0 (default 127.0.0.1)\n"
    "  --master-port P        its port (default: a free port with one node, 29500 with several)\n"
    "  --rdzv-endpoint A:P    torchrun's spelling of --master-addr A --master-port P\n"
    "  --standalone           one node on 127.0.0.1 and a free port (torchrun's --standalone)\n"
    "  --rdzv-conf K=V,...    join_timeout=S (default 300), last_call_timeout=S (default 30): how long node 0\n"
    "                         waits for MIN nodes, and then for more up to MAX, when forming a round\n"
    "  --max-restarts R       restart the whole group up to R times when a worker fails (default 0);\n"
    "                         a failure at the same step as the previous one, or an exit status 2\n"
    "                         (a bad flag or input; minidl-run then exits 2 too), is not restarted\n"
    "Each worker gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,\n"
    "MASTER_PORT, MINIDL_RESTART_COUNT (0, then 1, 2, ... for each new group), MINIDL_MAX_RESTARTS and\n"
    "MINIDL_STEP_DIR in its environment, and MINIDL_STORE_TOKEN, the secret their rendezvous store\n"
    "checks (the launcher's, else a random one on one node; several nodes: set the same on each).\n"
    "With several nodes and --max-restarts, or MIN:MAX, the launchers meet on --master-port (node 0's\n"
    "launcher hosts their store), each round's workers get a fresh MASTER_PORT, and a launcher silent\n"
    "for 5 s (heartbeat every 1 s) or stopped by a signal is lost: with --nnodes MIN:MAX the others go on\n"
    "without it while MIN nodes remain (a restart, counted), else the run ends. A launcher started\n"
    "later is admitted at once (the group restarts, not counted) while there are fewer than MAX.\n"
    "Losing node 0 ends the run on every node.\n";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int parse_int(const std::string& flag, const std::string& value, int lo, int hi) {
  size_t used = 0;
  long v = 0;
  try {
    v = std::stol(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size()) throw UsageError(flag + " needs an integer, got '" + value + "'");
  if (v < lo || v > hi) {
    throw UsageError(flag + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + value);
  }
  return static_cast<int>(v);
}

// torchrun's --rdzv-conf KEY=VALUE,...: join_timeout and last_call_timeout, in seconds.
void parse_rdzv_conf(const std::string& conf, minidl::launcher::LaunchConfig& c) {
  std::istringstream in(conf);
  for (std::string item; std::getline(in, item, ',');) {
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    if (eq == std::string::npos || (key != "join_timeout" && key != "last_call_timeout"))
      throw UsageError("--rdzv-conf: '" + item + "' is not join_timeout=SECONDS or last_call_timeout=SECONDS");
    const std::chrono::milliseconds value =
        std::chrono::seconds(parse_int("--rdzv-conf " + key, item.substr(eq + 1), 0, 86400));
    (key == "join_timeout" ? c.join_timeout : c.last_call) = value;
  }
}

minidl::launcher::LaunchConfig parse_args(int argc, char** argv, bool& help) {
  minidl::launcher::LaunchConfig c;
  std::optional<int> port;
  bool standalone = false, nodes_given = false, addr_given = false;
  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      help = true;
      return c;
    }
    if (arg.rfind("--", 0) != 0) break;  // PROGRAM
    std::string name = arg, value;
    bool has_value = false;
    if (auto eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    std::replace(name.begin(), name.end(), '_', '-');  // torchrun accepts --nproc_per_node too
    auto take = [&]() -> std::string {
      if (has_value) return value;
      if (i + 1 >= argc) throw UsageError(name + " needs a value");
      return argv[++i];
    };
    if (name == "--nproc-per-node") {
      c.nproc_per_node = parse_int(name, take(), 1, 4096);
    } else if (name == "--nnodes") {
      std::string v = take();
      if (auto colon = v.find(':'); colon != std::string::npos) {
        c.min_nodes = parse_int(name, v.substr(0, colon), 1, 1024);
        c.nnodes = parse_int(name, v.substr(colon + 1), 1, 1024);
        if (c.min_nodes > c.nnodes)
          throw UsageError("--nnodes " + v + ": MIN " + std::to_string(c.min_nodes) + " is above MAX " +
                           std::to_string(c.nnodes));
      } else {
        c.nnodes = c.min_nodes = parse_int(name, v, 1, 1024);
      }
      nodes_given = true;
    } else if (name == "--rdzv-conf") {
      parse_rdzv_conf(take(), c);
    } else if (name == "--standalone") {
      if (has_value) throw UsageError("--standalone takes no value");
      standalone = true;
    } else if (name == "--max-restarts") {
      c.max_restarts = parse_int(name, take(), 0, 1000000);
    } else if (name == "--rdzv-endpoint") {
      std::string v = take();
      auto colon = v.rfind(':');
      if (colon == std::string::npos || colon == 0)
        throw UsageError("--rdzv-endpoint needs HOST:PORT, got '" + v + "'");
      c.master_addr = v.substr(0, colon);
      port = parse_int(name, v.substr(colon + 1), 1, 65535);
      addr_given = true;
    } else if (name == "--node-rank") {
      c.node_rank = parse_int(name, take(), 0, 65535);
    } else if (name == "--master-addr") {
      c.master_addr = take();
      if (c.master_addr.empty()) throw UsageError("--master-addr must not be empty");
      addr_given = true;
    } else if (name == "--master-port") {
      port = parse_int(name, take(), 1, 65535);
      addr_given = true;
    } else {
      throw UsageError("unknown option " + arg);
    }
  }
  for (; i < argc; ++i) c.command.push_back(argv[i]);
  if (c.command.empty()) throw UsageError("no PROGRAM given");
  if (standalone) {
    if ((nodes_given && c.nnodes != 1) || c.node_rank != 0)
      throw UsageError("--standalone is a single node: it cannot be combined with --nnodes " +
                       std::to_string(c.nnodes) + " or --node-rank");
    if (addr_given)
      throw UsageError("--standalone picks its own address and port: drop --master-addr/--master-port/--rdzv-endpoint");
  }
  if (c.node_rank >= c.nnodes) {
    throw UsageError("--node-rank " + std::to_string(c.node_rank) + " is not below --nnodes " +
                     std::to_string(c.nnodes));
  }
  if (port) {
    c.master_port = static_cast<uint16_t>(*port);
  } else {
    c.master_port = c.nnodes == 1 ? minidl::dist::find_free_port(c.master_addr) : 29500;
  }
  return c;
}

void default_omp_threads(int nproc_per_node) {
  if (nproc_per_node <= 1 || std::getenv("OMP_NUM_THREADS") != nullptr) return;
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  int threads = std::max(1, static_cast<int>(cores) / nproc_per_node);
  ::setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);
  std::cerr << "minidl-run: OMP_NUM_THREADS not set; using " << threads << " per worker (" << cores << " cores / "
            << nproc_per_node << " workers)\n";
}

// The workers' rendezvous store admits only clients with this job's MINIDL_STORE_TOKEN: a fresh
// random one on a single node; with several nodes every launcher must be given the same one.
void default_store_token(const minidl::launcher::LaunchConfig& c) {
  if (!minidl::dist::store_token_from_env().empty()) return;
  if (c.nnodes > 1) {
    std::cerr << "minidl-run: MINIDL_STORE_TOKEN is not set, so the rendezvous store accepts any client; set the "
                 "same secret on every node (e.g. export MINIDL_STORE_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' "
                 "\\n'))\n";
    return;
  }
  ::setenv("MINIDL_STORE_TOKEN", minidl::dist::generate_store_token().c_str(), 1);
}

}  // namespace

int main(int argc, char** argv) {
  minidl::launcher::LaunchConfig config;
  try {
    bool help = false;
    config = parse_args(argc, argv, help);
    if (help) {
      std::cout << kUsage;
      return 0;
    }
  } catch (const UsageError& e) {
    std::cerr << "minidl-run: " << e.what() << "\n" << kUsage;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "minidl-run: " << e.what() << "\n";
    return 2;
  }
  default_omp_threads(config.nproc_per_node);
  try {
    default_store_token(config);
    return minidl::launcher::run_workers(config);
  } catch (const std::exception& e) {
    std::cerr << "minidl-run: " << e.what() << "\n";
    return 1;
  }
}
