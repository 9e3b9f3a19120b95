// dist/join.cpp — dist::Join: the join handshake switched on for a scope, join() at its end.
#include "minidl/dist/join.h"

#include <exception>
#include <stdexcept>

namespace minidl::dist {

Join::Join(DistributedDataParallel& ddp) : ddp_(ddp), exceptions_at_entry_(std::uncaught_exceptions()) {
  ddp_.check_joinable(false);
  ddp_.join_enabled_ = true;
}

Join::Join(DistributedDataParallel& ddp, ZeroRedundancyOptimizer& optimizer)
    : ddp_(ddp), optimizer_(&optimizer), exceptions_at_entry_(std::uncaught_exceptions()) {
  if (optimizer.ddp() != &ddp)
    throw std::invalid_argument(
        "dist::Join: the ZeroRedundancyOptimizer does not shard this DistributedDataParallel's gradients "
        "(build it with {.ddp = &ddp})");
  ddp_.check_joinable(true);
  ddp_.join_enabled_ = true;
}

Join::~Join() noexcept(false) {
  if (std::uncaught_exceptions() > exceptions_at_entry_) {  // unwinding: no collective
    ddp_.join_enabled_ = false;
    return;
  }
  struct Off {
    DistributedDataParallel& ddp;
    ~Off() { ddp.join_enabled_ = false; }
  } off{ddp_};
  if (optimizer_) {
    ddp_.join([this] { optimizer_->step(); });
    optimizer_->wait_for_parameters();  // the model whole when the scope ends, as without ZeRO
  } else {
    ddp_.join();
  }
}

}  // namespace minidl::dist
