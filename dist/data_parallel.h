// dist/data_parallel.h — DataParallel: what every data-parallel wrapper of a model shares. One
// replica per process; every rank starts from rank 0's parameters and buffers; a training step's
// gradients are combined across ranks into each parameter's .grad before the optimizer steps.
// Two algorithms implement it, each in its own file:
//   DistributedDataParallel (ddp.h)         PyTorch's DDP: gradient buckets all-reduced while
//                                           backward still runs; averaged over the ranks
//   DeterministicDDP (deterministic_ddp.h)  micro-shards summed in one fixed tree: the same bits
//                                           on any number of processes and threads
// A trainer picks one once and then drives it through this interface:
//
//   std::unique_ptr<dist::DataParallel> dp = deterministic ? make_unique<DeterministicDDP>(model)
//                                                          : make_unique<DistributedDataParallel>(model);
//   opt.zero_grad();
//   cross_entropy((*dp)(Variable(x)), y).backward();
//   dp->step(opt);                                   // finish() + opt.step(), timed
//
// A DataParallel is not a Module: state_dict() and load_state_dict() are the wrapped module's,
// with its names (no "module." prefix), so checkpoints move freely to and from plain models.
#pragma once
#include <chrono>
#include <string>
#include <vector>

#include "minidl/dist/process_group.h"
#include "minidl/nn/module.h"
#include "minidl/optim/optimizer.h"

namespace minidl::dist {

// Seconds spent in the phases of the last training step.
struct StepTimes {
  double forward = 0;  // forward
  double backward = 0;  // end of forward until the last gradient was ready
  double comm_wait = 0;  // waiting for (or running) the gradients' collectives after that
  double optimizer = 0;  // step()'s optimizer.step()
};

class DataParallel {
 public:
  virtual ~DataParallel() = default;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  virtual Variable forward(const Variable& x) = 0;
  Variable operator()(const Variable& x) { return forward(x); }
  // Combines this step's gradients across ranks into .grad (a collective on every rank).
  virtual void finish() = 0;
  // finish(), then optimizer.step(), both timed.
  void step(optim::Optimizer& optimizer);

  nn::Module& module() { return module_; }
  TensorMap state_dict() const { return module_.state_dict(); }
  nn::Module::LoadResult load_state_dict(const TensorMap& s, bool strict = true) {
    return module_.load_state_dict(s, strict);
  }
  void train(bool on = true) { module_.train(on); }
  void eval() { module_.train(false); }
  const StepTimes& last_step_times() const { return times_; }

 protected:
  struct Param {
    std::string name;
    Variable var;
  };
  // Collects the parameters that require a gradient (each once, in registration order), checks
  // that every rank holds the same ones (names, shapes, dtypes: std::invalid_argument naming the
  // first difference, prefixed with `who`) and gives every rank rank 0's parameters and buffers
  // (one coalesced broadcast each). group: nullptr for the default group of dist::init().
  DataParallel(nn::Module& module, ProcessGroup* group, const std::string& who);
  // Gives every rank `root`'s parameters and buffers: one coalesced broadcast each.
  void broadcast_state(int root);

  using Clock = std::chrono::steady_clock;
  static double seconds_since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  }

  // A backward left these parameters (indices into params_) without a gradient: a logic_error
  // naming them, with the remedy.
  [[noreturn]] void throw_missing_gradients(const std::vector<size_t>& missing) const;

  nn::Module& module_;
  ProcessGroup* group_;
  const std::string who_;  // "DistributedDataParallel", for messages
  std::vector<Param> params_;
  StepTimes times_;
  Clock::time_point forward_end_;

 private:
  void check_parameters_match();
};

// Broadcasts `tensors` from root in place with one collective per device: their bytes packed
// into one flat uint8 tensor, sent, and copied back. A non-contiguous tensor goes on its own.
void broadcast_coalesced(ProcessGroup& group, const std::vector<Tensor>& tensors, int root);

}  // namespace minidl::dist
