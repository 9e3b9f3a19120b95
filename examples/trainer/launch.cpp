// examples/trainer/launch.cpp — GPU or CPU, spawn or launcher, and the checks before any
// process starts (see launch.h).
#include "examples/trainer/launch.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <system_error>

#include "minidl/dist/distributed.h"
#include "minidl/dist/env.h"
#include "minidl/kernels/cuda_api.h"

namespace trainer {

namespace dist = minidl::dist;

namespace {

// Whether DIR/NAME or DIR/NAME.gz exists; a directory that cannot be looked into (permissions,
// a symlink loop, a name too long) is a UsageError naming it.
bool has_idx_file(const std::filesystem::path& dir, const std::string& name) {
  for (const std::filesystem::path& p : {dir / name, dir / (name + ".gz")}) {
    std::error_code ec;
    const bool found = std::filesystem::exists(p, ec);
    if (ec)
      throw UsageError("cannot read the Fashion-MNIST directory " + dir.string().substr(0, 256) + ": " + ec.message() +
                       " (looking for " + p.filename().string() + ")");
    if (found) return true;
  }
  return false;
}

// NCCL refuses two ranks on one GPU: a clear error instead of a failed rendezvous.
void check_one_gpu_per_process(int local_processes, int gpus) {
  if (local_processes > gpus)
    throw UsageError("--device cuda: " + std::to_string(local_processes) + " processes on this machine but only " +
                     std::to_string(gpus) + " visible GPU(s); NCCL needs one GPU per process (use --nproc " +
                     std::to_string(gpus) + " or fewer)");
}

}  // namespace

void check_data_dir(const std::string& dir, bool need_train) {
  for (const char* name :
       {"t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", "train-images-idx3-ubyte", "train-labels-idx1-ubyte"}) {
    if (!need_train && std::string(name).starts_with("train")) continue;
    if (!has_idx_file(dir, name))
      throw UsageError(
          "Fashion-MNIST not found: " + dir + "/" + name + "[.gz] does not exist.\n" +
          "Install it with `apt-get install dataset-fashion-mnist` (files in /usr/share/datasets/fashion-mnist) "
          "or point --data at a directory holding the four idx files.");
  }
}

int count_gpus_in_child() {
  namespace kc = minidl::kernels::cuda;
  if (!kc::compiled_with_cuda()) return 0;
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("train: pipe() failed while counting GPUs");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("train: fork() failed while counting GPUs");
  if (pid == 0) {
    ::close(fds[0]);
    const int n = kc::device_count();
    const ssize_t ignored = ::write(fds[1], &n, sizeof n);
    (void)ignored;
    ::_exit(0);
  }
  ::close(fds[1]);
  int n = 0;
  const ssize_t got = ::read(fds[0], &n, sizeof n);
  ::close(fds[0]);
  ::waitpid(pid, nullptr, 0);
  return got == static_cast<ssize_t>(sizeof n) ? n : 0;
}

bool decide_cuda(const CliOptions& cli, int gpus) {
  namespace kc = minidl::kernels::cuda;
  if (cli.device == "cpu") return false;
  if (cli.device == "auto") {
    if (gpus == 0 || !dist::is_backend_available("nccl")) return false;
    const dist::WorldInfo env = dist::world_info_from_env();
    const int local = env.source != "default" ? env.local_world_size : cli.nproc.value_or(gpus);
    if (local > gpus) {
      std::cerr << "train: --device auto: " << local << " processes on this machine but " << gpus
                << " GPU(s); training on the CPU (pass --device cuda with --nproc " << gpus << " for the GPUs)\n";
      return false;
    }
    return true;
  }
  if (!kc::compiled_with_cuda())
    throw UsageError(
        "--device cuda: this train was built without CUDA (nvcc was not found at configure time); "
        "use --device cpu");
  if (gpus == 0)
    throw UsageError(
        "--device cuda: no CUDA device present (no driver, no GPU, or CUDA_VISIBLE_DEVICES hides them "
        "all); use --device cpu");
  if (!dist::is_backend_available("nccl"))
    throw UsageError("--device cuda: the NCCL backend is not available in this build; use --device cpu");
  return true;
}

Launch decide_launch(const CliOptions& cli, bool cuda, int gpus) {
  const dist::WorldInfo env = dist::world_info_from_env();
  if (env.source != "default") {  // started by minidl-run, srun or mpirun: we are one of the ranks
    if (cli.nproc && *cli.nproc != env.world_size)
      throw UsageError("--nproc " + std::to_string(*cli.nproc) + " conflicts with the launcher's WORLD_SIZE " +
                       std::to_string(env.world_size) + " (drop --nproc under minidl-run)");
    if (cuda) check_one_gpu_per_process(env.local_world_size, gpus);
    if (cli.max_restarts)
      throw UsageError(
          "--max-restarts: this train was started by a launcher, which restarts it: give --max-restarts "
          "to minidl-run instead");
    int restarts = 0;
    if (const char* r = std::getenv("MINIDL_RESTART_COUNT")) {
      const std::string text = r;
      if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 9)
        throw UsageError("MINIDL_RESTART_COUNT='" + text + "' is not a count");
      restarts = std::stoi(text);
    }
    return {.nproc = env.world_size,
            .spawn = false,
            .local_world_size = env.local_world_size,
            .leader = env.rank == 0,
            .restart_count = restarts};
  }
  // On GPUs: one process per visible GPU; on CPUs: 2 processes unless told otherwise. With
  // --max-restarts even one process is spawned, so that the parent can start it again.
  const int nproc = cli.nproc.value_or(cuda ? gpus : 2);
  if (cuda) check_one_gpu_per_process(nproc, gpus);
  if (cli.min_procs && *cli.min_procs > nproc)
    throw UsageError("--min-procs " + std::to_string(*cli.min_procs) + " is above the " + std::to_string(nproc) +
                     " process(es) this run starts (--nproc)");
  return {.nproc = nproc, .spawn = nproc > 1 || cli.max_restarts.value_or(0) > 0, .local_world_size = nproc};
}

}  // namespace trainer
