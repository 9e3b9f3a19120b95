// dist/join.cpp — dist::Join: the join handshake switched on for a scope, join() at its end.
#include "minidl/dist/join.h"

#include <exception>

namespace minidl::dist {

Join::Join(DistributedDataParallel& ddp) : ddp_(ddp), exceptions_at_entry_(std::uncaught_exceptions()) {
  ddp_.check_joinable();
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
  ddp_.join();
}

}  // namespace minidl::dist
