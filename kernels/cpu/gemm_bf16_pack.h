// kernels/cpu/gemm_bf16_pack.h — what the two bfloat16 GEMM kernels share (gemm_bf16.cpp's
// AVX512_BF16 one and gemm_bf16_amx.cpp's AMX one): the products they finish without packing, the
// bias's padded copy, the adding of sums into C (rounded to bfloat16 precision where asked), and the packing of operands into k-pair words, whose 32-bit word p of a row or column holds (x[k0 + 2p],
// x[k0 + 2p + 1]), the low half first — the layout both vdpbf16ps and AMX's tdpbf16ps multiply.
//
// A B panel: (kp = ceil(kc / 2), 32) words, row p the pair words of 32 columns of op(B). The
// AVX512_BF16 kernel reads a row as two 16-lane vectors; AMX reads 16 rows of 16 words as one tile.
// Every function here carries its own target attribute (MINIDL_BF16_TARGET), so this header may be
// included by code built for any x86-64 level; callers run them only where gemm_bf16_supported().
#pragma once
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "minidl/kernels/cpu/bf16_round_avx512.h"
#include "minidl/kernels/cpu/half.h"
#include "minidl/kernels/cpu/prefetch.h"

#define MINIDL_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace minidl::kernels::cpu::bf16_pack {

constexpr int64_t kPanelCols = 32;  // columns of op(B) per packed B panel

inline __mmask16 first_n(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : static_cast<__mmask16>((1u << n) - 1);
}

// The pair word (p[0], p[1]) of two consecutive k, or (p[0], 0) past the end of K.
inline uint32_t pair_at(const uint16_t* p, bool has_second) {
  return p[0] | (has_second ? static_cast<uint32_t>(p[1]) << 16 : 0u);
}

// The products both kernels' entry points finish without packing: none when M or N is 0; C = beta
// * C when K is 0 or alpha is 0 (beta == 0 overwrites, ignoring NaNs already there; rounded to
// bfloat16 precision with round), or, with a bias (gemm_bf16_bias: alpha 1, beta 0), C = the bias
// in every row when K is 0. Returns whether it finished the product.
inline bool finish_trivial_product(int64_t M, int64_t N, int64_t K, float alpha, float beta, const float* bias,
                                   float* C, int64_t ldc, bool round = false) {
  if (M <= 0 || N <= 0) return true;
  if (K > 0 && alpha != 0.0f) return false;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float& c = C[i * ldc + j];
      c = bias ? bias[j] : beta == 0.0f ? 0.0f : beta * c;
      if (round) c = bf16_to_float(float_to_bf16(c));
    }
  return true;
}

// gemm_bf16_row_sums for either kernel: false where it refuses (an untransposed A, an empty
// product); else packed(sums) runs the product into M zeroed doubles, then each is rounded once
// into row_sums.
template <class Packed>
bool product_with_row_sums(bool trans_a, int64_t M, int64_t N, int64_t K, float* row_sums, Packed&& packed) {
  if (!trans_a || M <= 0 || N <= 0 || K <= 0) return false;
  std::vector<double> sums(static_cast<size_t>(M), 0.0);
  packed(sums.data());
  for (size_t i = 0; i < sums.size(); ++i) row_sums[i] = static_cast<float>(sums[i]);
  return true;
}

// The bias of gemm_bf16_bias copied into n_cols (a whole number of 32-column panels) floats, zeros
// past N, so a panel's 32 bias values are always readable; empty without a bias.
inline std::vector<float> padded_bias(const float* bias, int64_t N, int64_t n_cols) {
  std::vector<float> out;
  if (bias) {
    out.assign(static_cast<size_t>(n_cols), 0.0f);
    std::copy(bias, bias + N, out.begin());
  }
  return out;
}

// Adds one K block's float32 sums `acc` into the lanes `mask` of c: on the first K block
// c = alpha * acc + beta * c (beta == 0: c is write-only, its old contents, even NaN, not read),
// on the others c += alpha * acc; with round (on the last K block of a rounded product), the
// result is stored rounded to bfloat16 precision.
MINIDL_BF16_TARGET inline void add_into_c(__m512 acc, float* c, __mmask16 mask, bool first, float alpha, float beta,
                                          bool round) {
  const __m512 va = _mm512_set1_ps(alpha);
  __m512 out;
  if (first && beta == 0.0f) {
    out = _mm512_mul_ps(va, acc);
  } else {
    const __m512 old = _mm512_maskz_loadu_ps(mask, c);
    out = _mm512_fmadd_ps(va, acc, first ? _mm512_mul_ps(_mm512_set1_ps(beta), old) : old);
  }
  _mm512_mask_storeu_ps(c, mask, round ? round_bf16_ps(out) : out);
}

// One row of C (N values) plus `count` partial rows (`step` floats apart, 64-byte aligned, whole
// 16-column vectors) of a product split over its K blocks (kernels/cpu/split_over_k.h), added in
// K order by add_into_c as the loop over K blocks adds further blocks (c += alpha * partial), the
// last rounded with round.
MINIDL_BF16_TARGET inline void add_partials(const float* partial, int64_t step, int64_t count, int64_t N, float* c,
                                            float alpha, bool round) {
  for (int64_t q = 0; q < count; ++q)
    for (int64_t j = 0; j < N; j += 16)
      add_into_c(_mm512_load_ps(partial + q * step + j), c + j, first_n(N - j), false, alpha, 0.0f,
                 round && q == count - 1);
}

// A 16x16 transpose of 32-bit words: dst[c * ldd + i] = word c of r[i], for the lanes i in keep
// (r is overwritten).
MINIDL_BF16_TARGET inline void store_transposed_16x16(__m512i r[16], uint32_t* dst, int64_t ldd, __mmask16 keep) {
  __m512i t[16];
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
    _mm512_mask_storeu_epi32(dst + c * ldd, keep, _mm512_shuffle_i32x4(lo01, lo23, 0x88));
    _mm512_mask_storeu_epi32(dst + (c + 4) * ldd, keep, _mm512_shuffle_i32x4(lo01, lo23, 0xDD));
    _mm512_mask_storeu_epi32(dst + (c + 8) * ldd, keep, _mm512_shuffle_i32x4(hi01, hi23, 0x88));
    _mm512_mask_storeu_epi32(dst + (c + 12) * ldd, keep, _mm512_shuffle_i32x4(hi01, hi23, 0xDD));
  }
}

// Rows whose k pairs are contiguous (op(A)'s rows when A is not transposed, op(B)'s columns when B
// is) into a panel: dst[p * ldd + r] = the pair word of k0 + 2p, k0 + 2p + 1 of row r (at
// src + r * lds) for p < ceil(kc / 2) and r < width <= 16, zero for rows r >= rows. Whole runs of
// 16 pairs go as one 16x16 transpose of 32-bit words; the rest (and an odd K's last k) one by one.
MINIDL_BF16_TARGET inline void pack_pair_rows(const uint16_t* src, int64_t lds, int64_t rows, int64_t kc, uint32_t* dst,
                                              int64_t ldd, int64_t width) {
  const int64_t whole = kc / 2, kp = (kc + 1) / 2;  // pairs with both k; all pairs
  const __mmask16 keep = first_n(width);
  int64_t p0 = 0;
  for (; p0 + 16 <= whole; p0 += 16) {
    __m512i r[16];
    for (int i = 0; i < 16; ++i) r[i] = i < rows ? _mm512_loadu_si512(src + i * lds + 2 * p0) : _mm512_setzero_si512();
    store_transposed_16x16(r, dst + p0 * ldd, ldd, keep);
  }
  for (int64_t r = 0; r < width; ++r) {
    const uint16_t* row = r < rows ? src + r * lds : nullptr;
    for (int64_t p = p0; p < kp; ++p) dst[p * ldd + r] = row ? pair_at(row + 2 * p, 2 * p + 1 < kc) : 0u;
  }
}

// The pair words (row[j], next[j]) of the first n <= 16 columns of row and next (null past the
// end of K: zeros), lanes past n zero.
MINIDL_BF16_TARGET inline __m512i pair_rows(const uint16_t* row, const uint16_t* next, int64_t n) {
  const __mmask16 m = first_n(n);
  const __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, row));
  if (!next) return lo;
  return _mm512_or_si512(lo, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, next)), 16));
}

// Row sums of a transposed op(A) gathered while it is packed (gemm_bf16_row_sums): 16 rows' sums
// in double, lanes 0-7 and 8-15, each the sum of its row's values in k order.
struct PairSums {
  __m512d lo, hi;
};
// sums[0..n) (n <= 16) += s's lanes: one K block's sums (from zero) added to the earlier blocks',
// so that a product split over its K blocks, whose blocks' sums are added in K order afterwards,
// gets the same bits.
MINIDL_BF16_TARGET inline void add_pair_sums(const PairSums& s, double* sums, int64_t n) {
  const __mmask8 lo = static_cast<__mmask8>(first_n(n)), hi = static_cast<__mmask8>(first_n(n) >> 8);
  _mm512_mask_storeu_pd(sums, lo, _mm512_add_pd(_mm512_maskz_loadu_pd(lo, sums), s.lo));
  _mm512_mask_storeu_pd(sums + 8, hi, _mm512_add_pd(_mm512_maskz_loadu_pd(hi, sums + 8), s.hi));
}
// Lanes 8-15 (AVX-512F alone: vextractf32x8 needs AVX512DQ).
MINIDL_BF16_TARGET inline __m256 upper_8(__m512 v) {
  return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}
// Adds the two values of 16 pair words (as pair_rows makes them): the low halves (k) first, then
// the high halves (k + 1), each widened exactly to double.
MINIDL_BF16_TARGET inline void add_pairs(PairSums& s, __m512i pairs) {
  const __m512 k0 = _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16));
  const __m512 k1 = _mm512_castsi512_ps(_mm512_and_si512(pairs, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  s.lo = _mm512_add_pd(s.lo, _mm512_cvtps_pd(_mm512_castps512_ps256(k0)));
  s.hi = _mm512_add_pd(s.hi, _mm512_cvtps_pd(upper_8(k0)));
  s.lo = _mm512_add_pd(s.lo, _mm512_cvtps_pd(_mm512_castps512_ps256(k1)));
  s.hi = _mm512_add_pd(s.hi, _mm512_cvtps_pd(upper_8(k1)));
}

// One B panel: dst (kp = ceil(kc / 2), 32) = the pairs of op(B) rows k0..k0+kc-1, columns
// j0..j0+nr-1; columns past nr zero. op(B)(k, j) = B[k * ldb + j], or B[j * ldb + k] when trans_b.
MINIDL_BF16_TARGET inline void pack_b_panel(const uint16_t* B, int64_t ldb, bool trans_b, int64_t j0, int64_t nr,
                                            int64_t k0, int64_t kc, uint32_t* dst) {
  const int64_t kp = (kc + 1) / 2;
  if (!trans_b) {  // each k: nr contiguous values
    for (int64_t p = 0; p < kp; ++p) {
      const uint16_t* row = B + (k0 + 2 * p) * ldb + j0;
      // the panel's 64 bytes of the rows 16 k ahead: B (a linear layer's x in its weight
      // gradient) has often left the caches, and its rows are ldb apart (prefetch.h)
      prefetch_elements(row + 16 * ldb, kPanelCols);
      prefetch_elements(row + 17 * ldb, kPanelCols);
      const uint16_t* next = 2 * p + 1 < kc ? row + ldb : nullptr;
      _mm512_store_si512(dst + p * kPanelCols, pair_rows(row, next, nr));
      _mm512_store_si512(dst + p * kPanelCols + 16,
                         nr > 16 ? pair_rows(row + 16, next ? next + 16 : nullptr, nr - 16) : _mm512_setzero_si512());
    }
    return;
  }
  // each column of op(B) is a row of B, whose pairs are contiguous: 16 of them at a time
  pack_pair_rows(B + j0 * ldb + k0, ldb, nr, kc, dst, kPanelCols, 16);
  pack_pair_rows(nr > 16 ? B + (j0 + 16) * ldb + k0 : B, ldb, nr - 16, kc, dst + 16, kPanelCols, 16);
}

}  // namespace minidl::kernels::cpu::bf16_pack
#endif
