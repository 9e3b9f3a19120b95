// dist/join.h — dist::Join: training with uneven inputs across ranks (PyTorch's
// torch.distributed.algorithms.Join, for DistributedDataParallel).
//
//   dist::DistributedDataParallel ddp(model);
//   {
//     dist::Join join(ddp);                         // every training forward now handshakes
//     for (auto& batch : uneven_loader) {           // ranks may have different batch counts
//       opt.zero_grad();
//       cross_entropy(ddp(Variable(batch.input)), batch.target).backward();
//       ddp.step(opt);
//     }
//   }                                               // out of batches: shadow the others, then sync
//
// Inside the scope every training forward takes part in a join handshake: one all-reduce of one
// number, how many ranks are still training. When the scope ends normally this rank has run out
// of inputs, and the destructor calls ddp.join(): it answers the handshakes and shadows the
// collectives of the ranks still training (zero gradients) until every rank has joined, then every
// rank takes the model of the rank that trained longest. Leaving the scope by an exception only
// switches the handshake off (the run is failing; no collective is started). Without a Join there
// is no handshake, and every rank must run the same number of steps (see ddp.h). Refused
// (std::logic_error) for deterministic DDP and for models whose forward communicates
// (SyncBatchNorm), which a joined rank cannot shadow.
//
// With a ZeroRedundancyOptimizer, pass it too (PyTorch: Join([model, optimizer])):
//     dist::Join join(ddp, optimizer);
// A joined rank then also shadows the optimizer's step: its slabs get the averaged gradients of
// the ranks still training (zeros from the joined ones, divided by the world size as above), it
// updates them and takes part in the all-gather, so every rank's model and optimizer shard stay
// those of an uninterrupted run of the same steps. Collectives of the step that the joined rank
// cannot know of are refused inside the scope: the optimizer's clip_grad_norm throws. When the
// scope ends, the optimizer's last all-gather is done (wait_for_parameters): the model is whole.
#pragma once
#include "minidl/dist/ddp.h"
#include "minidl/dist/zero_redundancy_optimizer.h"

namespace minidl::dist {

class Join {
 public:
  explicit Join(DistributedDataParallel& ddp);
  // `optimizer` must have been built with {.ddp = &ddp}: a std::invalid_argument otherwise.
  Join(DistributedDataParallel& ddp, ZeroRedundancyOptimizer& optimizer);
  // Joins (collectives with the ranks still training); may throw their errors.
  ~Join() noexcept(false);
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

 private:
  DistributedDataParallel& ddp_;
  ZeroRedundancyOptimizer* optimizer_ = nullptr;  // shadowed too, when given
  int exceptions_at_entry_;
};

}  // namespace minidl::dist
