// dist/deterministic.cpp — the shard tree: where nodes split, which nodes a rank contributes, the
// sum over a node, and the all-gather that lets every rank finish the same tree (see
// deterministic.h).
#include "minidl/dist/deterministic.h"

#include <bit>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>

#include "minidl/tensor/creation.h"
#include "minidl/tensor/ops.h"

namespace minidl::dist {

int64_t shard_tree_split(int64_t lo, int64_t hi) {
  const uint64_t n = static_cast<uint64_t>(hi - lo);
  if (hi - lo < 2)
    throw std::invalid_argument("shard_tree_split: a node of " + std::to_string(hi - lo) + " shard(s) has no children");
  return lo + static_cast<int64_t>(std::has_single_bit(n) ? n / 2 : std::bit_floor(n));
}

namespace {

void cover(ShardRange node, int64_t lo, int64_t hi, std::vector<ShardRange>& out) {
  if (node.hi <= lo || hi <= node.lo) return;  // disjoint
  if (lo <= node.lo && node.hi <= hi) {
    out.push_back(node);
    return;
  }
  const int64_t mid = shard_tree_split(node.lo, node.hi);
  cover({node.lo, mid}, lo, hi, out);
  cover({mid, node.hi}, lo, hi, out);
}

}  // namespace

std::vector<ShardRange> shard_tree_cover(int64_t lo, int64_t hi, int64_t total) {
  if (lo < 0 || hi > total || lo >= hi)
    throw std::invalid_argument("shard_tree_cover: [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                ") is not a non-empty range of the shards [0, " + std::to_string(total) + ")");
  std::vector<ShardRange> out;
  cover({0, total}, lo, hi, out);
  return out;
}

Tensor shard_tree_sum(ShardRange range, const std::function<const Tensor*(ShardRange)>& known) {
  if (const Tensor* t = known(range)) return *t;
  if (range.size() < 2)
    throw std::logic_error("shard_tree_sum: the value of shard " + std::to_string(range.lo) + " is missing");
  const int64_t mid = shard_tree_split(range.lo, range.hi);
  const Tensor left = shard_tree_sum({range.lo, mid}, known);
  return add(left, shard_tree_sum({mid, range.hi}, known));
}

Tensor shard_tree_all_reduce(const std::vector<Tensor>& leaves, ProcessGroup& pg) {
  if (leaves.empty()) throw std::invalid_argument("shard_tree_all_reduce: this rank has no shard values");
  const Tensor& first = leaves.front();
  for (const Tensor& t : leaves)
    if (t.dim() != 1 || t.numel() != first.numel() || t.dtype() != first.dtype() || t.device() != first.device())
      throw std::invalid_argument(
          "shard_tree_all_reduce: shard values must be 1-D tensors of one length, dtype and "
          "device; got " +
          first.desc() + " and " + t.desc());
  if (is_half(first.dtype())) {  // every addition of the tree in float32, the sum rounded once
    std::vector<Tensor> wide;
    for (const Tensor& t : leaves) wide.push_back(t.to(DType::Float32));
    return shard_tree_all_reduce(wide, pg).to(first.dtype());
  }
  const int64_t n = static_cast<int64_t>(leaves.size()), R = pg.size(), r = pg.rank(), total = n * R;
  const int64_t L = first.numel();
  const auto leaf = [&](ShardRange s) -> const Tensor* {
    return s.size() == 1 && s.lo >= r * n && s.lo < (r + 1) * n ? &leaves[static_cast<size_t>(s.lo - r * n)] : nullptr;
  };
  if (R == 1) return shard_tree_sum({0, n}, leaf);

  // This rank's node sums, one row each, with the node's shard count in an extra last column
  // (so that a rank running a different number of shards is caught, not silently mis-summed).
  const std::vector<ShardRange> mine = shard_tree_cover(r * n, (r + 1) * n, total);
  Tensor send = empty({static_cast<int64_t>(mine.size()), L + 1}, first.dtype(), first.device());
  for (size_t j = 0; j < mine.size(); ++j) {
    Tensor row = send.select(0, static_cast<int64_t>(j));
    row.narrow(0, 0, L).copy_(shard_tree_sum(mine[j], leaf));
    row.narrow(0, L, 1).fill_(static_cast<double>(mine[j].size()));
  }
  const std::vector<Tensor> rows = pg.all_gather(send);  // rows[q]: rank q's node sums

  std::map<std::pair<int64_t, int64_t>, Tensor> nodes;
  for (int64_t q = 0; q < R; ++q) {
    const Tensor& got = rows[static_cast<size_t>(q)];
    const std::vector<ShardRange> expected = shard_tree_cover(q * n, (q + 1) * n, total);
    const Tensor counts = got.size(1) == L + 1 ? got.narrow(1, L, 1).to(DType::Float64).cpu().contiguous() : Tensor();
    double shards = 0;
    bool same = counts.defined() && got.size(0) == static_cast<int64_t>(expected.size());
    for (int64_t j = 0; counts.defined() && j < got.size(0); ++j) {
      const double c = counts.data<double>()[j];
      shards += c;
      if (same && c != static_cast<double>(expected[static_cast<size_t>(j)].size())) same = false;
    }
    if (!same)
      throw std::runtime_error(
          "shard_tree_all_reduce: rank " + std::to_string(q) + " sent " +
          (counts.defined() ? std::to_string(static_cast<int64_t>(shards)) + " shard(s)"
                            : "values of another length (" + std::to_string(got.size(1) - 1) + ")") +
          ", rank " + std::to_string(r) + " has " + std::to_string(n) + " of " + std::to_string(L) +
          " values: every rank must contribute the same number of "
          "micro-shards of the same size per step");
    for (size_t j = 0; j < expected.size(); ++j)
      nodes[{expected[j].lo, expected[j].hi}] = got.select(0, static_cast<int64_t>(j)).narrow(0, 0, L);
  }
  return shard_tree_sum({0, total}, [&](ShardRange s) -> const Tensor* {
    const auto it = nodes.find({s.lo, s.hi});
    return it == nodes.end() ? nullptr : &it->second;
  });
}

}  // namespace minidl::dist
