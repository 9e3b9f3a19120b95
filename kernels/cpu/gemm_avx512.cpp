// kernels/cpu/gemm_avx512.cpp — the packed AVX-512 float GEMM (gemm_avx512 in gemm.h), compiled
// for AVX-512 whatever the build's -march and used only when the CPU has AVX-512F (checked once at
// run time). The classic GotoBLAS/BLIS structure:
//
//   for each block of up to kNc columns of C (jc):
//     for each block of K (pc, sizes fixed by K alone):
//       pack op(B) (kc, nc) into panels of kNr = 32 columns, each stored k-major (kc, 32)
//       in parallel over blocks of rows of C (mc rows each):
//         pack op(A) (mc, kc) into panels of kMr = 8 rows, each stored k-major (kc, 8) — except
//           full 8-row panels of an untransposed A, and of a transposed A with short rows, which
//           the micro-kernel reads in place
//         for each B panel, for each A panel: the 8x32 micro-kernel
//
// Products with several K blocks and at most kColumnSplitMaxM rows (the weight gradients) split
// C's column panels between the threads instead: each packs its own B panels and runs all K
// blocks of its columns alone. With at least 4 K blocks whose partial products fit in kSplitBytes,
// they split the K blocks instead (kernels/cpu/split_over_k.h): one run of blocks each, the first
// into C, the others into partial products that are then added to C in K order.
//
// The micro-kernel keeps an 8x32 block of C in 16 vector registers and, for k = 0..kc-1 in order,
// adds A(i, k) * B(k, j) with one FMA per 16 elements; panels past the edges of A and B are
// zero-padded when packed, and the stores are masked (a panel with at most 16 columns left uses the
// 8x16 variant). When op(A) and C outgrow L2, each micro-kernel also prefetches the next tile's C
// rows and, for a row-major A read in place, its A rows (software prefetch: the hardware's does not
// follow 8 rows a row's length apart); for a transposed A read in place, the row kAheadA k ahead
// (its rows lie up to 1 KB apart, so a 4 KB page holds few of them and the hardware's prefetch
// starts again at each page: the mixer's and the vit's float32 steps ran 5-8% faster). C = alpha *
// (the first K block) + beta * C, then C += alpha * (each further K block); a bias (one value per
// column of C, gemm_bias) is added where the first K block is written. The row sums of a transposed
// A (gemm_row_sums) are added up by the micro-kernel of C's first columns from the values it
// broadcasts, in double, each K block's from zero in k order, the blocks' added in K order. So
// every element of C is summed in the same order whatever the thread count, and whatever the split
// (rows, columns and runs of K blocks are only units of work): bit-identical for any thread count.
// Tested against Eigen's path and gemm_reference by tests/kernels/test_cpu_gemm.cpp; GFLOP/s
// against Eigen (and gemm() against gemm_reference): examples/bench_gemm.cpp.
// GCC 12 reports false "maybe-uninitialized" warnings inside its own AVX-512 headers.
// Written in __m512 intrinsics, not vec_math.h's lane types: its functions carry their own
// target("avx512f,avx2,fma") attributes so that one binary runs on any x86-64 (the run-time check picks
// it), and vec_math.h's inline helpers are compiled for the build's -march, which may lack
// AVX-512; the packing and the micro-kernel's edges also use masked loads and stores.
#include <algorithm>
#include <cstring>
#include <vector>

#include "minidl/kernels/cpu/aligned_buffer.h"
#include "minidl/kernels/cpu/cpu_features.h"
#include "minidl/kernels/cpu/gemm.h"
#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/cpu/split_over_k.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace minidl::kernels::cpu {

#if defined(__x86_64__) && defined(__GNUC__)
namespace {

#define MINIDL_AVX512 __attribute__((target("avx512f,avx2,fma")))

constexpr int64_t kMr = 8, kNr = 32;  // micro-kernel tile of C
constexpr int64_t kKcMax = 256;  // K blocks: the A block (mc, kc) stays in L2, a B panel (kc, 32) in L1
constexpr int64_t kNc = 4096;  // columns of C per packed B block (bounds the B buffer to 8 MB)
constexpr int64_t kMcMax = 128;  // rows of C per unit of parallel work (bounds the A buffer to 256 KB)
constexpr int64_t kPrefetchBytes = 1 << 20;  // op(A) and C together larger than this: prefetch
constexpr int64_t kColumnSplitMaxM = 256;  // at most this many rows of C: threads split columns (K blocks > 1)
constexpr int64_t kSplitBytes = int64_t(4) << 20;  // the partial products of a split over K at most
// A transposed A is read in place rather than packed when its rows are at most this many floats
// apart (1 KB): a panel's kc rows then touch few pages, and packing would copy all of A once for
// products that use each of its values only N times (the weight gradients dW = dy^T x, whose K
// is the batch's 6400 rows and N a layer's 64-128 inputs).
constexpr int64_t kInPlaceStrideMax = 256;
constexpr int64_t kAheadA = 16;  // rows of a transposed A read in place prefetched ahead

// dst[c * ldd + r] = src[r * lds + c] for r, c < 8
MINIDL_AVX512 inline void transpose8x8(const float* src, int64_t lds, float* dst, int64_t ldd) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * lds);
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // t0 = a0 b0 a1 b1 | a4 b4 a5 b5, t1 = a2 b2 a3 b3 | a6 b6 a7 b7 (rows a, b); t2, t3 rows c, d; ...
  for (int i = 0; i < 2; ++i) {
    r[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  // r0 = columns 0 (rows 0-3) | 4, r1 = 1 | 5, r2 = 2 | 6, r3 = 3 | 7; r4..r7 the same for rows 4-7
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * ldd, _mm256_permute2f128_ps(r[i], r[4 + i], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * ldd, _mm256_permute2f128_ps(r[i], r[4 + i], 0x31));
  }
}

inline __mmask16 first_n(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : static_cast<__mmask16>((1u << n) - 1);
}

// One A panel: dst (kc, 8) = op(A) rows i0..i0+mr-1, columns k0..k0+kc-1, rows past mr zero.
// op(A)(i, k) = A[i * lda + k], or A[k * lda + i] when trans_a.
MINIDL_AVX512 void pack_a_panel(const float* A, int64_t lda, bool trans_a, int64_t i0, int64_t mr, int64_t k0,
                                int64_t kc, float* dst) {
  if (trans_a) {  // each k: mr contiguous values
    const __mmask16 m = first_n(mr);
    for (int64_t k = 0; k < kc; ++k) {
      const __m512 v = _mm512_maskz_loadu_ps(m, A + (k0 + k) * lda + i0);
      _mm256_storeu_ps(dst + k * kMr, _mm512_castps512_ps256(v));
    }
    return;
  }
  int64_t k = 0;
  if (mr == kMr)
    for (; k + 8 <= kc; k += 8) transpose8x8(A + i0 * lda + k0 + k, lda, dst + k * kMr, kMr);
  for (; k < kc; ++k)
    for (int64_t r = 0; r < kMr; ++r) dst[k * kMr + r] = r < mr ? A[(i0 + r) * lda + k0 + k] : 0.0f;
}

// One B panel: dst (kc, 32) = op(B) rows k0..k0+kc-1, columns j0..j0+nr-1, columns past nr zero.
// op(B)(k, j) = B[k * ldb + j], or B[j * ldb + k] when trans_b.
MINIDL_AVX512 void pack_b_panel(const float* B, int64_t ldb, bool trans_b, int64_t j0, int64_t nr, int64_t k0,
                                int64_t kc, float* dst) {
  if (!trans_b) {  // each k: nr contiguous values
    const __mmask16 m0 = first_n(nr), m1 = first_n(nr - 16);
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = B + (k0 + k) * ldb + j0;
      _mm512_storeu_ps(dst + k * kNr, _mm512_maskz_loadu_ps(m0, src));
      _mm512_storeu_ps(dst + k * kNr + 16, _mm512_maskz_loadu_ps(m1, src + 16));
    }
    return;
  }
  for (int64_t jj = 0; jj < kNr; jj += 8) {  // 8 columns of op(B) = 8 rows of B at a time
    int64_t k = 0;
    if (jj + 8 <= nr)
      for (; k + 8 <= kc; k += 8) transpose8x8(B + (j0 + jj) * ldb + k0 + k, ldb, dst + k * kNr + jj, kNr);
    for (; k < kc; ++k)
      for (int64_t j = jj; j < jj + 8; ++j) dst[k * kNr + j] = j < nr ? B[(j0 + j) * ldb + k0 + k] : 0.0f;
  }
}

// C (mr <= 8, nr <= 16 * NV) = alpha * op(A) (8 rows, kc) · op(B) (kc, 32) [+ beta * C + bias on
// the first K block, or + C on the others]; bias: this tile's nr column values, or null. NV = 1
// reads only the first 16 columns of each B row. op(A)(r, k) is read at
//   a[r * a_step + k]   when kRowsA: 8 full rows of a row-major A read in place (a_step = lda;
//                       packing them would only transpose what the broadcasts read as well there)
//   a[k * a_step + r]   otherwise: a packed panel (a_step = 8), or 8 full columns of a transposed A
//                       read in place (a_step = lda: its 8 values for one k are contiguous already)
// and op(B)(k, 0..31) at b + k * 32 (a packed panel).
// kRowSums (k-major A only): also the sums of op(A)(r, k) over the block's k, in order, in double,
// from the values the broadcasts read, from zero; sums (8 doubles) gets them on the first K block,
// and has them added on the others (so a product split over its K blocks, whose blocks' sums are
// added in K order afterwards, gets the same bits).
template <int NV, bool kRowsA, bool kRowSums = false>
MINIDL_AVX512 void micro_kernel(int64_t kc, const float* a, int64_t a_step, const float* b, float* c, int64_t ldc,
                                int64_t mr, int64_t nr, bool first, bool prefetch, float alpha, float beta,
                                const float* bias, double* sums = nullptr) {
  static_assert(!(kRowSums && kRowsA), "row sums are read from a k-major A");
  __m512 acc[kMr][NV];
  for (int r = 0; r < kMr; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  __m512d row_sums = _mm512_setzero_pd();
  // prefetch: the next tile down (8 rows on): its C rows, and its A rows when read in place,
  // requested while this one computes; from DRAM, a first touch otherwise stalls the FMAs.
  if (prefetch)
    for (int r = 0; r < kMr; ++r) {
      __builtin_prefetch(c + (kMr + r) * ldc, 1, 3);
      if (NV == 2) __builtin_prefetch(c + (kMr + r) * ldc + 16, 1, 3);
    }
  for (int64_t k = 0; k < kc; ++k) {
    if constexpr (kRowsA) {
      if (prefetch && k % 16 == 0)  // a line of each of the next tile's 8 rows every 16 k
        for (int r = 0; r < kMr; ++r) __builtin_prefetch(a + (kMr + r) * a_step + k, 0, 3);
    } else if (prefetch && a_step != kMr) {  // a transposed A in place: its row kAheadA on
      __builtin_prefetch(a + (k + kAheadA) * a_step, 0, 3);
    }
    __m512 bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_load_ps(b + k * kNr + 16 * v);
    if constexpr (kRowSums) row_sums = _mm512_add_pd(row_sums, _mm512_cvtps_pd(_mm256_loadu_ps(a + k * a_step)));
    for (int r = 0; r < kMr; ++r) {
      const __m512 ar = _mm512_set1_ps(kRowsA ? a[r * a_step + k] : a[k * a_step + r]);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(ar, bv[v], acc[r][v]);
    }
  }
  if constexpr (kRowSums) _mm512_storeu_pd(sums, first ? row_sums : _mm512_add_pd(_mm512_loadu_pd(sums), row_sums));
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  __mmask16 mask[NV];
  for (int v = 0; v < NV; ++v) mask[v] = first_n(nr - 16 * v);
  __m512 bias_v[NV];
  for (int v = 0; v < NV; ++v)
    bias_v[v] = first && bias ? _mm512_maskz_loadu_ps(mask[v], bias + 16 * v) : _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int r = 0; r < kMr; ++r) {
    if (r >= mr) break;
    float* cr = c + r * ldc;
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      __m512 out;
      if (first && beta == 0.0f) {  // C is write-only: its old contents (even NaN) are not read
        out = _mm512_fmadd_ps(va, acc[r][v], bias_v[v]);
      } else {
        const __m512 old = _mm512_maskz_loadu_ps(mask[v], cr + 16 * v);
        out = _mm512_fmadd_ps(va, acc[r][v], first ? _mm512_fmadd_ps(vb, old, bias_v[v]) : old);
      }
      _mm512_mask_storeu_ps(cr + 16 * v, mask[v], out);
    }
  }
}

// One row of C (N values) plus `count` partial rows (`step` floats apart, 64-byte aligned, whole
// 16-column vectors), added in K order as the micro-kernel's stores add further K blocks:
// C = alpha * partial + C, one after another.
MINIDL_AVX512 void add_partials(const float* partial, int64_t step, int64_t count, int64_t N, float* c, float alpha) {
  const __m512 va = _mm512_set1_ps(alpha);
  for (int64_t j = 0; j < N; j += 16) {
    const __mmask16 m = first_n(N - j);
    __m512 out = _mm512_maskz_loadu_ps(m, c + j);
    for (int64_t q = 0; q < count; ++q) out = _mm512_fmadd_ps(va, _mm512_load_ps(partial + q * step + j), out);
    _mm512_mask_storeu_ps(c + j, m, out);
  }
}

// Where one unit of packed_gemm's work stores its products: C (rows ldc floats apart), the
// epilogue's alpha, beta and bias (or null), and the row sums (or null), all indexed as C's rows
// and columns.
struct Out {
  float* c;
  int64_t ldc;
  float alpha, beta;
  const float* bias;
  double* sums;
};

// row_sums: null, or (M rounded up to 8) doubles that get the row sums of op(A) (trans_a only).
MINIDL_AVX512 void packed_gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool trans_a,
                               const float* B, int64_t ldb, bool trans_b, float* C, int64_t ldc, float alpha,
                               float beta, const float* bias, double* row_sums) {
  // K blocks of equal size (the last may be shorter), chosen from K alone.
  const int64_t k_blocks = (K + kKcMax - 1) / kKcMax;
  const int64_t kc_step = ((K + k_blocks - 1) / k_blocks + 7) / 8 * 8;
  // Rows of C per unit of work: a multiple of 8, at most kMcMax, about 4 units when M is small.
  const int64_t mc = std::clamp<int64_t>(((M + 3) / 4 + kMr - 1) / kMr * kMr, kMr, kMcMax);
  const int64_t m_blocks = (M + mc - 1) / mc;
  // Prefetch ahead in the micro-kernel only when op(A) and C outgrow L2: for operands already in
  // cache the extra instructions cost a few percent.
  const bool prefetch = (M * K + M * N) * static_cast<int64_t>(sizeof(float)) > kPrefetchBytes;
  // One unit of work: rows i0.. of C (one block of mc) times the K block pc.. (kc long) of op(B),
  // packed at bp (panels of kNr columns, kc rows each), stored to `out` (the K block's first:
  // first); ap: this thread's A packing buffer.
  auto block = [&](int64_t blk, int64_t jc, int64_t nc, int64_t pc, int64_t kc, const float* bp, float* ap,
                   const Out& out, bool first) {
    const int64_t n_panels = (nc + kNr - 1) / kNr;
    const int64_t i0 = blk * mc, m = std::min(mc, M - i0), m_panels = (m + kMr - 1) / kMr;
    // A read in place: full 8-row panels of a row-major A, and of a transposed A whose
    // rows (op(A)'s columns) lie close together; the others packed (zero-padded)
    auto direct_a = [&](int64_t q) { return q * kMr + kMr <= m && (!trans_a || lda <= kInPlaceStrideMax); };
    for (int64_t q = 0; q < m_panels; ++q)
      if (!direct_a(q))
        pack_a_panel(A, lda, trans_a, i0 + q * kMr, std::min(kMr, m - q * kMr), pc, kc, ap + q * kMr * kc);
    for (int64_t p = 0; p < n_panels; ++p) {
      const int64_t j = jc + p * kNr, nr = std::min(kNr, nc - p * kNr);
      const float* bpanel = bp + p * kNr * kc;
      for (int64_t q = 0; q < m_panels; ++q) {
        const int64_t i = i0 + q * kMr, mr = std::min(kMr, m - q * kMr);
        float* c = out.c + i * out.ldc + j;
        const float* bj = out.bias ? out.bias + j : nullptr;
        const int64_t ldc = out.ldc;
        const float alpha = out.alpha, beta = out.beta;
        if (direct_a(q) && !trans_a) {
          const float* a = A + i * lda + pc;
          if (nr > 16)
            micro_kernel<2, true>(kc, a, lda, bpanel, c, ldc, mr, nr, first, prefetch, alpha, beta, bj);
          else
            micro_kernel<1, true>(kc, a, lda, bpanel, c, ldc, mr, nr, first, prefetch, alpha, beta, bj);
        } else {
          const bool in_place = direct_a(q);  // transposed A: column i of row pc onwards
          const float* a = in_place ? A + pc * lda + i : ap + q * kMr * kc;
          const int64_t a_step = in_place ? lda : kMr;
          if (out.sums && j == 0 && nr > 16)  // the row sums ride along with C's first columns
            micro_kernel<2, false, true>(kc, a, a_step, bpanel, c, ldc, mr, nr, first, prefetch, alpha, beta, bj,
                                         out.sums + i);
          else if (out.sums && j == 0)
            micro_kernel<1, false, true>(kc, a, a_step, bpanel, c, ldc, mr, nr, first, prefetch, alpha, beta, bj,
                                         out.sums + i);
          else if (nr > 16)
            micro_kernel<2, false>(kc, a, a_step, bpanel, c, ldc, mr, nr, first, prefetch, alpha, beta, bj);
          else
            micro_kernel<1, false>(kc, a, a_step, bpanel, c, ldc, mr, nr, first, prefetch, alpha, beta, bj);
        }
      }
    }
  };
  const Out to_c{C, ldc, alpha, beta, bias, row_sums};
  const int64_t n_panels_all = (N + kNr - 1) / kNr, n_padded = n_panels_all * kNr;
  if (split_over_k_pays(M, n_padded, k_blocks, kColumnSplitMaxM, kNc, kSplitBytes)) {
    // split over the K blocks (kernels/cpu/split_over_k.h; split by columns below, each thread
    // would read all of op(A) and half of op(B) per K block; split over K, half of each): the
    // later blocks' partials with alpha 1 and no bias (the micro-kernel's sums as they are)
    SplitOverK split(k_blocks, M, n_padded, row_sums ? (M + kMr - 1) / kMr * kMr : 0);
    split(
        [&](int64_t t, int64_t q0, int64_t q1) {
          thread_local AlignedBuffer<float> own_b, own_a;
          float* bp = own_b.get(static_cast<size_t>(n_padded * kc_step));
          float* ap = own_a.get(static_cast<size_t>(mc * kc_step));
          for (int64_t q = q0; q < q1; ++q) {
            const int64_t pc = q * kc_step, kc = std::min(kc_step, K - pc), r = q - split.first_run;
            for (int64_t p = 0; p < n_panels_all; ++p)
              pack_b_panel(B, ldb, trans_b, p * kNr, std::min(kNr, N - p * kNr), pc, kc, bp + p * kNr * kc);
            const Out out = t == 0 ? to_c : Out{split.partial(r), n_padded, 1.0f, 0.0f, nullptr, split.partial_sums(r)};
            for (int64_t blk = 0; blk < m_blocks; ++blk) block(blk, 0, N, pc, kc, bp, ap, out, t != 0 || q == 0);
          }
        },
        [&](int64_t i, const float* partial_row) {
          add_partials(partial_row, split.partial_step(), split.partials(), N, C + i * ldc, alpha);
          if (row_sums) split.add_row_sums(i, row_sums);
        });
    return;
  }
  if (k_blocks > 1 && M <= kColumnSplitMaxM && N <= kNc) {
    // Several K blocks and few rows of C (the weight gradients dW = dy^T x: M, N = 64-192, K =
    // 6400): the threads split C's column panels instead of its rows, each packing the B panels
    // only it reads and running all K blocks without meeting the others. Split by rows, every
    // thread would read every B panel, half of them just written by the other core (a transfer
    // between the cores' caches for each line), and meet it twice per K block.
    const int64_t parts = std::min<int64_t>(get_num_threads(), n_panels_all);  // one run of panels a thread
    parallel_for(parts, 1, [&](int64_t t, int64_t) {
      const int64_t p0 = t * n_panels_all / parts, p1 = (t + 1) * n_panels_all / parts;
      thread_local AlignedBuffer<float> own_b, own_a;
      float* bp = own_b.get(static_cast<size_t>((p1 - p0) * kNr * kc_step));
      float* ap = own_a.get(static_cast<size_t>(mc * kc_step));
      const int64_t j0 = p0 * kNr, nc = std::min(N, p1 * kNr) - j0;
      for (int64_t pc = 0; pc < K; pc += kc_step) {  // K blocks in order for every element of C
        const int64_t kc = std::min(kc_step, K - pc);
        for (int64_t p = p0; p < p1; ++p)
          pack_b_panel(B, ldb, trans_b, p * kNr, std::min(kNr, N - p * kNr), pc, kc, bp + (p - p0) * kNr * kc);
        for (int64_t blk = 0; blk < m_blocks; ++blk) block(blk, j0, nc, pc, kc, bp, ap, to_c, pc == 0);
      }
    });
    return;
  }
  thread_local AlignedBuffer<float> b_buffer;
  for (int64_t jc = 0; jc < N; jc += kNc) {
    const int64_t nc = std::min(kNc, N - jc), n_panels = (nc + kNr - 1) / kNr;
    for (int64_t pc = 0; pc < K; pc += kc_step) {
      const int64_t kc = std::min(kc_step, K - pc);
      float* bp = b_buffer.get(static_cast<size_t>(n_panels * kNr * kc));
      parallel_for(n_panels, std::max<int64_t>(1, 8192 / (kNr * kc)), [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p)
          pack_b_panel(B, ldb, trans_b, jc + p * kNr, std::min(kNr, nc - p * kNr), pc, kc, bp + p * kNr * kc);
      });
      parallel_for(m_blocks, 1, [&](int64_t b0, int64_t b1) {
        thread_local AlignedBuffer<float> a_buffer;
        float* ap = a_buffer.get(static_cast<size_t>(mc * kc));
        for (int64_t blk = b0; blk < b1; ++blk) block(blk, jc, nc, pc, kc, bp, ap, to_c, pc == 0);
      });
    }
  }
}

}  // namespace

bool gemm_avx512(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool trans_a, const float* B,
                 int64_t ldb, bool trans_b, float* C, int64_t ldc, float alpha, float beta, const float* bias,
                 float* row_sums) {
  if (!cpu_has_avx512f()) return false;
  if (row_sums && (!trans_a || M <= 0 || N <= 0 || K <= 0 || alpha == 0.0f)) return false;
  if (M <= 0 || N <= 0) return true;
  if (K <= 0 || alpha == 0.0f) {  // C = beta * C + bias (beta == 0: overwrite, ignoring NaNs already there)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j)
        C[i * ldc + j] = (beta == 0.0f ? 0.0f : beta * C[i * ldc + j]) + (bias ? bias[j] : 0.0f);
    return true;
  }
  if (!row_sums) {
    packed_gemm(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, alpha, beta, bias, nullptr);
    return true;
  }
  std::vector<double> sums(static_cast<size_t>((M + kMr - 1) / kMr * kMr));  // whole 8-row panels
  packed_gemm(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, alpha, beta, bias, sums.data());
  for (int64_t i = 0; i < M; ++i) row_sums[i] = static_cast<float>(sums[static_cast<size_t>(i)]);
  return true;
}
#else
bool gemm_avx512(int64_t, int64_t, int64_t, const float*, int64_t, bool, const float*, int64_t, bool, float*, int64_t,
                 float, float, const float*, float*) {
  return false;
}
#endif

}  // namespace minidl::kernels::cpu
