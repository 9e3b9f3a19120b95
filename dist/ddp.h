// dist/ddp.h — DistributedDataParallel: one model replica per process, gradients averaged.
//
//   dist::init();
//   nn::CNN model;                                   // same seed on every rank, or not: DDP
//   dist::DistributedDataParallel ddp(model);        // broadcasts rank 0's weights and buffers
//   optim::SGD opt(model.parameters(), {...});
//   for (auto& batch : loader) {                      // loader with a DistributedSampler
//     opt.zero_grad();
//     Variable loss = cross_entropy(ddp.forward(Variable(batch.input)), batch.target);
//     loss.backward();                                // all-reduces overlap the rest of backward
//     ddp.step(opt);                                  // finish() + opt.step(), timed
//   }
//
// Gradients are grouped into buckets in reverse registration order (the order backward produces
// them), one open bucket per dtype and device: a bucket closes once it holds at least its cap,
// first_bucket_cap_mb for a dtype's first and bucket_cap_mb for the others (PyTorch's rule: the
// parameter that reaches the cap is in it); buckets launch in the order they close. Autograd's
// post-accumulate hook marks a parameter ready; when a bucket is complete its gradients are
// flattened into one buffer and its all-reduce starts asynchronously on the process group's
// communication thread, strictly in bucket order on every rank. When the last bucket has been
// launched, DDP waits for all of them (each all-reduce is an average, ReduceOp::AVG) — so when
// backward() returns the gradients are synchronised. Each parameter's .grad is then a view of its slot in the bucket
// (PyTorch's gradient_as_bucket_view, always on here): the average is made in place, with no copy
// back, and a .grad tensor kept past the next backward changes with it (clone() it to keep it).
// Each bucket's buffer is padded to a multiple of the number of ranks (at most size - 1 zeros),
// so that it splits into equal slabs. Under a ZeroRedundancyOptimizer (shard_gradients()) each
// bucket is reduce-scattered instead: rank r's slab r of every bucket holds the average, the rest
// of its .grad stays this rank's own gradient — the same bytes as an all-reduce's first half.
// The algorithm is PyTorch's alone; DeterministicDDP (deterministic_ddp.h) is the other
// DataParallel (data_parallel.h), whose sums do not depend on the number of processes.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "minidl/dist/data_parallel.h"

namespace minidl::dist {

struct DDPOptions {
  double bucket_cap_mb = 25.0;
  double first_bucket_cap_mb = 1.0;
  bool find_unused_parameters = false;  // mark parameters unused in this forward as ready (zero grad)
  // Rank 0's buffers (BN running stats) at every training forward, in one coalesced broadcast;
  // buffers of layers that synchronise themselves (SyncBatchNorm) are equal already and left out.
  bool broadcast_buffers = true;
  ProcessGroup* group = nullptr;  // nullptr: the default group of dist::init()
};

class DistributedDataParallel : public DataParallel {
 public:
  explicit DistributedDataParallel(nn::Module& module, const DDPOptions& options = {});
  ~DistributedDataParallel() override;

  Variable forward(const Variable& x) override;
  // Waits for every bucket and writes the averaged gradients (a no-op when backward already did).
  // Without find_unused_parameters, a parameter that got no gradient is an error naming it.
  void finish() override;

  // Gradient accumulation: inside the guard's scope backward does not synchronise.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& d) : d_(d), prev_(d.require_sync_) { d_.require_sync_ = false; }
    ~NoSyncGuard() { d_.require_sync_ = prev_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& d_;
    bool prev_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // Uneven inputs (PyTorch's Join): inside a dist::Join scope (dist/join.h) every training
  // forward takes part in a join handshake (one small all-reduce); a rank that has run out of
  // batches calls join() — the scope's end does it — and shadows the collectives of the ranks
  // still training (a zero gradient per bucket) until every rank has joined. When all have
  // joined, every rank takes the parameters and buffers of the rank that trained longest
  // (optimizer state is not synchronised, as in PyTorch). Outside a Join scope there is no
  // handshake (no blocking collective in a step): every rank must run the same number of steps
  // (DistributedSampler sees to it), and a rank that stops early makes the others' next gradient
  // all-reduce fail within the collective timeout, naming the ranks that did not reach that step.
  // Models whose forward itself communicates (SyncBatchNorm) cannot be shadowed: join() refuses
  // them. Under a ZeroRedundancyOptimizer each shadowed step also runs the optimizer's step (its
  // collectives: this rank updates its own slabs from the reduce-scattered gradients, then the
  // all-gather), passed as shadow_optimizer_step — dist::Join(ddp, optimizer) does it; every rank
  // then takes every step and no model is copied at the end.
  void join(const std::function<void()>& shadow_optimizer_step = {});
  bool join_enabled() const { return join_enabled_; }  // inside a dist::Join scope

  // ---- gradient sharding, for ZeroRedundancyOptimizer (zero_redundancy_optimizer.h) ----
  // From the next backward on, each bucket is reduce-scattered (an average) instead of
  // all-reduced: only this rank's slab of it — elements [rank * n, (rank + 1) * n) of a bucket of
  // size * n — holds the averaged gradients. Chosen once, by the optimizer's constructor; join()
  // then needs the optimizer's step to shadow (dist::Join(ddp, optimizer)).
  void shard_gradients() { sharded_ = true; }
  bool gradients_sharded() const { return sharded_; }
  // Where the gradients lie: per bucket, in bucket order, its padded length and each of its
  // parameters with the element offset of its gradient in the bucket.
  struct BucketLayout {
    int64_t numel = 0;
    std::vector<std::pair<Variable, int64_t>> params;
  };
  std::vector<BucketLayout> bucket_layout() const;

  // ---- introspection (tests, profiling) ----
  size_t num_buckets() const { return buckets_.size(); }
  // Parameter names of each bucket, in bucket order.
  std::vector<std::vector<std::string>> bucket_parameter_names() const;
  // How many buckets of the last backward started their all-reduce before the last gradient
  // was ready (overlap of communication with backward).
  int buckets_launched_before_backward_end() const { return launched_early_; }

 private:
  struct Slot {  // where a parameter's gradient goes, by index of params_
    size_t bucket = 0;
    int64_t offset = 0;  // element offset in the bucket's buffer
    uint64_t hook = 0;
  };
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    Tensor buffer;  // flat, float32/float64; (size * n)
    Tensor slab;  // (n): this rank's part of buffer, what a sharded step reduces
    int pending = 0;  // parameters not ready yet in this backward
    std::shared_ptr<Work> work;
  };

  friend class Join;  // switches the join handshake on and off

  // join() and dist::Join: a logic_error when they cannot apply (with_optimizer_step: join's argument)
  void check_joinable(bool with_optimizer_step) const;
  void broadcast_buffers(int root);  // the synced buffers, coalesced
  Tensor grad_slot(const Bucket& b, size_t i) const;  // parameter i's gradient slot in b.buffer, its shape
  // A gradient all-reduce failed: names the step and the ranks that did not reach it.
  [[noreturn]] void throw_step_failure(const std::exception& e);
  void build_buckets();
  void prepare_for_backward(const Variable& out);
  void mark_ready(size_t param_index);
  void launch_ready_buckets();
  void finalize();
  int join_handshake(int active);  // sum over ranks of `active`

  DDPOptions options_;
  std::vector<Slot> slots_;  // per parameter
  std::vector<Bucket> buckets_;
  std::vector<bool> ready_;
  size_t next_bucket_ = 0;  // next bucket to launch, in order
  size_t num_ready_ = 0;
  bool expect_backward_ = false;  // a training forward ran and its gradients are not synced yet
  bool finalized_ = true;
  bool require_sync_ = true;
  bool has_collective_modules_ = false;
  bool sharded_ = false;  // shard_gradients(): reduce-scatter the buckets
  bool join_enabled_ = false;  // inside a dist::Join scope: every training forward handshakes
  bool on_default_group_ = false;  // the default group: its store can name the ranks of a failed step
  std::vector<Tensor> synced_buffers_;  // what broadcast_buffers sends: buffers no layer keeps equal
  int launched_early_ = 0;
  int64_t synced_steps_ = 0;  // training forwards that synchronised (for join's final model)
};

}  // namespace minidl::dist
