// kernels/cpu/split_over_k.h — how the packed GEMMs split a product over its K blocks between the
// threads: the schedule the float32 (gemm_avx512.cpp), AVX512_BF16 (gemm_bf16.cpp) and AMX
// (gemm_bf16_amx.cpp) kernels share.
//
// A weight gradient dW = dy^T x has a small C (a layer's outputs by its inputs) summed over many
// K blocks (the batch's thousands of rows). Split by C's rows or columns, every thread reads all
// of dy, or meets the others twice per K block for a few microseconds of products. Split over
// K instead, each thread takes one run of K blocks:
//   run 0 adds its blocks into C as the one-thread loop over K blocks would (the first with
//     alpha, beta and the bias, the others added);
//   each later block goes into a partial product of its own (the micro-kernel's sums, stored
//     as they are), and its row sums, from zero, into partial sums;
// then, in parallel over C's rows, the partials are added to C in K order with the operations
// the loop's stores apply to a further block (C = alpha * partial + C; rounded with the last), and
// the partial sums to the row sums in K order. So C and the row sums get the loop's bits whatever
// the thread count. Each kernel brings its own block product and its own addition.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "minidl/kernels/cpu/aligned_buffer.h"
#include "minidl/kernels/cpu/parallel.h"

namespace minidl::kernels::cpu {

// Whether a product of M x N over k_blocks K blocks is split over them: more than one thread
// (on one, the partials only add memory traffic), at least 4 blocks, M and N within the kernel's
// bounds, and a partial product (whole rows of n_padded floats) per block within max_bytes (the
// split stores those of the later blocks only).
inline bool split_over_k_pays(int64_t M, int64_t n_padded, int64_t k_blocks, int64_t max_m, int64_t max_n,
                              int64_t max_bytes) {
  return get_num_threads() > 1 && k_blocks >= 4 && M <= max_m && n_padded <= max_n &&
         k_blocks * M * n_padded * static_cast<int64_t>(sizeof(float)) <= max_bytes;
}

// The schedule and the partials' storage of one product split over its K blocks. Each later
// block r (block first_run + r) has a partial product of `rows` rows of `row_floats` floats
// (64-byte aligned; reused from call to call by the calling thread) and, when the product sums
// op(A)'s rows, `sum_rows` partial row sums (doubles, zero).
class SplitOverK {
 public:
  const int64_t blocks;  // the product's K blocks
  const int64_t runs;  // one per thread
  const int64_t first_run;  // the blocks of run 0, which go into C

  SplitOverK(int64_t k_blocks, int64_t rows, int64_t row_floats, int64_t sum_rows)
      : blocks(k_blocks),
        runs(std::min<int64_t>(get_num_threads(), k_blocks)),
        first_run(k_blocks / runs),
        rows_(rows),
        row_floats_(row_floats),
        sum_rows_(sum_rows),
        partial_(partial_buffer().get(static_cast<size_t>(partials() * rows * row_floats))),
        sums_(static_cast<size_t>(partials() * sum_rows), 0.0) {}

  int64_t partials() const { return blocks - first_run; }  // the later blocks
  float* partial(int64_t r) const { return partial_ + r * partial_step(); }
  int64_t partial_step() const { return rows_ * row_floats_; }  // floats from one partial to the next
  double* partial_sums(int64_t r) { return sum_rows_ > 0 ? sums_.data() + r * sum_rows_ : nullptr; }

  // run(t, q0, q1) for every run t in parallel (its blocks q0..q1-1; run 0: q0 = 0, into C), then
  // add_row(i, partial_row) for every row i of C in parallel: partial_row, the row's values in the
  // first partial (the next partials' a partial apart), to be added to C in K order.
  template <class Run, class AddRow> void operator()(Run&& run, AddRow&& add_row) const {
    parallel_for(runs, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) run(t, t * blocks / runs, (t + 1) * blocks / runs);
    });
    parallel_for(rows_, std::max<int64_t>(1, 4096 / std::max<int64_t>(row_floats_ * partials(), 1)),
                 [&](int64_t i0, int64_t i1) {
                   for (int64_t i = i0; i < i1; ++i) add_row(i, partial_ + i * row_floats_);
                 });
  }

  // row_sums[i] += the partial row sums of row i, in K order
  void add_row_sums(int64_t i, double* row_sums) const {
    for (int64_t r = 0; r < partials(); ++r) row_sums[i] += sums_[static_cast<size_t>(r * sum_rows_ + i)];
  }

 private:
  static AlignedBuffer<float>& partial_buffer() {
    thread_local AlignedBuffer<float> buffer;  // every value add_row reads is written first
    return buffer;
  }
  int64_t rows_, row_floats_, sum_rows_;
  float* partial_;
  std::vector<double> sums_;
};

}  // namespace minidl::kernels::cpu
