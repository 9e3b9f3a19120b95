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
// Every element of C is summed in the same order whatever the thread count (threads split blocks of
// C's rows, never K): bit-identical for any thread count. GFLOP/s against the float32 kernel:
// `bench_gemm bf16` (examples/bench_gemm.cpp).
// GCC 12 reports false "maybe-uninitialized" warnings inside its own AVX-512 headers.
// Written in intrinsics, not vec_math.h's lane types: its functions carry their own
// target("avx512bf16") attributes for the run-time dispatch, and vdpbf16ps (two bf16 products per
// float lane) has no vector-type spelling.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "minidl/kernels/cpu/gemm_bf16.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <new>

#include "minidl/kernels/cpu/half.h"
#include "minidl/kernels/cpu/parallel.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace minidl::kernels::cpu {

void gemm_bf16_reference(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool trans_a,
                         const uint16_t* B, int64_t ldb, bool trans_b, float* C, int64_t ldc, float alpha, float beta) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float sum = 0.0f;
      for (int64_t k = 0; k < K; ++k)
        sum += bf16_to_float(trans_a ? A[k * lda + i] : A[i * lda + k]) *
               bf16_to_float(trans_b ? B[j * ldb + k] : B[k * ldb + j]);
      float& c = C[i * ldc + j];
      c = beta == 0.0f ? alpha * sum : alpha * sum + beta * c;
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
namespace {

#define MINIDL_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

constexpr int64_t kMr = 14, kNr = 32;  // micro-kernel tile of C: 14 x 2 accumulators of 16 floats
constexpr int64_t kKcMax = 512;  // K blocks: a B panel (256 pairs x 32 columns, 32 KB) stays in L1
constexpr int64_t kNc = 4096;  // columns of C per packed B block (bounds the B buffer to 4 MB)
constexpr int64_t kMcMax = 9 * kMr;  // rows of C per unit of parallel work (an A block of 126 KB)

// A 64-byte aligned buffer of 32-bit words that only grows (one per thread, reused by every call).
struct PackBuffer {
  std::unique_ptr<uint32_t, decltype(&std::free)> data{nullptr, &std::free};
  size_t size = 0;
  uint32_t* get(size_t n) {
    if (n > size) {
      const size_t bytes = (n * sizeof(uint32_t) + 63) / 64 * 64;
      data.reset(static_cast<uint32_t*>(std::aligned_alloc(64, bytes)));
      if (!data) throw std::bad_alloc();
      size = bytes / sizeof(uint32_t);
    }
    return data.get();
  }
};

inline __mmask16 first_n(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : static_cast<__mmask16>((1u << n) - 1);
}

// The pair word (p[0], p[1]) of two consecutive k, or (p[0], 0) past the end of K.
inline uint32_t pair_at(const uint16_t* p, bool has_second) {
  return p[0] | (has_second ? static_cast<uint32_t>(p[1]) << 16 : 0u);
}

// Rows whose k pairs are contiguous (op(A)'s rows when A is not transposed, op(B)'s columns when B
// is) into a panel: dst[p * ldd + r] = the pair word of k0 + 2p, k0 + 2p + 1 of row r (at
// src + r * lds) for p < ceil(kc / 2) and r < width <= 16, zero for rows r >= rows. Whole runs of
// 16 pairs go as one 16x16 transpose of 32-bit words; the rest (and an odd K's last k) one by one.
MINIDL_BF16 void pack_pair_rows(const uint16_t* src, int64_t lds, int64_t rows, int64_t kc, uint32_t* dst, int64_t ldd,
                                int64_t width) {
  const int64_t whole = kc / 2, kp = (kc + 1) / 2;  // pairs with both k; all pairs
  const __mmask16 keep = first_n(width);
  int64_t p0 = 0;
  for (; p0 + 16 <= whole; p0 += 16) {
    __m512i r[16], t[16];
    for (int i = 0; i < 16; ++i) r[i] = i < rows ? _mm512_loadu_si512(src + i * lds + 2 * p0) : _mm512_setzero_si512();
    for (int i = 0; i < 8; ++i) {  // t[2i] = a0 b0 a1 b1 | a4 b4 a5 b5 | ..., t[2i+1] = a2 b2 a3 b3 | ... (rows a, b)
      t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; ++i) {  // r[4i + c]: rows 4i..4i+3 of columns c | c + 4 | c + 8 | c + 12
      r[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
      r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
      r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
      r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int c = 0; c < 4; ++c) {  // column c + 4l: 128-bit lane l of r[c], r[4 + c], r[8 + c], r[12 + c]
      const __m512i lo01 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x44),
                    lo23 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x44);
      const __m512i hi01 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xEE),
                    hi23 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xEE);
      _mm512_mask_storeu_epi32(dst + (p0 + c) * ldd, keep, _mm512_shuffle_i32x4(lo01, lo23, 0x88));
      _mm512_mask_storeu_epi32(dst + (p0 + c + 4) * ldd, keep, _mm512_shuffle_i32x4(lo01, lo23, 0xDD));
      _mm512_mask_storeu_epi32(dst + (p0 + c + 8) * ldd, keep, _mm512_shuffle_i32x4(hi01, hi23, 0x88));
      _mm512_mask_storeu_epi32(dst + (p0 + c + 12) * ldd, keep, _mm512_shuffle_i32x4(hi01, hi23, 0xDD));
    }
  }
  for (int64_t r = 0; r < width; ++r) {
    const uint16_t* row = r < rows ? src + r * lds : nullptr;
    for (int64_t p = p0; p < kp; ++p) dst[p * ldd + r] = row ? pair_at(row + 2 * p, 2 * p + 1 < kc) : 0u;
  }
}

// The pair words (row[j], next[j]) of the first n <= 16 columns of row and next (null past the
// end of K: zeros), lanes past n zero.
MINIDL_BF16 inline __m512i pair_rows(const uint16_t* row, const uint16_t* next, int64_t n) {
  const __mmask16 m = first_n(n);
  const __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, row));
  if (!next) return lo;
  return _mm512_or_si512(lo, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, next)), 16));
}

// One A panel: dst (kp = ceil(kc / 2), 14) = the pairs of op(A) rows i0..i0+mr-1, columns
// k0..k0+kc-1; rows past mr zero. op(A)(i, k) = A[i * lda + k], or A[k * lda + i] when trans_a.
MINIDL_BF16 void pack_a_panel(const uint16_t* A, int64_t lda, bool trans_a, int64_t i0, int64_t mr, int64_t k0,
                              int64_t kc, uint32_t* dst) {
  const int64_t kp = (kc + 1) / 2;
  if (trans_a) {  // each k: mr contiguous values
    for (int64_t p = 0; p < kp; ++p) {
      const uint16_t* row = A + (k0 + 2 * p) * lda + i0;
      _mm512_mask_storeu_epi32(dst + p * kMr, first_n(kMr), pair_rows(row, 2 * p + 1 < kc ? row + lda : nullptr, mr));
    }
    return;
  }
  pack_pair_rows(A + i0 * lda + k0, lda, mr, kc, dst, kMr, kMr);  // each row's pairs are contiguous
}

// One B panel: dst (kp = ceil(kc / 2), 32) = the pairs of op(B) rows k0..k0+kc-1, columns
// j0..j0+nr-1; columns past nr zero. op(B)(k, j) = B[k * ldb + j], or B[j * ldb + k] when trans_b.
MINIDL_BF16 void pack_b_panel(const uint16_t* B, int64_t ldb, bool trans_b, int64_t j0, int64_t nr, int64_t k0,
                              int64_t kc, uint32_t* dst) {
  const int64_t kp = (kc + 1) / 2;
  if (!trans_b) {  // each k: nr contiguous values
    for (int64_t p = 0; p < kp; ++p) {
      const uint16_t* row = B + (k0 + 2 * p) * ldb + j0;
      const uint16_t* next = 2 * p + 1 < kc ? row + ldb : nullptr;
      _mm512_store_si512(dst + p * kNr, pair_rows(row, next, nr));
      _mm512_store_si512(dst + p * kNr + 16,
                         nr > 16 ? pair_rows(row + 16, next ? next + 16 : nullptr, nr - 16) : _mm512_setzero_si512());
    }
    return;
  }
  // each column of op(B) is a row of B, whose pairs are contiguous: 16 of them at a time
  pack_pair_rows(B + j0 * ldb + k0, ldb, nr, kc, dst, kNr, 16);
  pack_pair_rows(nr > 16 ? B + (j0 + 16) * ldb + k0 : B, ldb, nr - 16, kc, dst + 16, kNr, 16);
}

// C (mr <= 14, nr <= 16 * NV) = alpha * op(A) (14 rows, kp pairs) · op(B) (kp pairs, 32) [+ beta *
// C on the first K block, or + C on the others], from a packed A panel a (kp, 14) and B panel b
// (kp, 32); NV = 1 reads only the first 16 columns of each B row.
template <int NV>
MINIDL_BF16 void micro_kernel(int64_t kp, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc, int64_t mr,
                              int64_t nr, bool first, float alpha, float beta) {
  __m512 acc[kMr][NV];
  for (int r = 0; r < kMr; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kp; ++p) {
    __m512bh bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_load_si512(b + p * kNr + 16 * v);
    for (int r = 0; r < kMr; ++r) {
      const __m512bh ar = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[p * kMr + r]));
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], ar, bv[v]);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  __mmask16 mask[NV];
  for (int v = 0; v < NV; ++v) mask[v] = first_n(nr - 16 * v);
  for (int r = 0; r < kMr; ++r) {
    if (r >= mr) break;
    float* cr = c + r * ldc;
    for (int v = 0; v < NV; ++v) {
      __m512 out;
      if (first && beta == 0.0f) {  // C is write-only: its old contents (even NaN) are not read
        out = _mm512_mul_ps(va, acc[r][v]);
      } else {
        const __m512 old = _mm512_maskz_loadu_ps(mask[v], cr + 16 * v);
        out = _mm512_fmadd_ps(va, acc[r][v], first ? _mm512_mul_ps(vb, old) : old);
      }
      _mm512_mask_storeu_ps(cr + 16 * v, mask[v], out);
    }
  }
}

void packed_gemm(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool trans_a, const uint16_t* B,
                 int64_t ldb, bool trans_b, float* C, int64_t ldc, float alpha, float beta) {
  // K blocks of equal size (the last may be shorter, and odd), chosen from K alone.
  const int64_t k_blocks = (K + kKcMax - 1) / kKcMax;
  const int64_t kc_step = ((K + k_blocks - 1) / k_blocks + 7) / 8 * 8;
  // Rows of C per unit of work: whole 14-row panels, at most kMcMax, about 4 units when M is small.
  const int64_t mc = std::clamp<int64_t>(((M + 3) / 4 + kMr - 1) / kMr * kMr, kMr, kMcMax);
  const int64_t m_blocks = (M + mc - 1) / mc;
  thread_local PackBuffer b_buffer;
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
        thread_local PackBuffer a_buffer;
        uint32_t* ap = a_buffer.get(static_cast<size_t>(mc * kp));
        for (int64_t blk = b0; blk < b1; ++blk) {
          const int64_t i0 = blk * mc, m = std::min(mc, M - i0), m_panels = (m + kMr - 1) / kMr;
          for (int64_t q = 0; q < m_panels; ++q)
            pack_a_panel(A, lda, trans_a, i0 + q * kMr, std::min(kMr, m - q * kMr), pc, kc, ap + q * kMr * kp);
          for (int64_t p = 0; p < n_panels; ++p) {
            const int64_t j = jc + p * kNr, nr = std::min(kNr, nc - p * kNr);
            for (int64_t q = 0; q < m_panels; ++q) {
              const int64_t i = i0 + q * kMr, mr = std::min(kMr, m - q * kMr);
              const uint32_t *a = ap + q * kMr * kp, *b = bp + p * kNr * kp;
              if (nr > 16)
                micro_kernel<2>(kp, a, b, C + i * ldc + j, ldc, mr, nr, pc == 0, alpha, beta);
              else
                micro_kernel<1>(kp, a, b, C + i * ldc + j, ldc, mr, nr, pc == 0, alpha, beta);
            }
          }
        }
      });
    }
  }
}

}  // namespace

bool gemm_bf16_supported() {
  static const bool have =
      __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return have;
}

bool gemm_bf16(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool trans_a, const uint16_t* B,
               int64_t ldb, bool trans_b, float* C, int64_t ldc, float alpha, float beta) {
  if (!gemm_bf16_supported()) return false;
  if (M <= 0 || N <= 0) return true;
  if (K <= 0 || alpha == 0.0f) {  // C = beta * C (beta == 0: overwrite, ignoring NaNs already there)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return true;
  }
  packed_gemm(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, alpha, beta);
  return true;
}
#else
bool gemm_bf16_supported() { return false; }

bool gemm_bf16(int64_t, int64_t, int64_t, const uint16_t*, int64_t, bool, const uint16_t*, int64_t, bool, float*,
               int64_t, float, float) {
  return false;
}
#endif

}  // namespace minidl::kernels::cpu
