// kernels/cpu/gemm_bf16.cpp — bfloat16 x bfloat16 -> float32 GEMM (gemm_bf16.h): the packed
// AVX512_BF16 kernel, compiled for that extension whatever the build's -march and used only when
// the CPU has it (checked once at run time), and the plain reference loop.
//
// The packed kernel has the structure of the float32 one (gemm_avx512.cpp):
//
//   for each block of up to kNc columns of C (jc):
//     for each block of K (pc, sizes fixed by K alone):
//       pack op(B) (kc, nc) into panels of kNr = 32 columns, each (kc / 2, 32) k pairs
//       in parallel over blocks of rows of C (mc rows each):
//         pack op(A) (mc, kc) into panels of kMr = 14 rows, each (kc / 2, 14) k pairs
//         for each B panel, for each A panel: the 14x32 micro-kernel
//
// (rows whose k pairs lie contiguous in memory, op(A)'s when A is not transposed and op(B)'s
// columns when B is, are packed 16 pairs of 16 rows at a time by a transpose of 32-bit words).
// What it does differently from the reference, and why it is faster:
//   - Operands are packed as k pairs: one 32-bit word holds (x[k], x[k + 1]) of a row of op(A) or
//     a column of op(B) (an odd K gets a zero for its last k + 1). vdpbf16ps multiplies the 16
//     words of a B row pair by one broadcast A word and adds both products into each float lane:
//     32 multiply-adds per instruction where the float32 kernel's FMA does 16, and half the bytes
//     of operand traffic per product.
//   - The 14x32 tile of C stays in 28 of the 32 vector registers over a K block (kc <= 512), so a
//     B panel (32 KB) stays in L1 and an A block in L2; the float32 sums are added into C once per
//     K block (the first: C = alpha * sum + beta * C; the others: C += alpha * sum).
// So its sums are not the reference's: within a K block each lane adds its products two at a time
// (Intel's manual: the k + 1 product first, then the k one), and each K block is a separate partial
// sum; the instruction also treats subnormal inputs and results as zero. Both stay within a few units in the
// last place of float32 times K of the exact sum (tests/kernels/test_cpu_gemm_bf16.cpp); with small
// integer operands, whose sums are exact, the two agree bit for bit.
// With two or more threads a small C over many K blocks (a weight gradient) is split over its K
// blocks instead: one run of blocks per thread, the first into C, the others into partial
// products then added to C in K order (kernels/cpu/split_over_k.h). Every element of C is summed
// in the same order whatever the thread count and the split: bit-identical for any thread count.
// GFLOP/s against the float32 kernel: `bench_gemm bf16` (examples/bench_gemm.cpp).
// GCC 12 reports false "maybe-uninitialized" warnings inside its own AVX-512 headers.
// Written in intrinsics, not vec_math.h's lane types: its functions carry their own
// target("avx512bf16") attributes for the run-time dispatch, and vdpbf16ps (two bf16 products per
// float lane) has no vector-type spelling.
#include "minidl/kernels/cpu/gemm_bf16.h"

#include <algorithm>

#include "minidl/kernels/cpu/aligned_buffer.h"
#include "minidl/kernels/cpu/cpu_features.h"
#include "minidl/kernels/cpu/gemm_bf16_pack.h"
#include "minidl/kernels/cpu/half.h"
#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/cpu/split_over_k.h"

namespace minidl::kernels::cpu {

void gemm_bf16_reference(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool trans_a,
                         const uint16_t* B, int64_t ldb, bool trans_b, float* C, int64_t ldc, float alpha, float beta,
                         bool round_bf16) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float sum = 0.0f;
      for (int64_t k = 0; k < K; ++k)
        sum += bf16_to_float(trans_a ? A[k * lda + i] : A[i * lda + k]) *
               bf16_to_float(trans_b ? B[j * ldb + k] : B[k * ldb + j]);
      float& c = C[i * ldc + j];
      c = beta == 0.0f ? alpha * sum : alpha * sum + beta * c;
      if (round_bf16) c = bf16_to_float(float_to_bf16(c));
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
namespace {

using namespace bf16_pack;

constexpr int64_t kMr = 14, kNr = kPanelCols;  // micro-kernel tile of C: 14 x 2 accumulators of 16 floats
constexpr int64_t kKcMax = 512;  // K blocks: a B panel (256 pairs x 32 columns, 32 KB) stays in L1
constexpr int64_t kNc = 4096;  // columns of C per packed B block (bounds the B buffer to 4 MB)
constexpr int64_t kMcMax = 9 * kMr;  // rows of C per unit of parallel work (an A block of 126 KB)
constexpr int64_t kSplitMaxM = 256;  // a product split over its K blocks: at most this many rows of C
constexpr int64_t kSplitBytes = int64_t(4) << 20;  // and partial products of at most this many bytes

// One A panel: dst (kp = ceil(kc / 2), 14) = the pairs of op(A) rows i0..i0+mr-1, columns
// k0..k0+kc-1; rows past mr zero. op(A)(i, k) = A[i * lda + k], or A[k * lda + i] when trans_a.
// sums (trans_a only; or null): the mr rows' sums so far, to which the sums of their kc values
// (from zero, in k order) are added (so a product split over its K blocks, whose blocks' sums are
// added in K order afterwards, gets the same bits).
MINIDL_BF16_TARGET void pack_a_panel(const uint16_t* A, int64_t lda, bool trans_a, int64_t i0, int64_t mr, int64_t k0,
                                     int64_t kc, uint32_t* dst, double* sums = nullptr) {
  const int64_t kp = (kc + 1) / 2;
  if (trans_a) {  // each k: mr contiguous values
    PairSums row_sums{_mm512_setzero_pd(), _mm512_setzero_pd()};  // this K block's, from zero
    for (int64_t p = 0; p < kp; ++p) {
      const uint16_t* row = A + (k0 + 2 * p) * lda + i0;
      const __m512i pairs = pair_rows(row, 2 * p + 1 < kc ? row + lda : nullptr, mr);
      if (sums) add_pairs(row_sums, pairs);
      _mm512_mask_storeu_epi32(dst + p * kMr, first_n(kMr), pairs);
    }
    if (sums) add_pair_sums(row_sums, sums, mr);
    return;
  }
  pack_pair_rows(A + i0 * lda + k0, lda, mr, kc, dst, kMr, kMr);  // each row's pairs are contiguous
}

// C (mr <= 14, nr <= 16 * NV) = alpha * op(A) (14 rows, kp pairs) · op(B) (kp pairs, 32) [+ beta *
// C on the first K block, or + C on the others], from a packed A panel a (kp, 14) and B panel b
// (kp, 32); NV = 1 reads only the first 16 columns of each B row. With bias (the panel's 32
// values), the first K block's sums start from it; with round, C is stored rounded to bfloat16.
template <int NV>
MINIDL_BF16_TARGET void micro_kernel(int64_t kp, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc,
                                     int64_t mr, int64_t nr, bool first, float alpha, float beta, const float* bias,
                                     bool round) {
  __m512 acc[kMr][NV];
  for (int r = 0; r < kMr; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = first && bias ? _mm512_loadu_ps(bias + 16 * v) : _mm512_setzero_ps();
  for (int64_t p = 0; p < kp; ++p) {
    __m512bh bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_load_si512(b + p * kNr + 16 * v);
    for (int r = 0; r < kMr; ++r) {
      const __m512bh ar = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[p * kMr + r]));
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], ar, bv[v]);
    }
  }
  __mmask16 mask[NV];
  for (int v = 0; v < NV; ++v) mask[v] = first_n(nr - 16 * v);
  for (int r = 0; r < kMr && r < mr; ++r)
    for (int v = 0; v < NV; ++v) add_into_c(acc[r][v], c + r * ldc + 16 * v, mask[v], first, alpha, beta, round);
}

// Where products() stores: C (rows ldc floats apart), the epilogue's alpha and beta, the bias
// (padded to whole panels, or null; read on the first K block), rounding (on the last K block)
// and the row sums (or null), all indexed as C's rows and columns.
struct Out {
  float* c;
  int64_t ldc;
  float alpha, beta;
  const float* bias;
  bool round;
  double* sums;
};

// Rows i0..i0+m-1 of C, columns jc..jc+nc-1 (n_panels B panels packed at bp, kp pairs each), times
// the K block pc.. (kc long): op(A)'s panels packed into ap, then the micro-kernel per tile.
MINIDL_BF16_TARGET void products(const uint16_t* A, int64_t lda, bool trans_a, int64_t i0, int64_t m, int64_t jc,
                                 int64_t nc, int64_t pc, int64_t kc, const uint32_t* bp, uint32_t* ap, const Out& out,
                                 bool first, bool last) {
  const int64_t kp = (kc + 1) / 2, n_panels = (nc + kNr - 1) / kNr, m_panels = (m + kMr - 1) / kMr;
  for (int64_t q = 0; q < m_panels; ++q)
    pack_a_panel(A, lda, trans_a, i0 + q * kMr, std::min(kMr, m - q * kMr), pc, kc, ap + q * kMr * kp,
                 out.sums && jc == 0 ? out.sums + i0 + q * kMr : nullptr);
  for (int64_t p = 0; p < n_panels; ++p) {
    const int64_t j = jc + p * kNr, nr = std::min(kNr, nc - p * kNr);
    for (int64_t q = 0; q < m_panels; ++q) {
      const int64_t i = i0 + q * kMr, mr = std::min(kMr, m - q * kMr);
      const uint32_t *a = ap + q * kMr * kp, *b = bp + p * kNr * kp;
      float* c = out.c + i * out.ldc + j;
      const float* bias_j = out.bias ? out.bias + j : nullptr;
      const bool round_here = out.round && last;
      if (nr > 16)
        micro_kernel<2>(kp, a, b, c, out.ldc, mr, nr, first, out.alpha, out.beta, bias_j, round_here);
      else
        micro_kernel<1>(kp, a, b, c, out.ldc, mr, nr, first, out.alpha, out.beta, bias_j, round_here);
    }
  }
}

// row_sums: null, or M doubles (zero) that get the row sums of op(A) (trans_a only), added up
// while the first block of columns packs A.
void packed_gemm(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool trans_a, const uint16_t* B,
                 int64_t ldb, bool trans_b, float* C, int64_t ldc, float alpha, float beta, const float* bias,
                 bool round, double* row_sums = nullptr) {
  const std::vector<float> bias_cols = padded_bias(bias, N, (N + kNr - 1) / kNr * kNr);
  const Out to_c{C, ldc, alpha, beta, bias ? bias_cols.data() : nullptr, round, row_sums};
  // K blocks of equal size (the last may be shorter, and odd), chosen from K alone.
  const int64_t k_blocks = (K + kKcMax - 1) / kKcMax;
  const int64_t kc_step = ((K + k_blocks - 1) / k_blocks + 7) / 8 * 8, kp_step = (kc_step + 1) / 2;
  const int64_t n_panels_all = (N + kNr - 1) / kNr, n_padded = n_panels_all * kNr;
  if (split_over_k_pays(M, n_padded, k_blocks, kSplitMaxM, kNc, kSplitBytes)) {
    // split over the K blocks (kernels/cpu/split_over_k.h; split by rows, the threads would meet
    // twice per K block for a few microseconds of products): the later blocks' partials with
    // alpha 1 (the micro-kernel's sums as they are)
    const int64_t m14 = (M + kMr - 1) / kMr * kMr;
    SplitOverK split(k_blocks, M, n_padded, row_sums ? m14 : 0);
    split(
        [&](int64_t t, int64_t q0, int64_t q1) {
          thread_local AlignedBuffer<uint32_t> own_b, own_a;
          uint32_t* bp = own_b.get(static_cast<size_t>(n_padded * kp_step));
          uint32_t* ap = own_a.get(static_cast<size_t>(m14 * kp_step));
          for (int64_t q = q0; q < q1; ++q) {
            const int64_t pc = q * kc_step, kc = std::min(kc_step, K - pc), kp = (kc + 1) / 2, r = q - split.first_run;
            for (int64_t p = 0; p < n_panels_all; ++p)
              pack_b_panel(B, ldb, trans_b, p * kNr, std::min(kNr, N - p * kNr), pc, kc, bp + p * kNr * kp);
            const Out out =
                t == 0 ? to_c : Out{split.partial(r), n_padded, 1.0f, 0.0f, nullptr, false, split.partial_sums(r)};
            products(A, lda, trans_a, 0, M, 0, N, pc, kc, bp, ap, out, t != 0 || q == 0, t == 0 && q + 1 == k_blocks);
          }
        },
        [&](int64_t i, const float* partial_row) {
          add_partials(partial_row, split.partial_step(), split.partials(), N, C + i * ldc, alpha, round);
          if (row_sums) split.add_row_sums(i, row_sums);
        });
    return;
  }
  // Rows of C per unit of work: whole 14-row panels, at most kMcMax, about 4 units when M is small.
  const int64_t mc = std::clamp<int64_t>(((M + 3) / 4 + kMr - 1) / kMr * kMr, kMr, kMcMax);
  const int64_t m_blocks = (M + mc - 1) / mc;
  thread_local AlignedBuffer<uint32_t> b_buffer;
  for (int64_t jc = 0; jc < N; jc += kNc) {
    const int64_t nc = std::min(kNc, N - jc), n_panels = (nc + kNr - 1) / kNr;
    for (int64_t pc = 0; pc < K; pc += kc_step) {
      const int64_t kc = std::min(kc_step, K - pc), kp = (kc + 1) / 2;
      uint32_t* bp = b_buffer.get(static_cast<size_t>(n_panels * kNr * kp));
      parallel_for(n_panels, std::max<int64_t>(1, 8192 / (kNr * kp)), [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p)
          pack_b_panel(B, ldb, trans_b, jc + p * kNr, std::min(kNr, nc - p * kNr), pc, kc, bp + p * kNr * kp);
      });
      parallel_for(m_blocks, 1, [&](int64_t b0, int64_t b1) {
        thread_local AlignedBuffer<uint32_t> a_buffer;
        uint32_t* ap = a_buffer.get(static_cast<size_t>(mc * kp));
        for (int64_t blk = b0; blk < b1; ++blk)
          products(A, lda, trans_a, blk * mc, std::min(mc, M - blk * mc), jc, nc, pc, kc, bp, ap, to_c, pc == 0,
                   pc + kc == K);
      });
    }
  }
}

}  // namespace

bool gemm_bf16_avx512_supported() { return cpu_has_avx512_bf16(); }

bool gemm_bf16_avx512(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool trans_a, const uint16_t* B,
                      int64_t ldb, bool trans_b, float* C, int64_t ldc, float alpha, float beta, bool round_bf16) {
  if (!gemm_bf16_avx512_supported()) return false;
  if (!finish_trivial_product(M, N, K, alpha, beta, nullptr, C, ldc, round_bf16))
    packed_gemm(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, alpha, beta, nullptr, round_bf16);
  return true;
}

bool gemm_bf16_avx512_row_sums(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool trans_a,
                               const uint16_t* B, int64_t ldb, bool trans_b, float* C, int64_t ldc, float* row_sums) {
  return gemm_bf16_avx512_supported() && product_with_row_sums(trans_a, M, N, K, row_sums, [&](double* sums) {
           packed_gemm(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, 1.0f, 0.0f, nullptr, false, sums);
         });
}

bool gemm_bf16_avx512_bias(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool trans_a,
                           const uint16_t* B, int64_t ldb, bool trans_b, const float* bias, float* C, int64_t ldc,
                           bool round_bf16) {
  if (!gemm_bf16_avx512_supported()) return false;
  if (!finish_trivial_product(M, N, K, 1.0f, 0.0f, bias, C, ldc, round_bf16))
    packed_gemm(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, 1.0f, 0.0f, bias, round_bf16);
  return true;
}
#else
bool gemm_bf16_avx512_supported() { return false; }

bool gemm_bf16_avx512(int64_t, int64_t, int64_t, const uint16_t*, int64_t, bool, const uint16_t*, int64_t, bool, float*,
                      int64_t, float, float, bool) {
  return false;
}

bool gemm_bf16_avx512_bias(int64_t, int64_t, int64_t, const uint16_t*, int64_t, bool, const uint16_t*, int64_t, bool,
                           const float*, float*, int64_t, bool) {
  return false;
}

bool gemm_bf16_avx512_row_sums(int64_t, int64_t, int64_t, const uint16_t*, int64_t, bool, const uint16_t*, int64_t,
                               bool, float*, int64_t, float*) {
  return false;
}
#endif

bool gemm_bf16_supported() { return gemm_bf16_amx_supported() || gemm_bf16_avx512_supported(); }

bool gemm_bf16(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool trans_a, const uint16_t* B,
               int64_t ldb, bool trans_b, float* C, int64_t ldc, float alpha, float beta, bool round_bf16) {
  if (gemm_bf16_amx_supported())
    return gemm_bf16_amx(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, alpha, beta, round_bf16);
  return gemm_bf16_avx512(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, alpha, beta, round_bf16);
}

bool gemm_bf16_row_sums(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool trans_a,
                        const uint16_t* B, int64_t ldb, bool trans_b, float* C, int64_t ldc, float* row_sums) {
  if (gemm_bf16_amx_supported())
    return gemm_bf16_amx_row_sums(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, row_sums);
  return gemm_bf16_avx512_row_sums(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, row_sums);
}

void gemm_bf16_row_sums_reference(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool trans_a,
                                  const uint16_t* B, int64_t ldb, bool trans_b, float* C, int64_t ldc,
                                  float* row_sums) {
  gemm_bf16_reference(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc);
  for (int64_t i = 0; i < M; ++i) {
    double s = 0.0;
    for (int64_t k = 0; k < K; ++k) s += static_cast<double>(bf16_to_float(trans_a ? A[k * lda + i] : A[i * lda + k]));
    row_sums[i] = static_cast<float>(s);
  }
}

bool gemm_bf16_bias(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool trans_a, const uint16_t* B,
                    int64_t ldb, bool trans_b, const float* bias, float* C, int64_t ldc, bool round_bf16) {
  if (gemm_bf16_amx_supported())
    return gemm_bf16_amx_bias(M, N, K, A, lda, trans_a, B, ldb, trans_b, bias, C, ldc, round_bf16);
  return gemm_bf16_avx512_bias(M, N, K, A, lda, trans_a, B, ldb, trans_b, bias, C, ldc, round_bf16);
}

}  // namespace minidl::kernels::cpu
