// tests/kernels/test_cpu_copy.cpp — kernels/cpu/copy.h's strided_copy against the plain
// definition (every element by its index), for the layouts its dimension merging and row
// splitting meet: a slice along dim 1 (what cat and narrow write: merged into rows of C * H * W),
// a permutation (nothing merges), a broadcast source (stride 0), size-1 dimensions, one contiguous
// row longer than a work piece, transposing copies (whole and partial 16 x 16 tiles, the
// transposed dimension outermost or between others, into a slice), with 1 and 2 threads, float
// and double; and coalesce_copy_layout's and transposed_dim's results themselves.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "minidl/kernels/cpu/copy.h"
#include "minidl/kernels/cpu/parallel.h"

namespace {

using minidl::kernels::cpu::coalesce_copy_layout;
using minidl::kernels::cpu::strided_copy;
using minidl::kernels::cpu::strided_copy_reference;
using minidl::kernels::cpu::transposed_dim;
using V = std::vector<int64_t>;

// dst[offset of index i] = src[offset of index i] for every index of shape, one element at a time
template <class T> void reference_copy(const T* src, const V& ss, T* dst, const V& ds, const V& shape) {
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
      // (2, 49, 128).transpose(1, 2): three whole tiles and a 1-wide one along each row of 49
      {"transpose of the last two dimensions", {2, 128, 49}, {6272, 1, 128}, {6272, 49, 1}, 12544, 12544},
      {"transpose with partial tiles both ways", {37, 21}, {1, 37}, {21, 1}, 777, 777},
      // a (3, 4, 18, 5) tensor read as (3, 5, 4, 18): src contiguous along dim 1, between others
      {"permutation, the transposed dimension inside", {3, 5, 4, 18}, {360, 1, 90, 5}, {360, 72, 18, 1}, 1080, 1080},
      // a (16, 16) transpose into rows of 20 (a slice of a wider tensor)
      {"transpose into a slice", {16, 16}, {1, 16}, {20, 1}, 256, 320},
  };
  const int saved = minidl::kernels::cpu::get_num_threads();
  for (const Case& c : cases)
    for (int threads : {1, 2}) {
      minidl::kernels::cpu::set_num_threads(threads);
      std::vector<float> src(static_cast<size_t>(c.src_size));
      std::iota(src.begin(), src.end(), 1.0f);
      std::vector<float> dst(static_cast<size_t>(c.dst_size), -1.0f), want = dst, plain = dst;
      strided_copy(src.data(), c.src_strides, dst.data(), c.dst_strides, c.shape);
      strided_copy_reference(src.data(), c.src_strides, plain.data(), c.dst_strides, c.shape);
      reference_copy(src.data(), c.src_strides, want.data(), c.dst_strides, c.shape);
      EXPECT_EQ(dst, want) << c.what << ", " << threads << " threads";
      EXPECT_EQ(plain, want) << c.what << " (strided_copy_reference), " << threads << " threads";
      // double takes the element-by-element tile
      std::vector<double> srcd(src.begin(), src.end()), dstd(static_cast<size_t>(c.dst_size), -1.0), wantd = dstd;
      strided_copy(srcd.data(), c.src_strides, dstd.data(), c.dst_strides, c.shape);
      reference_copy(srcd.data(), c.src_strides, wantd.data(), c.dst_strides, c.shape);
      EXPECT_EQ(dstd, wantd) << c.what << " (double), " << threads << " threads";
    }
  minidl::kernels::cpu::set_num_threads(saved);
}

TEST(CpuCopy, TransposingCopiesAreFound) {
  // src contiguous along dim 1 of the coalesced layout, dst along the last: transposed
  EXPECT_EQ(transposed_dim(coalesce_copy_layout({2, 128, 49}, {6272, 1, 128}, {6272, 49, 1})), 1);
  EXPECT_EQ(transposed_dim(coalesce_copy_layout({3, 5, 4, 18}, {360, 1, 90, 5}, {360, 72, 18, 1})), 1);
  // a slice (both contiguous along the last), a broadcast source, a source with no unit stride: not
  EXPECT_EQ(transposed_dim(coalesce_copy_layout({2, 3, 4, 5}, {60, 20, 5, 1}, {140, 20, 5, 1})), -1);
  EXPECT_EQ(transposed_dim(coalesce_copy_layout({6, 4, 3}, {0, 3, 1}, {12, 3, 1})), -1);
  EXPECT_EQ(transposed_dim(coalesce_copy_layout({4, 6}, {2, 8}, {6, 1})), -1);
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
