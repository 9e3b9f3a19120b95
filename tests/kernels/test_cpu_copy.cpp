// tests/kernels/test_cpu_copy.cpp — kernels/cpu/copy.h's strided_copy against the plain
// definition (every element by its index), for the layouts its dimension merging and row
// splitting meet: a slice along dim 1 (what cat and narrow write: merged into rows of C * H * W),
// a permutation (nothing merges), a broadcast source (stride 0), size-1 dimensions, one contiguous
// row longer than a work piece, with 1 and 2 threads; and coalesce_copy_layout's result itself.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "minidl/kernels/cpu/copy.h"
#include "minidl/kernels/cpu/parallel.h"

namespace {

using minidl::kernels::cpu::coalesce_copy_layout;
using minidl::kernels::cpu::strided_copy;
using V = std::vector<int64_t>;

// dst[offset of index i] = src[offset of index i] for every index of shape, one element at a time
void reference_copy(const float* src, const V& ss, float* dst, const V& ds, const V& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  for (int64_t e = 0; e < n; ++e) {
    int64_t rem = e, so = 0, dof = 0;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      so += rem % shape[d] * ss[d];
      dof += rem % shape[d] * ds[d];
      rem /= shape[d];
    }
    dst[dof] = src[so];
  }
}

struct Case {
  const char* what;
  V shape, src_strides, dst_strides;
  int64_t src_size, dst_size;
};

}  // namespace

TEST(CpuCopy, StridedCopyMatchesTheDefinition) {
  const Case cases[] = {
      // (2, 3, 4, 5) into channels 2..4 of a (2, 7, 4, 5) tensor
      {"slice along dim 1", {2, 3, 4, 5}, {60, 20, 5, 1}, {140, 20, 5, 1}, 120, 280},
      {"permutation", {3, 4, 5}, {1, 3, 12}, {20, 5, 1}, 60, 60},
      {"permutation whose last two dimensions merge", {3, 4, 5}, {1, 15, 3}, {20, 5, 1}, 60, 60},
      {"broadcast source", {6, 4, 3}, {0, 3, 1}, {12, 3, 1}, 12, 72},
      {"size-1 dimensions", {1, 5, 1, 7}, {35, 7, 7, 1}, {70, 14, 9, 2}, 35, 70},
      {"a long contiguous row", {3, 20000}, {20000, 1}, {20000, 1}, 60000, 60000},
      {"one element", {1, 1}, {1, 1}, {1, 1}, 1, 1},
  };
  const int saved = minidl::kernels::cpu::get_num_threads();
  for (const Case& c : cases)
    for (int threads : {1, 2}) {
      minidl::kernels::cpu::set_num_threads(threads);
      std::vector<float> src(static_cast<size_t>(c.src_size));
      std::iota(src.begin(), src.end(), 1.0f);
      std::vector<float> dst(static_cast<size_t>(c.dst_size), -1.0f), want = dst;
      strided_copy(src.data(), c.src_strides, dst.data(), c.dst_strides, c.shape);
      reference_copy(src.data(), c.src_strides, want.data(), c.dst_strides, c.shape);
      EXPECT_EQ(dst, want) << c.what << ", " << threads << " threads";
    }
  minidl::kernels::cpu::set_num_threads(saved);
}

TEST(CpuCopy, DimensionsLaidOutAsOneAreMerged) {
  // the slice along dim 1: C, H, W merge into one row of 60 (src and dst agree below dim 1)
  auto l = coalesce_copy_layout({2, 3, 4, 5}, {60, 20, 5, 1}, {140, 20, 5, 1});
  EXPECT_EQ(l.shape, (V{2, 60}));
  EXPECT_EQ(l.src_strides, (V{60, 1}));
  EXPECT_EQ(l.dst_strides, (V{140, 1}));
  // a permutation keeps its dimensions; size-1 dimensions go
  l = coalesce_copy_layout({3, 1, 4, 5}, {1, 99, 3, 12}, {20, 20, 5, 1});
  EXPECT_EQ(l.shape, (V{3, 4, 5}));
  // two source dimensions that step uniformly (15 = 5 x 3) merge even when permuted
  l = coalesce_copy_layout({3, 4, 5}, {1, 15, 3}, {20, 5, 1});
  EXPECT_EQ(l.shape, (V{3, 20}));
  EXPECT_EQ(l.src_strides, (V{1, 3}));
  // a broadcast source merges only with another broadcast dimension
  l = coalesce_copy_layout({6, 2, 3}, {0, 0, 1}, {6, 3, 1});
  EXPECT_EQ(l.shape, (V{12, 3}));
  EXPECT_EQ(l.src_strides, (V{0, 1}));
  // all size 1: one element
  l = coalesce_copy_layout({1, 1}, {5, 1}, {5, 1});
  EXPECT_EQ(l.shape, (V{1}));
}
