// dist/spawn.h — in-program launching, like torch.multiprocessing.spawn: run fn(rank) in
// nprocs forked child processes that form one world on this machine.
//
//   int main(int argc, char** argv) {
//     int nproc = ...;  // e.g. from --nproc
//     minidl::dist::spawn(nproc, [&](int rank) { train(rank, nproc); });
//   }
//
// Each child gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK (0), MASTER_ADDR,
// MASTER_PORT and MINIDL_STORE_TOKEN (the caller's, else a fresh random one shared by the
// children: their store serves no one else) in its environment before fn runs, so dist::world_info_from_env() (and
// init()) inside fn work as under minidl-run. spawn returns when every child has finished.
// If one fails (an exception, a non-zero exit, a signal), the others get SIGTERM (and SIGCONT,
// for a stopped one), then SIGKILL after options.kill_grace, and spawn throws SpawnError (a
// std::runtime_error) naming the failed rank: "spawn: rank 1 failed: <exception message>" or
// "spawn: rank 1 failed: was killed by signal 11 (Segmentation fault)". A rank that could not
// start a thread reports "cannot start a thread: Resource temporarily unavailable (...)", and a
// bare std::bad_alloc reads "out of memory: an allocation failed (...)". The failed rank is the
// first to fail, unless another is killed by a signal within 0.5 s of it (a rank killed with -9
// makes the others fail too, and they may be noticed first); a child found stopped (SIGSTOP)
// when the failure happens is named in the message as well: it hung the others' collectives.
// No child outlives spawn; a child also gets SIGTERM if the parent dies.
// Children stay in the parent's process group (Ctrl-C reaches them all) and are signalled by
// pid: processes a child starts itself are its own business. Unlike mp.spawn, which returns a
// context object, spawn returns nothing; results come from spawn_with_results.
//
// fork() without exec, so read these before using it:
//  - Only the calling thread exists in a child. Objects that own threads (a TCPStore server, a
//    DataLoader with workers, a process group) must be created inside fn, not before spawn.
//  - OpenMP: GNU libgomp's thread pool does not survive fork(); a child that starts a parallel
//    region with more than one thread after the parent has used OpenMP hangs. Children therefore
//    run with kernels::cpu::set_num_threads(options.omp_threads), 1 by default: OpenMP, Eigen
//    and kernels::cpu::get_num_threads() all see that count. Raise it only when the parent has
//    not run an OpenMP region before spawn (or use minidl-run, which execs fresh processes).
//  - CUDA: a child cannot use it once the parent has made any CUDA call (a device count too);
//    its first call fails with "initialization error", which spawn's message then explains. Make
//    CUDA calls only inside fn, or count devices in a forked child, as examples/train.cpp does.
//  - A child leaves with _exit() after fn (stdout and stderr flushed): the parent's atexit
//    handlers and static destructors do not run twice.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace minidl::dist {

struct SpawnOptions {
  std::string master_addr = "127.0.0.1";
  // 0: a free port, picked by the parent. Between that pick and rank 0's store listening on it,
  // another process may bind the port; rank 0 then fails with "cannot listen on ADDR:PORT:
  // Address already in use", and spawn starts the world again on another port (three tries in
  // all). Whatever fn did before creating the store runs again then.
  uint16_t master_port = 0;
  std::chrono::milliseconds kill_grace = std::chrono::seconds(3);  // SIGTERM, then SIGKILL after this
  int omp_threads = 1;  // OpenMP threads in each child (see the note above)
};

// What spawn throws when a child fails: the message above, the rank, and its waitpid status.
struct SpawnError : std::runtime_error {
  SpawnError(const std::string& message, int rank, int wait_status)
      : std::runtime_error(message), rank(rank), wait_status(wait_status) {}
  int rank;
  int wait_status;
};

// Runs fn(rank) for rank in [0, nprocs) in child processes; returns when all have succeeded.
void spawn(int nprocs, const std::function<void(int rank)>& fn, const SpawnOptions& options = {});

// Like spawn, and each child hands a result back (a byte string, sent through a pipe; meant for
// small things: metrics, a checksum). Returns the results in rank order.
std::vector<std::string> spawn_with_results(int nprocs, const std::function<std::string(int rank)>& fn,
                                            const SpawnOptions& options = {});

}  // namespace minidl::dist
