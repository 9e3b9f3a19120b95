// dist/cpu_collective_checks.cpp — the CPU process groups' argument checks (see the header).
#include "minidl/dist/cpu_collective_checks.h"

#include <stdexcept>

namespace minidl::dist {

void CpuCollectiveChecks::cpu(const Tensor& t, const char* op) const {
  if (!t.defined()) throw std::invalid_argument(who(op) + ": undefined tensor");
  if (!t.device().is_cpu()) throw std::invalid_argument(who(op) + ": " + transport_ + " takes CPU tensors, got " + t.desc());
}

CollectiveDesc CpuCollectiveChecks::all_reduce(const Tensor& t, ReduceOp op) const {
  cpu(t, "all_reduce");
  if (op == ReduceOp::AVG && !t.is_floating_point())
    throw std::invalid_argument(who("all_reduce") + ": AVG needs a floating dtype, got " + t.desc() +
                                " (use SUM and divide)");
  return {"all_reduce", dtype_name(t.dtype()), shape_str(t.shape()), std::string("op=") + reduce_op_name(op)};
}

CollectiveDesc CpuCollectiveChecks::broadcast(const Tensor& t, int root, int world) const {
  cpu(t, "broadcast");
  if (root < 0 || root >= world)
    throw std::invalid_argument(who("broadcast") + ": root " + std::to_string(root) + " is not a rank of a world of " +
                                std::to_string(world));
  return {"broadcast", dtype_name(t.dtype()), shape_str(t.shape()), "root=" + std::to_string(root)};
}

CollectiveDesc CpuCollectiveChecks::all_gather(const Tensor& t) const {
  cpu(t, "all_gather");
  std::string shape = "[*";  // the first dim may differ between ranks
  for (int64_t d = 1; d < t.dim(); ++d) shape += ", " + std::to_string(t.size(d));
  shape = t.dim() == 0 ? "[]" : shape + "]";
  return {"all_gather", dtype_name(t.dtype()), shape, ""};
}

CollectiveDesc CpuCollectiveChecks::reduce_scatter(const Tensor& input, const Tensor& out, ReduceOp op,
                                                   int world) const {
  cpu(input, "reduce_scatter");
  cpu(out, "reduce_scatter");
  if (op == ReduceOp::AVG && !input.is_floating_point())
    throw std::invalid_argument(who("reduce_scatter") + ": AVG needs a floating dtype, got " + input.desc());
  Shape slab = input.shape();
  if (input.dim() < 1 || input.size(0) % world != 0 || out.dtype() != input.dtype() ||
      (slab[0] /= world, out.shape() != slab))
    throw std::invalid_argument(who("reduce_scatter") + ": input " + input.desc() + " must be (" +
                                std::to_string(world) + " * n, ...) and out (n, ...) of its dtype, got out " +
                                out.desc());
  return {"reduce_scatter", dtype_name(input.dtype()), shape_str(input.shape()),
          std::string("op=") + reduce_op_name(op)};
}

Tensor reduction_buffer(const Tensor& t) {
  if (is_half(t.dtype())) return t.to(DType::Float32);
  return t.is_contiguous() ? t : t.contiguous();
}

}  // namespace minidl::dist
