// dist/distributed.cpp — the process-wide state behind dist::init(): world info, the rendezvous
// store, the default process group, and the registry of backend factories. See distributed.h.
#include "dist/distributed.h"

#include <map>
#include <mutex>
#include <stdexcept>

#include "dist/process_group_gloo.h"

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

std::map<std::string, BackendFactory>& registry() {
  static std::map<std::string, BackendFactory> backends = [] {
    std::map<std::string, BackendFactory> b;
#ifdef MINIDL_WITH_GLOO
    b["gloo"] = [](TCPStore& store, int rank, int size, ProcessGroupOptions options) -> std::unique_ptr<ProcessGroup> {
      return std::make_unique<ProcessGroupGloo>(store, rank, size, options);
    };
#endif
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

}  // namespace

void register_backend(std::string name, BackendFactory factory) {
  std::lock_guard<std::mutex> lock(state_mutex());
  registry()[std::move(name)] = std::move(factory);
}

bool is_backend_available(const std::string& name) {
  std::lock_guard<std::mutex> lock(state_mutex());
  return registry().count(name == "auto" ? "gloo" : name) > 0;
}

void init(const InitOptions& options) {
  std::lock_guard<std::mutex> lock(state_mutex());
  State& s = state();
  if (s.initialized) throw std::runtime_error("dist::init: already initialised (call dist::shutdown() first)");
  const std::string backend = options.backend == "auto" ? "gloo" : options.backend;
  auto it = registry().find(backend);
  if (it == registry().end()) {
    if (backend == "nccl") throw std::runtime_error("dist::init: NCCL backend is not available in this build");
    throw std::runtime_error("dist::init: unknown backend '" + options.backend +
                             "' (available: " + available_backends() + ")");
  }
  WorldInfo info = world_info_from_env();
  auto store = std::make_unique<TCPStore>(
      info.master_addr,
      TCPStoreOptions{.port = info.master_port, .is_server = info.rank == 0, .timeout = options.timeout});
  std::unique_ptr<ProcessGroup> group = it->second(*store, info.rank, info.world_size, ProcessGroupOptions{.timeout = options.timeout, .debug = std::nullopt});
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
