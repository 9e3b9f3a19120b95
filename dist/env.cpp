// dist/env.cpp — world_info_from_env(): torchrun-style variables, then SLURM, then Open MPI,
// then a single process; every error names the variable. See env.h.
#include "minidl/dist/env.h"

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <vector>

namespace minidl::dist {

namespace {

std::runtime_error env_error(const std::string& message) { return std::runtime_error("dist: environment: " + message); }

std::optional<std::string> get_env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

int64_t parse_int(const std::string& name, const std::string& value) {
  const char* begin = value.c_str();
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(begin, &end, 10);
  if (value.empty() || end == begin || *end != '\0' || errno == ERANGE || v < INT32_MIN || v > INT32_MAX) {
    throw env_error(name + "='" + value + "' is not an integer");
  }
  return v;
}

std::optional<int> int_env(const char* name) {
  auto v = get_env(name);
  if (!v) return std::nullopt;
  return static_cast<int>(parse_int(name, *v));
}

// The raw numbers of one source and the names of the variables they came from, for messages.
struct Raw {
  std::string source;
  std::optional<int> rank{}, world_size{}, local_rank{}, local_world_size{}, group_rank{};
  std::string rank_name, world_size_name, local_rank_name, local_world_size_name, group_rank_name;
};

// SLURM_TASKS_PER_NODE lists the tasks on each node in node order, compressed: "4(x2),3" is
// nodes 0 and 1 with 4 tasks each, node 2 with 3. Returns the count for node `node`.
std::optional<int> slurm_tasks_on_node(const std::string& spec, int node) {
  const std::string name = "SLURM_TASKS_PER_NODE";
  size_t pos = 0;
  int index = 0;
  while (pos < spec.size()) {
    size_t comma = spec.find(',', pos);
    std::string item = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    int repeat = 1;
    size_t paren = item.find("(x");
    if (paren != std::string::npos) {
      if (item.back() != ')') throw env_error(name + "='" + spec + "' is malformed");
      repeat = static_cast<int>(parse_int(name, item.substr(paren + 2, item.size() - paren - 3)));
      item = item.substr(0, paren);
    }
    int tasks = static_cast<int>(parse_int(name, item));
    if (node < index + repeat) return tasks;
    index += repeat;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return std::nullopt;
}

Raw read_torchrun() {
  Raw r{.source = "env",
        .rank_name = "RANK",
        .world_size_name = "WORLD_SIZE",
        .local_rank_name = "LOCAL_RANK",
        .local_world_size_name = "LOCAL_WORLD_SIZE",
        .group_rank_name = "GROUP_RANK"};
  r.rank = int_env("RANK");
  r.world_size = int_env("WORLD_SIZE");
  r.local_rank = int_env("LOCAL_RANK");
  r.local_world_size = int_env("LOCAL_WORLD_SIZE");
  r.group_rank = int_env("GROUP_RANK");
  return r;
}

Raw read_slurm() {
  Raw r{.source = "slurm",
        .rank_name = "SLURM_PROCID",
        .world_size_name = "SLURM_NTASKS",
        .local_rank_name = "SLURM_LOCALID",
        .local_world_size_name = "SLURM_NTASKS_PER_NODE",
        .group_rank_name = "SLURM_NODEID"};
  r.rank = int_env("SLURM_PROCID");
  r.world_size = int_env("SLURM_NTASKS");
  if (!r.world_size && get_env("SLURM_NPROCS")) {
    r.world_size = int_env("SLURM_NPROCS");
    r.world_size_name = "SLURM_NPROCS";
  }
  r.local_rank = int_env("SLURM_LOCALID");
  r.group_rank = int_env("SLURM_NODEID");
  r.local_world_size = int_env("SLURM_NTASKS_PER_NODE");
  if (!r.local_world_size) {
    if (auto spec = get_env("SLURM_TASKS_PER_NODE")) {
      r.local_world_size_name = "SLURM_TASKS_PER_NODE";
      r.local_world_size = slurm_tasks_on_node(*spec, r.group_rank.value_or(0));
      if (!r.local_world_size) {
        throw env_error("SLURM_TASKS_PER_NODE='" + *spec +
                        "' has no entry for SLURM_NODEID=" + std::to_string(r.group_rank.value_or(0)));
      }
    }
  }
  return r;
}

Raw read_ompi() {
  Raw r{.source = "ompi",
        .rank_name = "OMPI_COMM_WORLD_RANK",
        .world_size_name = "OMPI_COMM_WORLD_SIZE",
        .local_rank_name = "OMPI_COMM_WORLD_LOCAL_RANK",
        .local_world_size_name = "OMPI_COMM_WORLD_LOCAL_SIZE",
        .group_rank_name = "GROUP_RANK"};
  r.rank = int_env("OMPI_COMM_WORLD_RANK");
  r.world_size = int_env("OMPI_COMM_WORLD_SIZE");
  r.local_rank = int_env("OMPI_COMM_WORLD_LOCAL_RANK");
  r.local_world_size = int_env("OMPI_COMM_WORLD_LOCAL_SIZE");
  return r;
}

// Fills the defaults of env.h and checks that the numbers agree with each other.
WorldInfo resolve(const Raw& r) {
  if (!r.rank) throw env_error(r.world_size_name + " is set but " + r.rank_name + " is not");
  if (!r.world_size) throw env_error(r.rank_name + " is set but " + r.world_size_name + " is not");
  WorldInfo w;
  w.source = r.source;
  w.rank = *r.rank;
  w.world_size = *r.world_size;
  const std::string rank_is = r.rank_name + "=" + std::to_string(w.rank);
  const std::string world_is = r.world_size_name + "=" + std::to_string(w.world_size);
  if (w.world_size < 1) throw env_error(world_is + " must be at least 1");
  if (w.rank < 0 || w.rank >= w.world_size) throw env_error(rank_is + " is not in [0, " + world_is + ")");

  if (r.local_world_size) {
    w.local_world_size = *r.local_world_size;
  } else if (!r.local_rank) {
    w.local_world_size = w.world_size;  // nothing says otherwise: one node
  } else {
    throw env_error(r.local_rank_name + " is set but " + r.local_world_size_name + " is not");
  }
  const std::string local_world_is = r.local_world_size_name + "=" + std::to_string(w.local_world_size);
  if (w.local_world_size < 1 || w.local_world_size > w.world_size) {
    throw env_error(local_world_is + " is not in [1, " + world_is + "]");
  }
  w.local_rank = r.local_rank.value_or(w.rank % w.local_world_size);
  if (w.local_rank < 0 || w.local_rank >= w.local_world_size) {
    throw env_error(r.local_rank_name + "=" + std::to_string(w.local_rank) + " is not in [0, " + local_world_is + ")");
  }
  w.group_rank = r.group_rank.value_or(w.rank / w.local_world_size);
  if (w.group_rank < 0 || w.group_rank >= w.world_size) {
    throw env_error(r.group_rank_name + "=" + std::to_string(w.group_rank) + " is not in [0, " + world_is + ")");
  }
  return w;
}

void read_master(WorldInfo& w) {
  const std::string needed = " is not set (needed when the world size is " + std::to_string(w.world_size) + ")";
  auto addr = get_env("MASTER_ADDR");
  if (addr && !addr->empty()) {
    w.master_addr = *addr;
  } else if (w.world_size > 1) {
    throw env_error("MASTER_ADDR" + needed);
  }
  auto port = get_env("MASTER_PORT");
  if (port) {
    int64_t p = parse_int("MASTER_PORT", *port);
    if (p < 0 || p > 65535 || (p == 0 && w.world_size > 1)) {
      throw env_error("MASTER_PORT=" + *port + " is not a port in [1, 65535]");
    }
    w.master_port = static_cast<uint16_t>(p);
  } else if (w.world_size > 1) {
    throw env_error("MASTER_PORT" + needed);
  }
}

}  // namespace

WorldInfo world_info_from_env() {
  WorldInfo w;
  if (get_env("RANK") || get_env("WORLD_SIZE")) {
    w = resolve(read_torchrun());
  } else if (get_env("SLURM_PROCID")) {
    w = resolve(read_slurm());
  } else if (get_env("OMPI_COMM_WORLD_RANK")) {
    w = resolve(read_ompi());
  } else {
    for (const char* name : {"LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"}) {
      if (get_env(name)) throw env_error(std::string(name) + " is set but RANK and WORLD_SIZE are not");
    }
  }
  read_master(w);
  return w;
}

}  // namespace minidl::dist
