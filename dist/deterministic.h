// dist/deterministic.h — the fixed summation order of deterministic data parallelism: a sum over
// the micro-shards of a global batch that gives the same bits on 1, 2 or 4 processes.
//
// Floating-point addition is not associative: (a + b) + c and a + (b + c) can differ in the last
// bit, so a sum is only reproducible when its order is. An ordinary all-reduce adds the ranks'
// gradients in an order chosen by the library (Gloo's ring, NCCL's ring or tree, by message
// size) and each rank's gradient is itself a sum over its local batch in an order set by the
// GEMM blocking of that batch size — so 1 process x 64 and 2 x 32 add the same numbers
// differently. Here the unit of work is fixed instead: the global batch is cut into K
// micro-shards (global shard index 0..K-1, m samples each, in the global sample order), each
// shard's gradient comes from its own forward/backward (the same code on the same samples on any
// rank), and shard values are added by one binary tree over the shard index:
//
//   node [lo, hi), n = hi - lo > 1, has the children [lo, mid) and [mid, hi) with
//   mid = lo + n / 2 when n is a power of two, else lo + (the largest power of two below n)
//
// (complete pairwise trees over aligned power-of-two blocks, joined from the right). Rank r of R
// holds the shards [r K / R, (r + 1) K / R). It sums the maximal tree nodes inside its range
// (tree_cover: one node when K / R is a power of two, at most about 2 log2(K / R) otherwise),
// all-gathers those node sums, and every rank finishes the same tree from them — so every rank,
// and every process count, performs exactly the additions of the 1-process tree.
//
// Bytes moved per step, for V values per shard (float32 gradients: V = parameters): each rank
// sends its c node sums to the R - 1 others and receives theirs, (R - 1) c V values in, against
// 2 (R - 1) / R V for a ring all-reduce. For c = 1: the same at R = 2, R / 2 times more above
// (2x at R = 4). A reduce-scatter of node sums plus an all-gather of the finished slices would
// bring it back to the ring's 2 (R - 1) / R V; this file keeps the simpler all-gather.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "minidl/dist/process_group.h"
#include "minidl/tensor/tensor.h"

namespace minidl::dist {

// A node of the shard tree: the shards [lo, hi).
struct ShardRange {
  int64_t lo = 0, hi = 0;
  int64_t size() const { return hi - lo; }
  bool operator==(const ShardRange&) const = default;
};

// Where the tree node [lo, hi) (hi - lo >= 2) splits.
int64_t shard_tree_split(int64_t lo, int64_t hi);

// The maximal nodes of the tree over [0, total) that lie inside [lo, hi), in shard order: the
// partial sums a rank holding the shards [lo, hi) contributes.
std::vector<ShardRange> shard_tree_cover(int64_t lo, int64_t hi, int64_t total);

// The sum over the node `range` by the tree, using known(node) for the nodes it has (a leaf
// [i, i + 1) must be known when reached). known returns nullptr for a node it does not have.
Tensor shard_tree_sum(ShardRange range, const std::function<const Tensor*(ShardRange)>& known);

// The sum over every rank's shards, in the fixed tree, with the same bits on every rank.
// leaves: this rank's shard values in shard order, 1-D tensors of one length, dtype and device;
// every rank must pass the same number (rank r's leaves are the shards [r n, (r + 1) n) of
// n R). A rank with a different number, or leaves of a different length, is an error naming it.
// One all_gather when pg.size() > 1 (nothing with one process). bfloat16 / float16 leaves are
// widened to float32, summed by the tree in float32, and the sum is rounded once to their dtype.
Tensor shard_tree_all_reduce(const std::vector<Tensor>& leaves, ProcessGroup& pg);

}  // namespace minidl::dist
