// dist/grad_scaler_sync.h — sync_grad_scaler: every rank's GradScaler takes the same skip
// decision. It installs a found_inf reducer (optim/grad_scaler.h) that all-reduces the flag as
// a 1-element float32 with ReduceOp::MAX, so one rank's inf or NaN makes every rank skip the
// step and back its scale off, and the replicas stay identical.
//
//   optim::GradScaler scaler;
//   dist::sync_grad_scaler(scaler);                  // the default group, at every unscale_
//   scaler.scale(loss).backward();                   // DDP all-reduces the gradients
//   ddp.finish();
//   scaler.step(opt);                                // one 1-element all-reduce, then step or skip
//   scaler.update();
//
// Why reduce the flag when DDP already averages the gradients (an inf on one rank is inf or NaN
// on all after the average): agreement must not rest on that. Gradients changed after the
// all-reduce (a rank-local clip or penalty, no_sync() accumulation, a hook), data parallelism
// without DDP's averaging, or a parameter outside DDP give ranks different flags; one
// 1-element all-reduce per optimizer and step costs microseconds next to the gradients'.
// Every rank must call unscale_ / step the same number of times (it is a collective).
#pragma once
#include "minidl/dist/process_group.h"
#include "minidl/optim/grad_scaler.h"

namespace minidl::dist {

// group: nullptr for the default group of dist::init(), looked up at each reduction.
void sync_grad_scaler(optim::GradScaler& scaler, ProcessGroup* group = nullptr);

}  // namespace minidl::dist
