// kernels/cpu/attention_bf16.cpp — packed_attention_forward_bf16 / _backward_bf16 (attention.h):
// the packed attention with its matrix products' operands in bfloat16 and float32 sums, on
// AVX512_BF16 (vdpbf16ps), and their plain references.
//
// Per (b, h) pair, the steps of attention_forward.cpp / attention_backward.cpp, each product's
// operands rounded to bfloat16 and laid out as k-pair words (one 32-bit word holds the bfloat16
// bits of two consecutive k, low half first: the layout of gemm_bf16_pack.h) in L1 scratch:
//   forward:  S = scale * q k^T     A: q's rows as words (pairs of d); B: k's rows as word columns
//             P = softmax(S)        float32, stored; its rows also as words (pairs of keys)
//             ctx = P v             B: v's pairs of rows interleaved (pairs of keys)
//   backward: dP = dctx v^T         A: dctx's rows as words; B: v's rows as word columns
//             dS = P * (dP - rowsum(dP * P)), float32, stored only as words: rows, pairs of rows
//             dq = scale * dS k     dk = scale * dS^T q     dv = P^T dctx
//             (dS^T and P^T as A: two rows interleaved, read by columns)
// so every product multiplies words of two bfloat16 values by words of two: 32 multiply-adds per
// instruction where attention_tiles.h's FMA does 16. As in the float32 kernels, rows of up to 4
// vectors (L <= 64) run the softmax and its backward on S's and dP's rows while they are still in
// registers (attention_tiles.h's softmax_lanes and row_dot) and make P's and dS's words there;
// longer rows go through scratch. A causal head computes S and dP only for the key vectors a block
// of rows sees, and its other products skip the word pairs of P's and dS's zeros above the
// diagonal (whole pairs; the zeros left in a tile add nothing).
// Like vec_math.h's masked loads, the bfloat16 instructions are intrinsics under the build's own
// target: the kernels exist where the library is compiled for AVX512_BF16 (MINIDL_NATIVE, the
// default, on such a CPU) and run where cpu_has_avx512_bf16() agrees (MINIDL_CPU_CAPABILITY);
// elsewhere they return false and autocast's attention takes the float32 kernels.
#include <algorithm>
#include <utility>
#include <vector>

#include "minidl/kernels/cpu/attention.h"
#include "minidl/kernels/cpu/attention_tiles.h"
#include "minidl/kernels/cpu/cpu_features.h"
#include "minidl/kernels/cpu/gemm_bf16.h"
#include "minidl/kernels/cpu/gemm_bf16_pack.h"
#include "minidl/kernels/cpu/half.h"

namespace minidl::kernels::cpu {

namespace {
// (rows, cols) rounded to bfloat16 from a float32 matrix whose rows are ld apart
std::vector<uint16_t> rounded(const float* x, int64_t ld, int64_t rows, int64_t cols) {
  std::vector<uint16_t> out(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = float_to_bf16(x[i * ld + j]);
  return out;
}
}  // namespace

void packed_attention_forward_bf16_reference(const float* qkv, int64_t B, int64_t L, int64_t H, int64_t D, float scale,
                                             float* P, float* ctx, bool causal) {
  const int64_t E = H * D, ld = 3 * E;
  for (int64_t t = 0; t < B * H; ++t) {
    const int64_t b = t / H, h = t % H;
    const float* q = qkv + b * L * ld + h * D;
    float* p = P + t * L * L;
    const auto qb = rounded(q, ld, L, D), kb = rounded(q + E, ld, L, D), vb = rounded(q + 2 * E, ld, L, D);
    gemm_bf16_reference(L, L, D, qb.data(), D, false, kb.data(), D, true, p, L, scale);  // scale * q k^T
    for (int64_t i = 0; i < L; ++i) {
      if (causal)
        for (int64_t j = i + 1; j < L; ++j) p[i * L + j] = -std::numeric_limits<float>::infinity();
      softmax_row(p + i * L, p + i * L, L, std::integral_constant<int64_t, 1>{}, false);
    }
    const auto pb = rounded(p, L, L, L);
    gemm_bf16_reference(L, D, L, pb.data(), L, false, vb.data(), D, false, ctx + b * L * E + h * D, E);  // P v
  }
}

void packed_attention_backward_bf16_reference(const float* qkv, const float* P, const float* dctx, int64_t B, int64_t L,
                                              int64_t H, int64_t D, float scale, float* dqkv, bool /*causal*/) {
  const int64_t E = H * D, ld = 3 * E;
  std::vector<float> ds(static_cast<size_t>(L * L));
  for (int64_t t = 0; t < B * H; ++t) {
    const int64_t b = t / H, h = t % H;
    const float* q = qkv + b * L * ld + h * D;
    const float* p = P + t * L * L;
    float* dq = dqkv + b * L * ld + h * D;
    const auto qb = rounded(q, ld, L, D), kb = rounded(q + E, ld, L, D), vb = rounded(q + 2 * E, ld, L, D);
    const auto gb = rounded(dctx + b * L * E + h * D, E, L, D), pb = rounded(p, L, L, L);
    gemm_bf16_reference(L, L, D, gb.data(), D, false, vb.data(), D, true, ds.data(), L);  // dP = dctx v^T
    gemm_bf16_reference(L, D, L, pb.data(), L, true, gb.data(), D, false, dq + 2 * E, ld);  // dv = P^T dctx
    for (int64_t i = 0; i < L; ++i)  // dS = P * (dP - rowsum(dP * P)): zero where P is
      softmax_backward_row(p + i * L, ds.data() + i * L, ds.data() + i * L, L, std::integral_constant<int64_t, 1>{},
                           false);
    const auto sb = rounded(ds.data(), L, L, L);
    gemm_bf16_reference(L, D, L, sb.data(), L, false, kb.data(), D, false, dq, ld, scale);  // dq = scale * dS k
    gemm_bf16_reference(L, D, L, sb.data(), L, true, qb.data(), D, false, dq + E, ld, scale);  // dk = scale * dS^T q
  }
}

#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512VL__)
namespace {
using namespace attention_tiles;

constexpr int64_t W = kLanes<float>;  // 16

// Two vectors of floats (lo, then hi: 32 consecutive values) rounded to bfloat16
// (vcvtne2ps2bf16: to nearest even as half.h, but float32 subnormals to zero, which vdpbf16ps
// takes as zero anyway) as 16 words in order: word p = (value 2p, value 2p + 1).
inline __m512i words_of(FloatLanes lo, FloatLanes hi) {
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(reinterpret_cast<__m512>(hi), reinterpret_cast<__m512>(lo)));
}
// The lanes of two rows' vectors a and b interleaved: word j = (a[j], b[j]).
inline __m512i interleaved(FloatLanes a, FloatLanes b) {
  alignas(64) static constexpr uint16_t kIndex[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  return _mm512_permutexvar_epi16(_mm512_load_si512(kIndex), words_of(a, b));
}
inline __mmask16 first_n(int64_t n) { return bf16_pack::first_n(n); }

// A row of NV vectors (x, its values past the row zero) as words: dst's first nw words.
template <int NV> [[gnu::always_inline]] inline void store_row_words(const FloatLanes* x, int64_t nw, uint32_t* dst) {
#pragma GCC unroll 4
  for (int v = 0; v < NV; v += 2)
    _mm512_mask_storeu_epi32(dst + v * 8, first_n(nw - v * 8), words_of(x[v], v + 1 < NV ? x[v + 1] : FloatLanes{}));
}

// Rows of n values, ld apart, as words: (rows, ceil(n / 2)) words, an odd n's last high half 0.
void rows_as_words(const float* x, int64_t ld, int64_t rows, int64_t n, uint32_t* dst) {
  const int64_t nw = (n + 1) / 2;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < n; c += 2 * W) {
      const float* r = x + i * ld + c;
      _mm512_mask_storeu_epi32(dst + i * nw + c / 2, first_n(nw - c / 2),
                               words_of(load_prefix(r, 0, n - c), load_prefix(r, 1, n - c)));
    }
}

// Rows of n values, ld apart, as words and transposed: dst (round_up(ceil(n / 2), 16), width)
// with dst[p * width + i] = word p of row i; rows..width zero (width a multiple of 16). Blocks of
// 16 rows by 16 words, transposed in registers (gemm_bf16_pack.h's 16 x 16 transpose).
void rows_as_word_columns(const float* x, int64_t ld, int64_t rows, int64_t n, int64_t width, uint32_t* dst) {
  for (int64_t c = 0; c < n; c += 2 * W)
    for (int64_t i0 = 0; i0 < width; i0 += W) {
      __m512i r[16];
      for (int64_t i = 0; i < 16; ++i) {
        const float* row = x + (i0 + i) * ld + c;
        r[i] = i0 + i < rows ? words_of(load_prefix(row, 0, n - c), load_prefix(row, 1, n - c)) : __m512i{};
      }
      bf16_pack::store_transposed_16x16(r, dst + c / 2 * width + i0, width, first_n(W));
    }
}

// Rows 2p and 2p + 1 of x (rows ld apart, n values each) interleaved: dst (ceil(rows / 2),
// width) with dst[p * width + j] = (x[2p][j], x[2p + 1][j]) for j < n, zero for n <= j < width (a
// multiple of 16); an odd row count's last pair takes zeros for its second row.
void row_pairs_as_words(const float* x, int64_t ld, int64_t rows, int64_t n, int64_t width, uint32_t* dst) {
  for (int64_t p = 0; 2 * p < rows; ++p) {
    const float* r0 = x + 2 * p * ld;
    const int64_t n1 = 2 * p + 1 < rows ? n : 0;  // the second row's values read
    for (int64_t c = 0; c < width; c += W)
      _mm512_storeu_si512(dst + p * width + c,
                          interleaved(load_prefix(r0 + c, 0, n - c), load_prefix(r0 + ld + c, 0, n1 - c)));
  }
}

// acc (R, 16 NV) = A (R, kp words) · B (kp words, 16 NV lanes): A(r, p) at A[r * ars + p * aks],
// B's word row p at B + p * ldb; vdpbf16ps adds each pair of products into a float lane, p in
// order (callers inline it, the sums left in registers).
template <int R, int NV>
[[gnu::always_inline]] inline void pair_accumulate(const uint32_t* A, int64_t ars, int64_t aks, const uint32_t* B,
                                                   int64_t ldb, int64_t kp, FloatLanes (&acc)[R][NV]) {
  __m512 sum[R][NV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) sum[r][v] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kp; ++p) {
    __m512bh b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) b[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(B + p * ldb + v * W));
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(A[r * ars + p * aks])));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) sum[r][v] = _mm512_dpbf16_ps(sum[r][v], a, b[v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = reinterpret_cast<FloatLanes>(sum[r][v]);
}

// C (R, 16 NV) = alpha * A · B as pair_accumulate sums it, rows of C ldc apart.
template <int R, int NV>
[[gnu::noinline]] void pair_tile(const uint32_t* A, int64_t ars, int64_t aks, const uint32_t* B, int64_t ldb,
                                 int64_t kp, float alpha, float* C, int64_t ldc) {
  FloatLanes acc[R][NV];
  pair_accumulate<R, NV>(A, ars, aks, B, ldb, kp, acc);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) store_lanes(C + r * ldc + v * W, acc[r][v] * alpha);
}

// Rows i..i+R of C (C = alpha * A · B, A(i, p) at A[i * ars + p * aks]) for NV vector columns,
// over the word pairs that `terms` keeps (attention_tiles.h's Terms: a causal head's P and dS are
// zero above the diagonal, so row i's keys k <= i are words p < ceil((i + R) / 2) for the tile,
// and P^T's and dS^T's queries k >= i words p >= i / 2; the zeros left inside a tile add nothing).
template <int R, int NV>
void pair_rows(int64_t i, Terms terms, const uint32_t* A, int64_t ars, int64_t aks, const uint32_t* B, int64_t ldb,
               int64_t kp, float alpha, float* C, int64_t ldc) {
  const int64_t p0 = terms == Terms::FromRow ? i / 2 : 0;
  const int64_t p1 = terms == Terms::UpToRow ? std::min(kp, (i + R + 1) / 2) : kp;
  pair_tile<R, NV>(A + i * ars + p0 * aks, ars, aks, B + p0 * ldb, ldb, p1 - p0, alpha, C + i * ldc, ldc);
}

// C (M, 16 nv) = alpha * A (M, kp words) · B (kp words, 16 nv lanes), in attention_tiles.h's
// column blocks and tiles of rows.
void pair_products(int64_t M, int64_t nv, const uint32_t* A, int64_t ars, int64_t aks, const uint32_t* B, int64_t ldb,
                   int64_t kp, float alpha, float* C, int64_t ldc, Terms terms = Terms::All) {
  for_each_column_block(nv, [&](auto n, int64_t c) {
    constexpr int NV = decltype(n)::value;
    for_each_tile<NV>(M, [&](auto r, int64_t i) {
      pair_rows<decltype(r)::value, NV>(i, terms, A, ars, aks, B + c * W, ldb, kp, alpha, C + c * W, ldc);
    });
  });
}

// One head's sizes: L queries and keys (Lp padded to vectors, nl vectors, Lw key pairs), D per
// head (Dp padded, Dw pairs, Dw16 rounded up to 16: the rows of a transposed operand's scratch).
struct Head {
  int64_t L, D, Lp, nl, Dp, Lw, Dw, Dw16;
  Head(int64_t L_, int64_t D_)
      : L(L_),
        D(D_),
        Lp(round_up(L_, W)),
        nl(Lp / W),
        Dp(round_up(D_, W)),
        Lw((L_ + 1) / 2),
        Dw((D_ + 1) / 2),
        Dw16(round_up((D_ + 1) / 2, W)) {}
  // the key vectors rows ..i_end see: all, or causal, those of keys < i_end
  int64_t seen(bool causal, int64_t i_end) const { return causal ? (std::min(i_end, L) + W - 1) / W : nl; }
};

// ---- forward ----

// Rows i0..i0+R of P (rows L apart) = softmax(scale * q k^T) and the same rows as words (pw, rows
// Lw apart): the R x NV block of S summed in registers, each row's softmax (attention_tiles.h)
// done there, its words made from the values it stored (NV vectors span the keys these rows see;
// causal, the words past them zero).
template <int R, int NV>
[[gnu::noinline]] void softmax_tile(const Head& h, const uint32_t* qw, const uint32_t* ktw, int64_t i0, bool causal,
                                    float scale, float* p, uint32_t* pw) {
  FloatLanes acc[R][NV];
  pair_accumulate<R, NV>(qw, h.Dw, 1, ktw, h.Lp, h.Dw, acc);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] *= scale;
    const float inv = softmax_lanes<float, NV>(acc[r], NV, causal ? i0 + r + 1 : h.L, h.L, p + r * h.L);
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] *= inv;
    store_row_words<NV>(acc[r], h.Lw, pw + r * h.Lw);
    for (int64_t c = (NV + 1) / 2 * 16; c < h.Lw; c += 16)
      _mm512_mask_storeu_epi32(pw + r * h.Lw + c, first_n(h.Lw - c), __m512i{});
  }
}

// P (L, L) and its words for rows of nl <= 4 vectors: tiles of 4 rows, then 2, then 1.
void softmax_panel(const Head& h, const uint32_t* qw, const uint32_t* ktw, bool causal, float scale, float* p,
                   uint32_t* pw) {
  for_each_row_block(h.L, [&](auto r, int64_t i) {
    constexpr int R = decltype(r)::value;
    with_vectors(h.seen(causal, i + R), [&](auto nv) {
      softmax_tile<R, decltype(nv)::value>(h, qw + i * h.Dw, ktw, i, causal, scale, p + i * h.L, pw + i * h.Lw);
    });
  });
}

// One head: q, k, v (L, D) rows ld apart -> p (L, L), ctx (L, D) rows ldc apart.
void forward_head(const Head& h, const float* q, const float* k, const float* v, int64_t ld, float scale, bool causal,
                  float* p, float* ctx, int64_t ldc, float* fs, uint32_t* ws) {
  const int64_t L = h.L, Lp = h.Lp;
  float* s = fs;  // (L, Lp): S off the register path
  float* out = s + L * Lp;  // (L, Dp)
  uint32_t* qw = ws;  // (L, Dw)
  uint32_t* ktw = qw + L * h.Dw;  // (Dw16, Lp): k's rows as word columns
  uint32_t* pw = ktw + h.Dw16 * Lp;  // (L, Lw)
  uint32_t* vw = pw + L * h.Lw;  // (Lw, Dp)
  rows_as_words(q, ld, L, h.D, qw);
  rows_as_word_columns(k, ld, L, h.D, Lp, ktw);
  if (h.nl <= 4) {  // P = softmax(scale * q k^T) and its words
    softmax_panel(h, qw, ktw, causal, scale, p, pw);
  } else {  // rows too long for registers: S in scratch first
    pair_products(L, h.nl, qw, h.Dw, 1, ktw, Lp, h.Dw, scale, s, Lp);
    for (int64_t i = 0; i < L; ++i) {
      const int64_t n = causal ? i + 1 : L;
      softmax_lanes<float, 0>(reinterpret_cast<FloatLanes*>(s + i * Lp), (n + W - 1) / W, n, L, p + i * L);
    }
    rows_as_words(p, L, L, L, pw);
  }
  row_pairs_as_words(v, ld, L, h.D, h.Dp, vw);
  float* c = h.D == h.Dp ? ctx : out;
  pair_products(L, h.Dp / W, pw, h.Lw, 1, vw, h.Dp, h.Lw, 1.0f, c, h.D == h.Dp ? ldc : h.Dp,
                causal ? Terms::UpToRow : Terms::All);  // ctx = P v
  if (c == out) unpad_rows(out, h.Dp, L, h.D, ctx, ldc);
}
std::pair<int64_t, int64_t> forward_scratch(const Head& h) {  // floats, words
  return {h.L * h.Lp + h.L * h.Dp, h.L * h.Dw + h.Dw16 * h.Lp + h.L * h.Lw + h.Lw * h.Dp};
}

// ---- backward ----

// Rows i0..i0+R of dS = P * (dP - rowsum(dP * P)) (i0 even), the R x NV block of dP = dctx v^T
// summed in registers and turned into dS there, stored only as the products read it: its rows as
// words (sw, rows Lw apart) and its pairs of rows interleaved (stw, dS^T's k pairs, rows Lp
// apart), and P's pairs of rows the same way (ptw), from the rows it loads (NV vectors span the
// keys these rows see: all L, or causal, i0 + R; the words past them zero up to nl vectors).
template <int R, int NV>
[[gnu::noinline]] void softmax_backward_tile(const Head& h, const uint32_t* gw, const uint32_t* vtw, const float* p,
                                             int64_t i0, bool causal, uint32_t* sw, uint32_t* stw, uint32_t* ptw) {
  FloatLanes acc[R][NV];
  pair_accumulate<R, NV>(gw, h.Dw, 1, vtw, h.Lp, h.Dw, acc);
#pragma GCC unroll 8
  for (int r = 0; r < R; r += 2) {  // a pair of rows (the second zero past R)
    FloatLanes pr[2][NV];
#pragma GCC unroll 2
    for (int e = 0; e < 2; ++e) {
      if (r + e >= R) {
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) pr[e][v] = FloatLanes{};
        continue;
      }
      const int64_t n = causal ? i0 + r + e + 1 : h.L;
      const float* pi = p + (r + e) * h.L;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) pr[e][v] = v + 2 < NV ? load_lanes(pi + v * W) : load_prefix(pi, v, n);
      const float sd = row_dot<float, NV>(acc[r + e], pr[e], NV, n);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r + e][v] = pr[e][v] * (acc[r + e][v] - sd);
      store_row_words<NV>(acc[r + e], h.Lw, sw + (r + e) * h.Lw);
      for (int64_t c = (NV + 1) / 2 * 16; c < h.Lw; c += 16)
        _mm512_mask_storeu_epi32(sw + (r + e) * h.Lw + c, first_n(h.Lw - c), __m512i{});
    }
    uint32_t* st = stw + (i0 + r) / 2 * h.Lp;
    uint32_t* pt = ptw + (i0 + r) / 2 * h.Lp;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      _mm512_storeu_si512(st + v * W, interleaved(acc[r][v], r + 1 < R ? acc[r + 1][v] : FloatLanes{}));
      _mm512_storeu_si512(pt + v * W, interleaved(pr[0][v], pr[1][v]));
    }
    for (int64_t v = NV; v < h.nl; ++v) {
      _mm512_storeu_si512(st + v * W, __m512i{});
      _mm512_storeu_si512(pt + v * W, __m512i{});
    }
  }
}

// dS's and P's words for rows of nl <= 4 vectors: tiles of 4 rows, then 2, then 1 (each tile
// starts at an even row).
void softmax_backward_panel(const Head& h, const uint32_t* gw, const uint32_t* vtw, const float* p, bool causal,
                            uint32_t* sw, uint32_t* stw, uint32_t* ptw) {
  for_each_row_block(h.L, [&](auto r, int64_t i) {
    constexpr int R = decltype(r)::value;
    with_vectors(h.seen(causal, i + R), [&](auto nv) {
      softmax_backward_tile<R, decltype(nv)::value>(h, gw + i * h.Dw, vtw, p + i * h.L, i, causal, sw + i * h.Lw, stw,
                                                    ptw);
    });
  });
}

// One head: q, k, v (L, D) rows ld apart, g = dctx (L, D) rows ldg apart, p (L, L) ->
// dq, dk, dv (L, D) rows ld apart.
void backward_head(const Head& h, const float* q, const float* k, const float* v, int64_t ld, const float* g,
                   int64_t ldg, const float* p, float scale, bool causal, float* dq, float* dk, float* dv, float* fs,
                   uint32_t* ws) {
  const int64_t L = h.L, Lp = h.Lp, Dp = h.Dp, Lw = h.Lw;
  float* ds = fs;  // (L, Lp): dP, then dS, off the register path
  float* pp = ds + L * Lp;  // (Lp): one row of P, off the register path
  float* out = pp + Lp;  // (L, Dp)
  uint32_t* gw = ws;  // (L, Dw): dctx's rows as words
  uint32_t* vtw = gw + L * h.Dw;  // (Dw16, Lp): v's rows as word columns
  uint32_t* sw = vtw + h.Dw16 * Lp;  // (L, Lw): dS's rows as words
  uint32_t* stw = sw + L * Lw;  // (Lw, Lp): dS's pairs of rows
  uint32_t* ptw = stw + Lw * Lp;  // (Lw, Lp): P's pairs of rows
  uint32_t* kw = ptw + Lw * Lp;  // (Lw, Dp) each: k's, q's and dctx's pairs of rows
  uint32_t* qw = kw + Lw * Dp;
  uint32_t* gpw = qw + Lw * Dp;
  rows_as_words(g, ldg, L, h.D, gw);
  rows_as_word_columns(v, ld, L, h.D, Lp, vtw);
  if (h.nl <= 4) {  // dS = P * (dP - rowsum(dP * P)), dP = dctx v^T, and the words of dS and P
    softmax_backward_panel(h, gw, vtw, p, causal, sw, stw, ptw);
  } else {  // rows too long for registers: dP in scratch first, as attention_backward.cpp
    pair_products(L, h.nl, gw, h.Dw, 1, vtw, Lp, h.Dw, 1.0f, ds, Lp);
    for (int64_t i = 0; i < L; ++i) {
      const int64_t n = causal ? i + 1 : L, nv = (n + W - 1) / W;
      FloatLanes* pr = reinterpret_cast<FloatLanes*>(pp);
      FloatLanes* dr = reinterpret_cast<FloatLanes*>(ds + i * Lp);
      for (int64_t c = 0; c < nv; ++c)
        pr[c] = c + 1 < nv ? load_lanes(p + i * L + c * W) : load_prefix(p + i * L, c, n);
      const float sd = row_dot<float, 0>(dr, pr, nv, n);
      for (int64_t c = 0; c < nv; ++c) dr[c] = pr[c] * (dr[c] - sd);
      for (int64_t c = nv; c < h.nl; ++c) dr[c] = FloatLanes{};
    }
    rows_as_words(ds, Lp, L, L, sw);
    row_pairs_as_words(ds, Lp, L, L, Lp, stw);
    row_pairs_as_words(p, L, L, L, Lp, ptw);
  }
  row_pairs_as_words(k, ld, L, h.D, Dp, kw);
  row_pairs_as_words(q, ld, L, h.D, Dp, qw);
  row_pairs_as_words(g, ldg, L, h.D, Dp, gpw);
  // result (L, D) = alpha * A · B, straight into dst when D is whole vectors
  auto result = [&](const uint32_t* A, int64_t ars, int64_t aks, const uint32_t* B, float alpha, Terms terms,
                    float* dst) {
    float* c = h.D == Dp ? dst : out;
    pair_products(L, Dp / W, A, ars, aks, B, Dp, Lw, alpha, c, h.D == Dp ? ld : Dp, terms);
    if (c == out) unpad_rows(out, Dp, L, h.D, dst, ld);
  };
  const Terms lower = causal ? Terms::UpToRow : Terms::All, upper = causal ? Terms::FromRow : Terms::All;
  result(sw, Lw, 1, kw, scale, lower, dq);  // dq = scale * dS k
  result(stw, 1, Lp, qw, scale, upper, dk);  // dk = scale * dS^T q
  result(ptw, 1, Lp, gpw, 1.0f, upper, dv);  // dv = P^T dctx
}
std::pair<int64_t, int64_t> backward_scratch(const Head& h) {  // floats, words
  return {h.L * h.Lp + h.Lp + h.L * h.Dp, h.L * h.Dw + h.Dw16 * h.Lp + h.L * h.Lw + 2 * h.Lw * h.Lp + 3 * h.Lw * h.Dp};
}

// f(head, t, floats, words) for each (b, h) pair t = b * H + h, one task each, with this thread's
// scratch (sized by scratch(head): floats, words); nothing for an empty head.
template <class Scratch, class F>
void for_each_head(int64_t B, int64_t L, int64_t H, int64_t D, Scratch&& scratch, F&& f) {
  if (L == 0 || D == 0) return;
  const Head h(L, D);
  const std::pair<int64_t, int64_t> need = scratch(h);  // floats, words
  parallel_for(B * H, 1, [&](int64_t t0, int64_t t1) {
    float* fs = thread_scratch<float>(need.first);
    uint32_t* ws = thread_scratch<uint32_t>(need.second);
    for (int64_t t = t0; t < t1; ++t) f(h, t, fs, ws);
  });
}

}  // namespace

bool packed_attention_bf16_supported() { return cpu_has_avx512_bf16(); }

bool packed_attention_forward_bf16(const float* qkv, int64_t B, int64_t L, int64_t H, int64_t D, float scale, float* P,
                                   float* ctx, bool causal) {
  if (!packed_attention_bf16_supported()) return false;
  const int64_t E = H * D, ld = 3 * E;
  for_each_head(B, L, H, D, forward_scratch, [&](const Head& h, int64_t t, float* fs, uint32_t* ws) {
    const float* q = qkv + head_offset(t, H, L, D, ld);
    if (t + 1 < B * H) prefetch_qkv(qkv + head_offset(t + 1, H, L, D, ld), ld, E, L, D);  // the next head's
    forward_head(h, q, q + E, q + 2 * E, ld, scale, causal, P + t * L * L, ctx + head_offset(t, H, L, D, E), E, fs, ws);
  });
  return true;
}

bool packed_attention_backward_bf16(const float* qkv, const float* P, const float* dctx, int64_t B, int64_t L,
                                    int64_t H, int64_t D, float scale, float* dqkv, bool causal) {
  if (!packed_attention_bf16_supported()) return false;
  const int64_t E = H * D, ld = 3 * E;
  for_each_head(B, L, H, D, backward_scratch, [&](const Head& h, int64_t t, float* fs, uint32_t* ws) {
    const float* q = qkv + head_offset(t, H, L, D, ld);
    float* dq = dqkv + head_offset(t, H, L, D, ld);
    if (t + 1 < B * H) {  // the next head's q, k, v and dctx
      prefetch_qkv(qkv + head_offset(t + 1, H, L, D, ld), ld, E, L, D);
      prefetch_rows(dctx + head_offset(t + 1, H, L, D, E), E, L, D);
    }
    backward_head(h, q, q + E, q + 2 * E, ld, dctx + head_offset(t, H, L, D, E), E, P + t * L * L, scale, causal, dq,
                  dq + E, dq + 2 * E, fs, ws);
  });
  return true;
}
#else
// Built for a CPU without AVX512_BF16 (MINIDL_NATIVE on one, or MINIDL_ARCH below it): the callers
// take the float32 kernels.
bool packed_attention_bf16_supported() { return false; }
bool packed_attention_forward_bf16(const float*, int64_t, int64_t, int64_t, int64_t, float, float*, float*, bool) {
  return false;
}
bool packed_attention_backward_bf16(const float*, const float*, const float*, int64_t, int64_t, int64_t, int64_t, float,
                                    float*, bool) {
  return false;
}
#endif

}  // namespace minidl::kernels::cpu
