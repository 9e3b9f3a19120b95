// dist/distributed.cpp — the process-wide state behind dist::init(): world info, the rendezvous
// store, the default process group, and the registry of backend factories. See distributed.h.
#include "minidl/dist/distributed.h"

#include <unistd.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>

#include "minidl/dist/host_staging.h"
#include "minidl/dist/process_group_gloo.h"
#include "minidl/dist/process_group_hierarchical.h"
#include "minidl/dist/process_group_shm.h"

namespace minidl::dist {

namespace {

struct State {
  bool initialized = false;
  WorldInfo info;
  std::unique_ptr<TCPStore> store;
  std::unique_ptr<ProcessGroup> group;
};

State& state() {
  static State s;
  return s;
}

std::mutex& state_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

std::string auto_backend(const std::vector<std::string>& host_ids) {
  std::map<std::string, int> ranks_per_host;
  for (const std::string& id : host_ids) ++ranks_per_host[id];
  if (ranks_per_host.size() <= 1) return "shm";
  for (const auto& [id, n] : ranks_per_host)
    if (n > 1) return "hierarchical";
  return "gloo";
}

namespace {

std::map<std::string, BackendFactory>& registry() {
  static std::map<std::string, BackendFactory> backends = [] {
    std::map<std::string, BackendFactory> b;
    // CUDA tensors reach the CPU backends through host copies (dist/host_staging.h); CPU tensors directly
#ifdef MINIDL_WITH_GLOO
    b["gloo"] = [](TCPStore& store, int rank, int size, ProcessGroupOptions options) -> std::unique_ptr<ProcessGroup> {
      return std::make_unique<HostStagedProcessGroup>(std::make_unique<ProcessGroupGloo>(store, rank, size, options));
    };
    // hierarchical: shared memory inside each host, Gloo between the hosts.
    b["hierarchical"] = [](TCPStore& store, int rank, int size,
                           ProcessGroupOptions options) -> std::unique_ptr<ProcessGroup> {
      return std::make_unique<HostStagedProcessGroup>(std::make_unique<ProcessGroupHierarchical>(store, rank, size, options));
    };
#endif
    b["shm"] = [](TCPStore& store, int rank, int size, ProcessGroupOptions options) -> std::unique_ptr<ProcessGroup> {
      return std::make_unique<HostStagedProcessGroup>(std::make_unique<ProcessGroupShm>(store, rank, size, options));
    };
    // auto: shared memory when every rank is on this host; Gloo when every host runs one rank;
    // else hierarchical (every rank reads the same host ids, so every rank makes the same choice).
    b["auto"] = [shm = b["shm"], gloo = b.count("gloo") ? b["gloo"] : BackendFactory(),
                 hierarchical = b.count("hierarchical") ? b["hierarchical"] : BackendFactory()](
                    TCPStore& store, int rank, int size, ProcessGroupOptions options) -> std::unique_ptr<ProcessGroup> {
      static int checks = 0;  // names the keys of each check; same order on every rank
      const std::vector<std::string> ids =
          rank_host_ids(store, rank, size, "minidl/auto/" + std::to_string(checks++) + "/", options.timeout);
      const std::string pick = auto_backend(ids);
      if (pick == "shm") return shm(store, rank, size, options);
      if (!gloo)
        throw std::runtime_error("dist::init: the ranks run on several hosts, which needs Gloo, and this build has none");
      return pick == "gloo" ? gloo(store, rank, size, options) : hierarchical(store, rank, size, options);
    };
    return b;
  }();
  return backends;
}

State& initialized_state(const char* fn) {
  State& s = state();
  if (!s.initialized)
    throw std::runtime_error(std::string("dist::") + fn +
                             ": the default process group is not initialised (call dist::init() first)");
  return s;
}

std::string available_backends() {
  std::string names;
  for (const auto& [name, factory] : registry()) names += (names.empty() ? "" : ", ") + name;
  return names.empty() ? "none" : names;
}

void log_line(const std::string& message) {
  std::string line = message + "\n";
  (void)!::write(STDERR_FILENO, line.data(), line.size());  // one write: lines do not interleave
}

// "2, 5, 7": the ranks in `ranks`, the first 10 of them, then how many more.
std::string rank_list(const std::vector<int>& ranks) {
  constexpr size_t kShown = 10;
  std::string out;
  for (size_t i = 0; i < std::min(ranks.size(), kShown); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > kShown) out += " and " + std::to_string(ranks.size() - kShown) + " more";
  return out;
}

// Every rank sets its key, then waits for all the others', saying who is missing every
// progress_interval and naming them in the error when the timeout passes. A rank that loses the
// store meanwhile (rank 0, its server, gave up or died) names the ranks it last saw missing:
// that error, not the bare store one, is often the first a launcher reports.
void rendezvous(TCPStore& store, const WorldInfo& info, const InitOptions& options) {
  using std::chrono::milliseconds;
  auto key = [](int r) { return "minidl/init/rank/" + std::to_string(r); };
  store.set(key(info.rank), "");
  std::vector<std::string> keys;
  for (int r = 0; r < info.world_size; ++r) keys.push_back(key(r));
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + options.timeout;
  std::string who = "the other ranks";  // whom this rank waits for, as last seen
  auto since_start = [&] {
    return format_seconds(std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start));
  };
  while (true) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    const milliseconds slice = options.progress_interval.count() > 0 ? std::min(left, options.progress_interval) : left;
    std::vector<int> missing;
    try {
      if (store.try_wait(keys, std::max(milliseconds(0), slice))) return;
      for (int r = 0; r < info.world_size; ++r)
        if (!store.check({key(r)})) missing.push_back(r);
    } catch (const std::exception& e) {
      throw std::runtime_error("dist::init: rank " + std::to_string(info.rank) + ": lost the store at " +
                               info.master_addr + ":" + std::to_string(info.master_port) + " after " + since_start() +
                               " while waiting for " + who + " to join (rank 0 serves it: did it give up or die?): " +
                               e.what());
    }
    if (missing.empty()) return;
    const auto waited = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
    who = "rank(s) " + rank_list(missing) + " of " + std::to_string(info.world_size);
    if (std::chrono::steady_clock::now() >= deadline)
      throw std::runtime_error("dist::init: rank " + std::to_string(info.rank) + ": " + who + " did not join within " +
                               format_seconds(options.timeout) + " (did they start, with MASTER_ADDR:MASTER_PORT " +
                               info.master_addr + ":" + std::to_string(info.master_port) + "?)");
    log_line("dist::init: rank " + std::to_string(info.rank) + " is waiting for " + who + " to join (" +
             format_seconds(waited) + " so far, gives up after " + format_seconds(options.timeout) + ")");
  }
}

}  // namespace

void register_backend(std::string name, BackendFactory factory) {
  std::lock_guard<std::mutex> lock(state_mutex());
  registry()[std::move(name)] = std::move(factory);
}

bool is_backend_available(const std::string& name) {
  std::lock_guard<std::mutex> lock(state_mutex());
  return registry().count(name) > 0;
}

void init(const InitOptions& options) {
  std::lock_guard<std::mutex> lock(state_mutex());
  State& s = state();
  if (s.initialized) throw std::runtime_error("dist::init: already initialised (call dist::shutdown() first)");
  const std::string& backend = options.backend;
  auto it = registry().find(backend);
  if (it == registry().end()) {
    if (backend == "nccl") throw std::runtime_error("dist::init: NCCL backend is not available in this build");
    throw std::runtime_error("dist::init: unknown backend '" + options.backend +
                             "' (available: " + available_backends() + ")");
  }
  WorldInfo info = world_info_from_env();
  auto store =
      std::make_unique<TCPStore>(info.master_addr, TCPStoreOptions{.port = info.master_port,
                                                                   .is_server = info.rank == 0,
                                                                   .timeout = options.timeout,
                                                                   .progress_interval = options.progress_interval});
  rendezvous(*store, info, options);
  std::unique_ptr<ProcessGroup> group = it->second(
      *store, info.rank, info.world_size, ProcessGroupOptions{.timeout = options.timeout, .debug = std::nullopt});
  s.info = info;
  s.store = std::move(store);
  s.group = std::move(group);
  s.initialized = true;
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(state_mutex());
  return state().initialized;
}

void shutdown() {
  std::unique_ptr<ProcessGroup> group;
  std::unique_ptr<TCPStore> store;
  {
    std::lock_guard<std::mutex> lock(state_mutex());
    State& s = state();
    group = std::move(s.group);
    store = std::move(s.store);
    s.info = WorldInfo{};
    s.initialized = false;
  }
  group.reset();  // drains its queue and joins its thread, then the store goes
  store.reset();
}

int rank() { return initialized_state("rank").info.rank; }
int world_size() { return initialized_state("world_size").info.world_size; }
int local_rank() { return initialized_state("local_rank").info.local_rank; }
int local_world_size() { return initialized_state("local_world_size").info.local_world_size; }
const WorldInfo& world_info() { return initialized_state("world_info").info; }
ProcessGroup& default_group() { return *initialized_state("default_group").group; }
TCPStore& default_store() { return *initialized_state("default_store").store; }

void all_reduce(Tensor& t, ReduceOp op) { initialized_state("all_reduce").group->all_reduce(t, op); }
void broadcast(Tensor& t, int root) { initialized_state("broadcast").group->broadcast(t, root); }
std::vector<Tensor> all_gather(const Tensor& t) { return initialized_state("all_gather").group->all_gather(t); }
Tensor reduce_scatter(const Tensor& input, ReduceOp op) {
  return initialized_state("reduce_scatter").group->reduce_scatter(input, op);
}
void barrier() { initialized_state("barrier").group->barrier(); }
std::vector<std::string> all_gather_object(const std::string& bytes) {
  return initialized_state("all_gather_object").group->all_gather_object(bytes);
}
void broadcast_object(std::string& bytes, int root) {
  initialized_state("broadcast_object").group->broadcast_object(bytes, root);
}

}  // namespace minidl::dist
