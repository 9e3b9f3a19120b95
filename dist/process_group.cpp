// dist/process_group.cpp — the backend-independent parts of ProcessGroup: reduce-op names, the
// debug-mode collective fingerprints, the blocking all_gather / reduce_scatter forms, and the
// byte-string collectives built on them (all_gather_object: all-gather the lengths, then the
// bytes padded to the longest; broadcast_object: broadcast the length, then the bytes).
#include "minidl/dist/process_group.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "minidl/tensor/creation.h"

namespace minidl::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM:
      return "sum";
    case ReduceOp::AVG:
      return "avg";
    case ReduceOp::MAX:
      return "max";
    case ReduceOp::MIN:
      return "min";
  }
  return "?";
}

bool debug_mode(const ProcessGroupOptions& options) {
  if (options.debug.has_value()) return *options.debug;
  const char* env = std::getenv("MINIDL_DIST_DEBUG");
  return env != nullptr && std::string(env) == "1";
}

std::string CollectiveDesc::human() const {
  std::string s = op;
  if (!dtype.empty()) s += " " + dtype + shape;
  if (!extra.empty()) s += " " + extra;
  return s;
}

std::string CollectiveDesc::sig() const { return dtype.empty() ? std::string() : dtype + shape; }

std::string CollectiveDesc::fingerprint(int64_t seq) const {
  std::string key =
      "seq=" + std::to_string(seq) + " op=" + op + " dtype=" + (dtype.empty() ? "none" : dtype) + " shape=" + shape;
  if (!extra.empty()) key += " " + extra;
  return key + "\n" + human();
}

std::string fingerprint_mismatch(int64_t seq, const std::vector<std::string>& per_rank) {
  auto human_of = [](const std::string& f) {
    const size_t nl = f.find('\n');
    return nl == std::string::npos ? f : f.substr(nl + 1);
  };
  for (size_t r = 1; r < per_rank.size(); ++r)
    if (per_rank[r] != per_rank[0])
      return "MINIDL_DIST_DEBUG: collective #" + std::to_string(seq) + " mismatch: rank 0 called " +
             human_of(per_rank[0]) + ", rank " + std::to_string(r) + " called " + human_of(per_rank[r]);
  return "";
}

std::vector<Tensor> ProcessGroup::all_gather(const Tensor& t) {
  std::vector<Tensor> out;
  all_gather_async(t, out)->wait();
  return out;
}

Tensor ProcessGroup::reduce_scatter(const Tensor& input, ReduceOp op) {
  if (input.dim() < 1 || input.size(0) % size_ != 0)
    throw std::invalid_argument("reduce_scatter: input " + input.desc() +
                                " must have a first dim divisible by the world size " + std::to_string(size_));
  Shape shape = input.shape();
  shape[0] /= size_;  // (size * n, ...) -> (n, ...)
  Tensor out = empty(shape, input.dtype(), input.device());
  reduce_scatter_async(input, out, op)->wait();
  return out;
}

namespace {

// all_gather_into_tensor's default: the all_gather's rows copied into `out` at wait().
class GatherIntoWork : public Work {
 public:
  GatherIntoWork(std::shared_ptr<Work> inner, std::shared_ptr<std::vector<Tensor>> rows, Tensor out)
      : inner_(std::move(inner)), rows_(std::move(rows)), out_(std::move(out)) {}
  void wait() override {
    inner_->wait();
    if (copied_) return;
    int64_t at = 0;
    for (const Tensor& row : *rows_) {
      const int64_t n = row.dim() == 0 ? 1 : row.size(0);
      out_.narrow(0, at, n).copy_(row);
      at += n;
    }
    copied_ = true;
  }
  bool is_completed() override { return copied_; }

 private:
  std::shared_ptr<Work> inner_;
  std::shared_ptr<std::vector<Tensor>> rows_;
  Tensor out_;
  bool copied_ = false;
};

}  // namespace

void check_all_gather_into_tensor(const Tensor& out, const Tensor& input, int world) {
  if (input.dim() < 1 || out.dim() != input.dim() || out.dtype() != input.dtype() ||
      out.size(0) != world * input.size(0) ||
      !std::equal(out.shape().begin() + 1, out.shape().end(), input.shape().begin() + 1))
    throw std::invalid_argument("all_gather_into_tensor: out " + out.desc() + " must be (" + std::to_string(world) +
                                " * n, ...) for input " + input.desc() + " (n, ...), of its dtype");
}

std::shared_ptr<Work> ProcessGroup::all_gather_into_tensor_async(Tensor& out, const Tensor& input) {
  check_all_gather_into_tensor(out, input, size_);
  auto rows = std::make_shared<std::vector<Tensor>>();
  std::shared_ptr<Work> inner = all_gather_async(input, *rows);
  return std::make_shared<GatherIntoWork>(std::move(inner), std::move(rows), out);
}

Tensor ProcessGroup::empty_symmetric(const Shape& shape, DType dtype, Device device) {
  return zeros(shape, dtype, device);
}

std::vector<std::string> ProcessGroup::all_gather_object(const std::string& bytes) {
  // 1. Every rank's length: int64[1] each.
  Tensor length = from_vector<int64_t>({static_cast<int64_t>(bytes.size())}, {1});
  std::vector<Tensor> lengths = all_gather(length);
  int64_t longest = 0;
  for (const Tensor& l : lengths) longest = std::max(longest, l.data<int64_t>()[0]);
  // 2. The bytes, padded to the longest so every rank sends the same shape: uint8[longest].
  Tensor padded = zeros({longest}, DType::UInt8);
  if (!bytes.empty()) std::memcpy(padded.data<uint8_t>(), bytes.data(), bytes.size());
  std::vector<Tensor> gathered = all_gather(padded);
  std::vector<std::string> out(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    const auto* p = reinterpret_cast<const char*>(gathered[static_cast<size_t>(r)].data<uint8_t>());
    out[static_cast<size_t>(r)].assign(p, static_cast<size_t>(lengths[static_cast<size_t>(r)].data<int64_t>()[0]));
  }
  return out;
}

void ProcessGroup::broadcast_object(std::string& bytes, int root) {
  // 1. The root's length, so the others can size their buffer.
  Tensor length = from_vector<int64_t>({static_cast<int64_t>(bytes.size())}, {1});
  broadcast(length, root);
  const int64_t n = length.data<int64_t>()[0];
  // 2. The bytes: uint8[n].
  Tensor buffer = zeros({n}, DType::UInt8);
  if (rank_ == root && n > 0) std::memcpy(buffer.data<uint8_t>(), bytes.data(), static_cast<size_t>(n));
  broadcast(buffer, root);
  bytes.assign(reinterpret_cast<const char*>(buffer.data<uint8_t>()), static_cast<size_t>(n));
}

}  // namespace minidl::dist
