// dist/process_group_shm_impl.h — ProcessGroupShm's state (private to dist/): the mapped
// segment, the barrier count, the running collective's name, the broken flag, the symmetric
// buffers and the communication thread's queue. Its methods live in two files:
// dist/shm_collectives.cpp (the barrier and the collectives as copies and reductions between
// barriers) and dist/process_group_shm.cpp (creating and mapping the segment, symmetric
// allocations, the communication thread).
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "minidl/autograd/trace.h"
#include "minidl/dist/process_group_shm.h"
#include "minidl/dist/shm_segment.h"

namespace minidl::dist {

using namespace shm_detail;  // NOLINT: private header, included by the two files of this group

struct ProcessGroupShm::Impl {
  int rank = 0;
  int size = 1;
  ProcessGroupOptions options;
  bool debug = false;
  size_t slot_bytes = 0;
  std::string name;
  void* base = nullptr;
  size_t bytes = 0;
  Header* header = nullptr;
  RankState* ranks = nullptr;
  char* data = nullptr;

  std::atomic<int64_t> seq{0};  // collectives run so far
  uint64_t barriers = 0;  // barriers this rank has passed
  int next_set = 0;  // the slot set the next all_reduce writes before its first barrier
  std::string what;  // the running collective, for messages: "all_reduce #3 (float32[4])"
  std::atomic<bool> broken{false};
  std::string broken_reason;  // set once, before broken

  char* slot(int set, int r) const {
    return data + (static_cast<size_t>(set) * size + static_cast<size_t>(r)) * slot_bytes;
  }
  size_t data_bytes() const { return 2 * static_cast<size_t>(size) * slot_bytes; }

  // ---- the barrier ----
  [[noreturn]] void fail(const std::string& message);

  // The ranks that have not reached barrier `target` yet.
  std::vector<int> missing(uint32_t target) const;

  // Throws if a rank we wait for has exited.
  void check_alive(uint32_t target);

  void barrier();

  // ---- collectives (under mutex; the caller has numbered the collective in `what`) ----
  // Note [barrier discipline]: all_reduce writes, before its first barrier, only the parts of
  // its own slots that other ranks read before a barrier; every other collective starts with a
  // barrier before it writes to the segment and ends with one after its last read of it.
  // Note [part regions]: slot (set, r) is cut into `size` regions of region_bytes(), one per
  // part; part j of every piece lives at the start of region j, whatever the piece's length and
  // dtype. Rank r writes only regions j != r of its slot before a barrier, and the others read
  // only region r of it after one, so a short last piece, or the next all_reduce's first copy,
  // can never overwrite a result that another rank is still copying out.
  size_t region_bytes() const { return slot_bytes / static_cast<size_t>(size) / 64 * 64; }

  // Small tensors in one step: every rank copies its whole tensor into its slot, one barrier,
  // and every rank reduces all of it from every slot in rank order (the same bits everywhere).
  // The next all_reduce writes the other set, whose last readers passed this one's barrier.
  void all_reduce_one_shot(char* buf, DType dtype, size_t n, ReduceOp op);

  void all_reduce(char* buf, DType dtype, size_t n, ReduceOp op);

  // ---- symmetric buffers (Note [symmetric buffers]) ----
  std::shared_ptr<SymmetricRegistry> symmetric = std::make_shared<SymmetricRegistry>();
  bool told_no_room = false;

  // The registered buffer that holds [p, p + bytes) of this rank's tensor, if any.
  std::optional<std::pair<SymmetricBuffer, size_t>> find_symmetric(const char* p, size_t bytes);

  // Rank 0 creates a segment of size * per_rank bytes (its pages reserved with posix_fallocate,
  // so a full /dev/shm is an answer here, not a SIGBUS later) and every rank maps it; undefined
  // on every rank unless every rank mapped it.
  Tensor allocate_symmetric(const Shape& shape, DType dtype);

  // all_reduce of n elements at `offset` in every rank's tensor of `buffer`: after one barrier
  // (every rank's values are in place) rank r reduces part r over every rank's tensor, in rank
  // order, straight into every rank's tensor; a second barrier ends it. No copies through the
  // segment: half the memory traffic of all_reduce() above, and 2 barriers instead of pieces + 1.
  void all_reduce_symmetric(const SymmetricBuffer& buffer, size_t offset, DType dtype, size_t n, ReduceOp op);

  // reduce_scatter of size * n elements at `offset` in every rank's tensor of `buffer`: after one
  // barrier rank r reduces slab r over every rank's tensor, in rank order (the bits of
  // all_reduce_symmetric), into `out` (n elements; it may be slab r of its own tensor); a second
  // barrier ends it. Half the writes of all_reduce_symmetric: the other slabs stay as they were.
  void reduce_scatter_symmetric(const SymmetricBuffer& buffer, size_t offset, DType dtype, size_t n, ReduceOp op,
                                char* out);

  // all_gather_into_tensor of slabs of `slab_bytes` at `offset` in every rank's tensor of
  // `buffer`, each rank's own slab already in place: after one barrier every rank copies the
  // other slabs from their owners' tensors; a second barrier ends it.
  void all_gather_symmetric(const SymmetricBuffer& buffer, size_t offset, size_t slab_bytes);

  void broadcast(char* buf, size_t bytes, int root);

  void all_gather(const Tensor& in, std::vector<Tensor>& out);

  // Debug mode: every rank's fingerprint of collective #n through the segment, compared.
  void check_fingerprint(int64_t n, const CollectiveDesc& desc);

  // ---- the communication thread, and callers that help it ----
  // Note [helping]: *_async queue the collective and wake the communication thread, so DDP's
  // backward goes on while its buckets are reduced; a caller that waits on a collective nobody
  // has started runs it (and any queued before it) itself instead of waiting for the thread to
  // wake up, so a blocking call costs what an inline one does. exec_mutex makes "take the
  // oldest task and run it" one step for whichever thread does it: tasks run in queue order.
  struct TaskState {
    std::atomic<bool> done{false};
    std::exception_ptr error;  // written before done
  };
  struct Task {
    std::function<void()> run;
    std::shared_ptr<TaskState> state;
    autograd::trace::Collective trace;  // tracing: launched at issue, run by whoever runs it
  };
  std::thread worker;
  std::mutex exec_mutex;  // held while a task runs
  std::mutex queue_mutex;
  std::condition_variable queue_cv;
  std::deque<Task> queue;
  bool stopping = false;

  // With exec_mutex held: runs the oldest queued task; false if there is none.
  bool run_oldest();

  void loop();

  class TaskWork : public Work {
   public:
    TaskWork(Impl& impl, std::shared_ptr<TaskState> state) : impl_(impl), state_(std::move(state)) {}
    void wait() override {
      if (!state_->done.load(std::memory_order_acquire)) {
        std::lock_guard<std::mutex> exec(impl_.exec_mutex);
        while (!state_->done.load(std::memory_order_acquire) && impl_.run_oldest()) {}
      }
      if (state_->error) std::rethrow_exception(state_->error);
    }
    bool is_completed() override { return state_->done.load(std::memory_order_acquire); }

   private:
    Impl& impl_;
    std::shared_ptr<TaskState> state_;
  };

  // Queues body as the next collective and wakes the communication thread unless !wake (the
  // caller is about to wait for it and will run it itself).
  std::shared_ptr<Work> issue(const CollectiveDesc& desc, std::function<void()> body, bool wake = true);

  // Numbers the collective, runs the debug check, runs body (on the thread that runs the task).
  void run_collective(const CollectiveDesc& desc, const std::function<void()>& body);

  void unmap();
};

}  // namespace minidl::dist
