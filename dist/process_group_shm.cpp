// dist/process_group_shm.cpp — ProcessGroupShm: the shared segment (create, map, unlink),
// symmetric buffers, the communication thread that runs the queued collectives, and the public
// calls. The barrier and the collectives themselves: dist/shm_collectives.cpp. See
// process_group_shm.h.
#include "minidl/dist/process_group_shm.h"

#include "minidl/dist/process_group_shm_impl.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "minidl/autograd/trace.h"
#include "minidl/dist/cpu_collective_checks.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/storage.h"

namespace minidl::dist {

std::string shm_host_id() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  char ns[128] = {};
  const ssize_t len = ::readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
  struct stat shm {};
  ::stat("/dev/shm", &shm);
  return std::string(host) + " boot " + read_first_line("/proc/sys/kernel/random/boot_id") + " " +
         (len > 0 ? std::string(ns, static_cast<size_t>(len)) : "pid:[?]") + " shm " + std::to_string(shm.st_dev) +
         ":" + std::to_string(shm.st_ino);
}

std::vector<std::string> rank_host_ids(TCPStore& store, int rank, int size, const std::string& key_prefix,
                                       std::chrono::milliseconds timeout, const std::string& mine) {
  store.set(key_prefix + "host/" + std::to_string(rank), mine.empty() ? shm_host_id() : mine);
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(key_prefix + "host/" + std::to_string(r));
  store.wait(keys, timeout);
  std::vector<std::string> ids;
  for (const auto& k : keys) ids.push_back(store.get(k));
  return ids;
}

Tensor ProcessGroupShm::Impl::allocate_symmetric(const Shape& shape, DType dtype) {
  const size_t nbytes = static_cast<size_t>(shape_numel(shape)) * element_size(dtype);
  const size_t per_rank = round_up(std::max<size_t>(nbytes, 1), 4096);
  const size_t total = per_rank * static_cast<size_t>(size);
  barrier();  // every rank has read the previous name
  std::string made;
  if (rank == 0) {
    std::string why;
    const std::string name = kShmNamePrefix + random_hex(8);
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
      why = std::strerror(errno);
    } else {
      if (const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(total)); err != 0) why = std::strerror(err);
      ::close(fd);
      if (why.empty())
        made = name;
      else
        ::shm_unlink(name.c_str());
    }
    if (!why.empty() && !told_no_room) {
      told_no_room = true;
      std::fprintf(stderr,
                   "ProcessGroupShm: no shared memory for a %zu-byte buffer per rank in /dev/shm (%s); "
                   "all_reduce copies through the group's segment instead\n",
                   per_rank, why.c_str());
    }
    std::memset(header->symmetric_name, 0, sizeof(header->symmetric_name));
    std::memcpy(header->symmetric_name, made.data(), made.size());
  }
  barrier();
  const std::string name(header->symmetric_name, ::strnlen(header->symmetric_name, sizeof(header->symmetric_name)));
  void* base = nullptr;
  if (!name.empty()) {
    const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
    if (fd >= 0) {
      base = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (base == MAP_FAILED) base = nullptr;
      ::close(fd);
    }
  }
  ranks[rank].meta[0] = base != nullptr ? 1 : 0;
  barrier();  // every rank has mapped it, or failed to
  bool everyone = true;
  for (int r = 0; r < size; ++r) everyone = everyone && ranks[r].meta[0] == 1;
  if (rank == 0 && !name.empty()) ::shm_unlink(name.c_str());  // the mappings keep it alive
  if (!everyone) {
    if (base != nullptr) ::munmap(base, total);
    return Tensor();
  }
  const SymmetricBuffer buffer{static_cast<char*>(base), per_rank, total};
  {
    std::lock_guard<std::mutex> lock(symmetric->mutex);
    symmetric->buffers.push_back(buffer);
  }
  char* mine = buffer.base + static_cast<size_t>(rank) * per_rank;
  auto storage = std::make_shared<Storage>(mine, nbytes, Device::cpu(), [registry = symmetric, buffer](void*) {
    {
      std::lock_guard<std::mutex> lock(registry->mutex);
      auto& v = registry->buffers;
      v.erase(std::remove_if(v.begin(), v.end(), [&](const SymmetricBuffer& b) { return b.base == buffer.base; }),
              v.end());
    }
    ::munmap(buffer.base, buffer.mapped);
  });
  return Tensor(storage, shape, contiguous_strides(shape), 0, dtype);
}

bool ProcessGroupShm::Impl::run_oldest() {
  Task task;
  {
    std::lock_guard<std::mutex> lock(queue_mutex);
    if (queue.empty()) return false;
    task = std::move(queue.front());
    queue.pop_front();
  }
  try {
    task.trace.run(task.run);
  } catch (...) {
    task.state->error = std::current_exception();
  }
  task.state->done.store(true, std::memory_order_release);
  return true;
}

void ProcessGroupShm::Impl::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(queue_mutex);
      queue_cv.wait(lock, [&] { return stopping || !queue.empty(); });
      if (stopping && queue.empty()) return;
    }
    std::lock_guard<std::mutex> exec(exec_mutex);
    run_oldest();  // none if a waiting caller took it first
  }
}

std::shared_ptr<Work> ProcessGroupShm::Impl::issue(const CollectiveDesc& desc, std::function<void()> body, bool wake) {
  if (broken)
    throw std::runtime_error(desc.op + ": the process group is broken by an earlier failure: " + broken_reason);
  Task task;
  task.trace = autograd::trace::Collective::launch(desc.human());
  task.run = [this, desc, body = std::move(body)] { run_collective(desc, body); };
  task.state = std::make_shared<TaskState>();
  auto work = std::make_shared<TaskWork>(*this, task.state);
  {
    std::lock_guard<std::mutex> lock(queue_mutex);
    queue.push_back(std::move(task));
  }
  if (wake) queue_cv.notify_one();
  return work;
}

void ProcessGroupShm::Impl::run_collective(const CollectiveDesc& desc, const std::function<void()>& body) {
  if (broken)
    throw std::runtime_error(desc.op + ": the process group is broken by an earlier failure: " + broken_reason);
  const int64_t n = seq.fetch_add(1) + 1;
  what = desc.op + " #" + std::to_string(n);
  if (!desc.sig().empty()) what += " (" + desc.sig() + ")";
  try {
    if (debug) check_fingerprint(n, desc);
    body();
  } catch (const std::exception& e) {
    broken_reason = e.what();
    broken = true;
    throw;
  }
}

void ProcessGroupShm::Impl::unmap() {
  if (base != nullptr) ::munmap(base, bytes);
  base = nullptr;
}

ProcessGroupShm::ProcessGroupShm(TCPStore& store, int rank, int size, ProcessGroupOptions options, ShmOptions shm)
    : ProcessGroup(rank, size), options_(options), impl_(std::make_unique<Impl>()) {
  if (size < 1 || rank < 0 || rank >= size)
    throw std::invalid_argument("ProcessGroupShm: rank " + std::to_string(rank) + " of world size " +
                                std::to_string(size) + " is out of range");
  if (options.timeout.count() <= 0) throw std::invalid_argument("ProcessGroupShm: timeout must be positive");
  if (shm.slot_bytes < std::max<size_t>(4096, 64 * static_cast<size_t>(size)))
    throw std::invalid_argument("ProcessGroupShm: slot_bytes must be at least 4096 and 64 per rank; got " +
                                std::to_string(shm.slot_bytes));
  Impl& im = *impl_;
  im.rank = rank;
  im.size = size;
  im.options = options;
  im.debug = debug_mode(options);
  im.slot_bytes = shm.slot_bytes;
  im.bytes = segment_bytes(size, shm.slot_bytes);
  const std::string prefix =
      "minidl/shm/" + (options.group_name.empty() ? std::to_string(groups_created++) : options.group_name) + "/";
  const std::string who = "ProcessGroupShm: rank " + std::to_string(rank) + " of " + std::to_string(size);

  // 1. One host: the same id on every rank.
  const std::vector<std::string> ids = rank_host_ids(store, rank, size, prefix, options.timeout, shm.host_id);
  for (int r = 1; r < size; ++r)
    if (ids[static_cast<size_t>(r)] != ids[0])
      throw std::runtime_error(who + ": rank " + std::to_string(r) + " runs on another host than rank 0 (" +
                               ids[static_cast<size_t>(r)] + " vs " + ids[0] +
                               "); shared memory needs every rank on one host (use the hierarchical or gloo backend)");

  // 2. Rank 0 creates the segment and publishes its name; the others open it.
  int fd = -1;
  try {
    if (rank == 0) {
      for (int attempt = 0; fd < 0; ++attempt) {
        im.name = kShmNamePrefix + random_hex(8);
        fd = ::shm_open(im.name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd < 0 && (errno != EEXIST || attempt == 8))
          throw std::runtime_error("cannot create shared memory " + im.name + ": " + std::strerror(errno));
      }
      if (::ftruncate(fd, static_cast<off_t>(im.bytes)) != 0)
        throw std::runtime_error("cannot size shared memory " + im.name + " to " + std::to_string(im.bytes) +
                                 " bytes: " + std::strerror(errno) + " (is /dev/shm full?)");
    } else {
      store.wait({prefix + "name"}, options.timeout);
      im.name = store.get(prefix + "name");
      fd = ::shm_open(im.name.c_str(), O_RDWR, 0600);
      if (fd < 0) throw std::runtime_error("cannot open shared memory " + im.name + ": " + std::strerror(errno));
      struct stat st {};
      if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != im.bytes)
        throw std::runtime_error("shared memory " + im.name + " has " + std::to_string(st.st_size) +
                                 " bytes, expected " + std::to_string(im.bytes) + " (different slot_bytes?)");
    }
    im.base = ::mmap(nullptr, im.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (im.base == MAP_FAILED) {
      im.base = nullptr;
      throw std::runtime_error("cannot map shared memory " + im.name + ": " + std::strerror(errno));
    }
    ::close(fd);
    fd = -1;
    im.header = static_cast<Header*>(im.base);
    im.ranks = reinterpret_cast<RankState*>(static_cast<char*>(im.base) + sizeof(Header));
    im.data = static_cast<char*>(im.base) + data_offset(size);
    if (rank == 0) {
      im.header->magic = kMagic;
      im.header->world = size;
      im.header->slot_bytes = shm.slot_bytes;
      store.set(prefix + "name", im.name);
    } else if (im.header->magic != kMagic || im.header->world != size || im.header->slot_bytes != shm.slot_bytes) {
      throw std::runtime_error("shared memory " + im.name + " was made for another group");
    }
    im.ranks[rank].pid.store(static_cast<int32_t>(::getpid()), std::memory_order_release);

    // 3. Once every rank has mapped it, the name can go: the mappings keep the memory alive.
    store.set(prefix + "mapped/" + std::to_string(rank), "");
    std::vector<std::string> mapped;
    for (int r = 0; r < size; ++r) mapped.push_back(prefix + "mapped/" + std::to_string(r));
    store.wait(mapped, options.timeout);
    if (rank == 0) ::shm_unlink(im.name.c_str());
  } catch (const std::exception& e) {
    if (fd >= 0) ::close(fd);
    if (rank == 0 && !im.name.empty()) ::shm_unlink(im.name.c_str());
    im.unmap();
    throw std::runtime_error(who + " could not set up shared memory with the other ranks within " +
                             std::to_string(options.timeout.count()) + " ms: " + e.what());
  }
  im.worker = std::thread([&im] { im.loop(); });
}

ProcessGroupShm::~ProcessGroupShm() {
  {
    std::lock_guard<std::mutex> lock(impl_->queue_mutex);
    impl_->stopping = true;
  }
  impl_->queue_cv.notify_all();
  if (impl_->worker.joinable()) impl_->worker.join();  // runs what is still queued
  impl_->unmap();
}

int64_t ProcessGroupShm::sequence_number() const { return impl_->seq; }

bool ProcessGroupShm::is_broken() const { return impl_->broken; }

const std::string& ProcessGroupShm::segment_name() const { return impl_->name; }

std::shared_ptr<Work> ProcessGroupShm::all_reduce_async(Tensor& t, ReduceOp op) {
  return issue_all_reduce(t, op, true);
}

void ProcessGroupShm::all_reduce(Tensor& t, ReduceOp op) { issue_all_reduce(t, op, false)->wait(); }

std::shared_ptr<Work> ProcessGroupShm::issue_all_reduce(Tensor& t, ReduceOp op, bool wake) {
  CollectiveDesc desc = kChecks.all_reduce(t, op);
  const auto n = static_cast<size_t>(t.numel());
  // Every rank's tensor is in a symmetric buffer, or none is (debug mode compares "symmetric").
  std::optional<std::pair<SymmetricBuffer, size_t>> found;
  if (n > 0 && t.is_contiguous() && !is_half(t.dtype()))  // (16-bit floats are reduced in a float32 copy)
    found = impl_->find_symmetric(static_cast<const char*>(t.raw_data()), n * element_size(t.dtype()));
  if (found) desc.extra += " symmetric";
  return impl_->issue(
      desc,
      [this, t, op, n, found]() mutable {
        if (n == 0) return;
        if (found) return impl_->all_reduce_symmetric(found->first, found->second, t.dtype(), n, op);
        Tensor buf = reduction_buffer(t);  // 16-bit floats: summed in float32
        impl_->all_reduce(static_cast<char*>(buf.raw_data()), buf.dtype(), n, op);
        if (!buf.is_same(t)) t.copy_(buf);  // (rounded once)
      },
      wake);
}

Tensor ProcessGroupShm::empty_symmetric(const Shape& shape, DType dtype, Device device) {
  if (!device.is_cpu())
    throw std::invalid_argument("ProcessGroupShm::empty_symmetric: shared memory holds CPU tensors, not " +
                                device.str());
  Tensor out;
  impl_
      ->issue(CollectiveDesc{"empty_symmetric", dtype_name(dtype), shape_str(shape), ""},
              [this, &out, shape, dtype] { out = impl_->allocate_symmetric(shape, dtype); })
      ->wait();
  return out.defined() ? out : zeros(shape, dtype);
}

std::shared_ptr<Work> ProcessGroupShm::broadcast_async(Tensor& t, int root) { return issue_broadcast(t, root, true); }

void ProcessGroupShm::broadcast(Tensor& t, int root) { issue_broadcast(t, root, false)->wait(); }

std::shared_ptr<Work> ProcessGroupShm::issue_broadcast(Tensor& t, int root, bool wake) {
  const CollectiveDesc desc = kChecks.broadcast(t, root, size_);
  return impl_->issue(
      desc,
      [this, t, root]() mutable {
        if (t.numel() == 0) return;
        Tensor buf = t.is_contiguous() ? t : t.contiguous();
        impl_->broadcast(static_cast<char*>(buf.raw_data()),
                         static_cast<size_t>(buf.numel()) * element_size(buf.dtype()), root);
        if (!buf.is_same(t)) t.copy_(buf);
      },
      wake);
}

std::shared_ptr<Work> ProcessGroupShm::all_gather_async(const Tensor& t, std::vector<Tensor>& out) {
  const CollectiveDesc desc = kChecks.all_gather(t);
  return impl_->issue(desc, [this, t, result = &out] { impl_->all_gather(t.contiguous(), *result); });
}

std::shared_ptr<Work> ProcessGroupShm::reduce_scatter_async(const Tensor& input, Tensor& out, ReduceOp op) {
  CollectiveDesc desc = kChecks.reduce_scatter(input, out, op, size_);
  // A symmetric input (every rank's or none: debug mode compares it) is reduced straight from
  // the ranks' tensors, each rank its own slab.
  std::optional<std::pair<SymmetricBuffer, size_t>> found;
  const auto n = static_cast<size_t>(input.numel());
  if (n > 0 && input.is_contiguous() && !is_half(input.dtype()))
    found = impl_->find_symmetric(static_cast<const char*>(input.raw_data()), n * element_size(input.dtype()));
  if (found) desc.extra += " symmetric";
  return impl_->issue(desc, [this, input, out, op, n, found]() mutable {
    if (found) {
      Tensor target = out.is_contiguous() ? out : out.contiguous();
      impl_->reduce_scatter_symmetric(found->first, found->second, input.dtype(), n / static_cast<size_t>(size_), op,
                                      static_cast<char*>(target.raw_data()));
      if (!target.is_same(out)) out.copy_(target);
      return;
    }
    // all_reduce a copy of the whole input, keep this rank's slab.
    Tensor reduced = reduction_buffer(input);
    if (reduced.is_same(input)) reduced = input.clone();
    if (reduced.numel() > 0)
      impl_->all_reduce(static_cast<char*>(reduced.raw_data()), reduced.dtype(), static_cast<size_t>(reduced.numel()),
                        op);
    const int64_t n = out.dim() == 0 ? 0 : out.size(0);
    out.copy_(reduced.narrow(0, rank_ * n, n));
  });
}

std::shared_ptr<Work> ProcessGroupShm::all_gather_into_tensor_async(Tensor& out, const Tensor& input) {
  check_all_gather_into_tensor(out, input, size_);
  const size_t bytes = static_cast<size_t>(out.numel()) * element_size(out.dtype());
  std::optional<std::pair<SymmetricBuffer, size_t>> found;
  if (bytes > 0 && out.is_contiguous() && out.device().is_cpu())
    found = impl_->find_symmetric(static_cast<const char*>(out.raw_data()), bytes);
  if (!found) return ProcessGroup::all_gather_into_tensor_async(out, input);
  const CollectiveDesc desc{"all_gather_into_tensor", dtype_name(out.dtype()), shape_str(out.shape()), "symmetric"};
  return impl_->issue(desc, [this, out, input, found, bytes] {
    const int64_t n = out.size(0) / size_;
    Tensor slab = out.narrow(0, rank_ * n, n);
    if (!slab.is_same(input)) slab.copy_(input);
    impl_->all_gather_symmetric(found->first, found->second, bytes / static_cast<size_t>(size_));
  });
}

std::shared_ptr<Work> ProcessGroupShm::barrier_async() { return issue_barrier(true); }

void ProcessGroupShm::barrier() { issue_barrier(false)->wait(); }

std::shared_ptr<Work> ProcessGroupShm::issue_barrier(bool wake) {
  return impl_->issue(
      CollectiveDesc{"barrier", "", "[]", ""}, [this] { impl_->barrier(); }, wake);
}

}  // namespace minidl::dist
