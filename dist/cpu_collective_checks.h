// dist/cpu_collective_checks.h — the argument checks of the CPU process groups (Gloo, shared
// memory), in one place: each call checks a collective's tensors before it is queued (a
// std::invalid_argument naming "<Group>::<op>" and what was wrong, before any communication) and
// returns its CollectiveDesc (messages, debug-mode fingerprints). Also the one rule both groups
// follow for the 16-bit floats: reduction_buffer.
#pragma once
#include <string>
#include <utility>

#include "minidl/dist/process_group.h"

namespace minidl::dist {

class CpuCollectiveChecks {
 public:
  // group: "ProcessGroupGloo"; transport: "Gloo" (as in "Gloo takes CPU tensors").
  CpuCollectiveChecks(std::string group, std::string transport)
      : group_(std::move(group)), transport_(std::move(transport)) {}

  CollectiveDesc all_reduce(const Tensor& t, ReduceOp op) const;
  // root: a rank of a world of `world`.
  CollectiveDesc broadcast(const Tensor& t, int root, int world) const;
  // The first dim may differ between ranks: the description shows it as "*".
  CollectiveDesc all_gather(const Tensor& t) const;
  // input (world * n, ...) -> out (n, ...) of input's dtype.
  CollectiveDesc reduce_scatter(const Tensor& input, const Tensor& out, ReduceOp op, int world) const;

 private:
  void cpu(const Tensor& t, const char* op) const;  // defined and on the CPU
  std::string who(const char* op) const { return group_ + "::" + op; }

  std::string group_, transport_;
};

// The contiguous buffer a CPU group reduces in place for t: t itself when it is contiguous, else a
// contiguous copy; for bfloat16 and float16 always a float32 copy — every addition (and AVG's
// division) runs in float32, and the result is rounded once, when the group copies the buffer
// back into t (rounding after each addition would lose the low bits of every partial sum).
Tensor reduction_buffer(const Tensor& t);

}  // namespace minidl::dist
