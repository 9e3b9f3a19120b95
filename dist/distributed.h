// dist/distributed.h — the global API, like torch.distributed: one default process group per
// process, set up from the environment that minidl-run / dist::spawn / SLURM / Open MPI give it.
//
//   dist::init();                                   // RANK, WORLD_SIZE, MASTER_ADDR, ... from env
//   Tensor loss_sum = ...;
//   dist::all_reduce(loss_sum);                     // SUM over ranks, in place
//   if (dist::rank() == 0) save_checkpoint(...);
//   dist::barrier();
//   dist::shutdown();
//
// init(): rank 0 hosts the TCPStore at MASTER_ADDR:MASTER_PORT (the others connect, retrying
// until the timeout), every rank checks in and waits for all the others (naming the missing
// ranks on stderr every progress_interval), then every rank builds the default ProcessGroup:
// "shm" (shared memory, dist/process_group_shm.h), "gloo" (TCP) or "hierarchical" (shm inside each
// host, Gloo between hosts: dist/process_group_hierarchical.h); "auto" is shm when every rank runs
// on this host, Gloo when every host runs one rank, else hierarchical (all carry CUDA tensors
// through host copies); other
// backends ("nccl") come from factories registered with register_backend (the CUDA code
// registers "nccl"). Calling init() twice is an error; so is calling a collective or
// default_group() before init() (the message names the function). shutdown() tears down the
// group and the store without a barrier (call barrier() first if ranks must wait for each other)
// and is safe to call twice or without init(). To init() again after shutdown(), use a new
// MASTER_PORT (or make sure rank 0 shuts down last): a rank that re-initialises before rank 0
// has closed the old store would reach the old store.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "minidl/dist/env.h"
#include "minidl/dist/process_group.h"
#include "minidl/dist/store.h"
#include "minidl/tensor/tensor.h"

namespace minidl::dist {

struct InitOptions {
  std::string backend = "auto";  // "auto" (see above), "shm", "gloo", "hierarchical", or a registered name ("nccl")
  std::chrono::milliseconds timeout = std::chrono::seconds(300);  // rendezvous and every collective
  // While ranks are missing at the rendezvous, every rank says on stderr which ones it awaits
  // this often ("dist::init: rank 0 is waiting for rank(s) 3 of 4 ..."); 0: never.
  std::chrono::milliseconds progress_interval = std::chrono::seconds(30);
};

// Makes a process group over an initialised store: (store, rank, size, options).
using BackendFactory = std::function<std::unique_ptr<ProcessGroup>(TCPStore&, int rank, int size, ProcessGroupOptions)>;
// Adds (or replaces) a backend init() can create by name.
void register_backend(std::string name, BackendFactory factory);
// Whether init() can create this backend in this build.
bool is_backend_available(const std::string& name);
// The backend "auto" picks for ranks with these host ids (host_ids[r]: rank r's): "shm" on one
// host, "gloo" when every host runs one rank, else "hierarchical".
std::string auto_backend(const std::vector<std::string>& host_ids);

void init(const InitOptions& options = {});
bool is_initialized();
void shutdown();

int rank();
int world_size();
int local_rank();
int local_world_size();
const WorldInfo& world_info();
ProcessGroup& default_group();
TCPStore& default_store();  // the rendezvous store (e.g. for a small key exchange)

// Collectives on the default group (blocking).
void all_reduce(Tensor& t, ReduceOp op = ReduceOp::SUM);
void broadcast(Tensor& t, int root = 0);
std::vector<Tensor> all_gather(const Tensor& t);
Tensor reduce_scatter(const Tensor& input, ReduceOp op = ReduceOp::SUM);
void barrier();
std::vector<std::string> all_gather_object(const std::string& bytes);
void broadcast_object(std::string& bytes, int root = 0);

}  // namespace minidl::dist
