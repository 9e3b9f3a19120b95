// dist/process_group.h — ProcessGroup: the collectives every data-parallel piece is built on.
//
// One interface, two backends: ProcessGroupGloo (CPU tensors, Gloo over TCP, rendezvous through
// our TCPStore) and ProcessGroupNCCL (CUDA tensors). Collectives work in place on contiguous
// tensors and are issued in the same order on every rank. *_async variants return a Work whose
// wait() blocks until the result is in the tensor (and rethrows the collective's error).
// Every collective has a timeout: a rank that never arrives makes the others fail with an error
// naming the collective, its sequence number and the timeout, never hang.
// With MINIDL_DIST_DEBUG=1 ranks first compare (sequence number, op, dtype, shape) and fail fast
// naming the first rank that differs.
#pragma once
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "minidl/tensor/tensor.h"

namespace minidl::dist {

enum class ReduceOp { SUM, AVG, MAX, MIN };
const char* reduce_op_name(ReduceOp op);

class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;  // rethrows the collective's error, if any
  virtual bool is_completed() = 0;
};

struct ProcessGroupOptions {
  std::chrono::milliseconds timeout = std::chrono::seconds(300);
  // Debug mode (compare every collective's fingerprint across ranks first). Unset: on when the
  // environment has MINIDL_DIST_DEBUG=1.
  std::optional<bool> debug;
  // The group's name in the store's keys (as torch.distributed's group_name). Empty: numbered in
  // creation order, which names a group alike on every rank only when every rank creates the same
  // groups in the same order; groups that only some ranks create (one per host, one of the host
  // leaders: dist/process_group_hierarchical.h) need a name.
  std::string group_name = "";
};

// Whether options.debug, or else MINIDL_DIST_DEBUG=1, asks for debug mode.
bool debug_mode(const ProcessGroupOptions& options);

// What one collective is, for error messages and for the debug-mode fingerprint that every
// backend exchanges before running collective #seq (Gloo through the store, NCCL with one small
// all-gather), so ranks that called different collectives fail fast instead of hanging.
struct CollectiveDesc {
  std::string op;  // "all_reduce"
  std::string dtype;  // "float32" ("" for barrier)
  std::string shape;  // "[3, 4]" ("[*, 4]" for all_gather, whose first dim may differ)
  std::string extra;  // "op=sum", "root=1", ""

  std::string human() const;  // "all_reduce float32[3, 4] op=sum"
  std::string sig() const;  // "float32[3, 4]" (what messages show after the collective's number)
  // "seq=3 op=all_reduce dtype=float32 shape=[3, 4] op=sum", a newline, then human(): equal
  // calls give equal fingerprints, and the human form travels with it for the message.
  std::string fingerprint(int64_t seq) const;
};
// Empty when every rank's fingerprint of collective #seq equals rank 0's, else the message naming
// the first rank that differs and both calls.
std::string fingerprint_mismatch(int64_t seq, const std::vector<std::string>& per_rank);
// A std::invalid_argument unless out is (world * n, ...) for input's (n, ...), of its dtype.
void check_all_gather_into_tensor(const Tensor& out, const Tensor& input, int world);

class ProcessGroup {
 public:
  ProcessGroup(int rank, int size) : rank_(rank), size_(size) {}
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string backend_name() const = 0;

  // ---- async primitives (in place) ----
  virtual std::shared_ptr<Work> all_reduce_async(Tensor& t, ReduceOp op = ReduceOp::SUM) = 0;
  virtual std::shared_ptr<Work> broadcast_async(Tensor& t, int root) = 0;
  // Gathers every rank's tensor: out[r] is rank r's tensor (out is resized to size()). Tensors may
  // differ in their first dim; all other dims and the dtype must match.
  virtual std::shared_ptr<Work> all_gather_async(const Tensor& t, std::vector<Tensor>& out) = 0;
  // input (size() * n, ...) -> out (n, ...): rank r gets the reduction of every rank's r-th slab.
  virtual std::shared_ptr<Work> reduce_scatter_async(const Tensor& input, Tensor& out, ReduceOp op = ReduceOp::SUM) = 0;
  virtual std::shared_ptr<Work> barrier_async() = 0;
  // out (size() * n, ...) <- every rank's input (n, ...), rank r's at slab r (PyTorch's
  // all_gather_into_tensor); input may be slab rank() of out itself. Here: all_gather_async, then
  // a copy into out at wait(); the shared-memory group copies a symmetric out straight between
  // the ranks' tensors.
  virtual std::shared_ptr<Work> all_gather_into_tensor_async(Tensor& out, const Tensor& input);

  // ---- blocking forms ----
  // all_reduce, broadcast and barrier: a group with a communication thread may run them on the
  // calling thread instead of handing them over and sleeping until they are done (the
  // shared-memory group does: on a busy machine waking that thread costs more than a small
  // collective).
  virtual void all_reduce(Tensor& t, ReduceOp op = ReduceOp::SUM) { all_reduce_async(t, op)->wait(); }
  virtual void broadcast(Tensor& t, int root) { broadcast_async(t, root)->wait(); }
  std::vector<Tensor> all_gather(const Tensor& t);
  Tensor reduce_scatter(const Tensor& input, ReduceOp op = ReduceOp::SUM);
  virtual void barrier() { barrier_async()->wait(); }
  void all_gather_into_tensor(Tensor& out, const Tensor& input) { all_gather_into_tensor_async(out, input)->wait(); }

  // ---- memory the group reaches directly ----
  // A zero-filled tensor that every rank's collectives can reach in place (PyTorch's symmetric
  // memory): a collective call, made by every rank in the same order with the same shape and
  // dtype. The shared-memory group all-reduces such tensors straight between the ranks' copies
  // (DDP keeps its buckets there); other groups, and the shared-memory group when /dev/shm has no
  // room, return an ordinary tensor, which every collective takes as well.
  virtual Tensor empty_symmetric(const Shape& shape, DType dtype, Device device = Device::cpu());

  // ---- byte strings (any serialised object) ----
  std::vector<std::string> all_gather_object(const std::string& bytes);
  void broadcast_object(std::string& bytes, int root);

 protected:
  int rank_;
  int size_;
};

}  // namespace minidl::dist
