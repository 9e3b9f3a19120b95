// kernels/cpu/gemm_bf16_amx.cpp — bfloat16 x bfloat16 -> float32 GEMM on AMX tiles (gemm_bf16.h),
// compiled for AMX-BF16 whatever the build's -march and used only where the CPU has it and Linux
// grants the process its tile state (both checked once at run time).
//
// AMX adds eight 1 KB tile registers and one instruction that matters here: tdpbf16ps multiplies
// a 16x32 bf16 tile of A by a 32x16 bf16 tile of B (stored as 16 rows of 16 k-pair words, the
// layout gemm_bf16_pack.h packs) and adds the products, two at a time, into a 16x16 float32 tile
// of C: 8192 multiply-adds per instruction, where one AVX-512 FMA does 16.
//
// The structure is the AVX512_BF16 kernel's (gemm_bf16.cpp), with tiles for registers:
//
//   for each block of up to kNc columns of C (jc):
//     for each block of K (pc, sizes fixed by K alone; padded with zeros to whole 32-k steps):
//       pack op(B) (kc, nc) into panels of 32 columns, each (kc / 2, 32) k pairs
//       in parallel over blocks of rows of C (mc rows each):
//         pack op(A) (mc, kc) into 16x32 tiles, each 1 KB contiguous (or, where op(A) is A
//         itself and the block holds whole tiles, read A's rows in place)
//         for each B panel, for each 32 rows of the A block: the 32x32 micro-kernel
//
// The micro-kernel keeps a 32x32 block of C in four tiles (0-3) over the K block, loads two A
// tiles (4, 5) and two B tiles (6, 7) per 32 k and issues four tdpbf16ps; then stores the four
// tiles to a buffer and adds them into C (alpha, beta) with the AVX512_BF16 kernel's rule — or,
// for a whole block of C that is just the sums (the first K block, alpha 1, beta 0), straight
// into C. Rows and columns past C's edge are computed on zeros and not stored.
// Its sums differ from the reference's as the AVX512_BF16 kernel's do (pairs of products, one
// partial sum per K block, subnormal inputs and results treated as zero), and from that kernel's
// own by the order inside a tile product: the same tolerances hold (tests/kernels/
// test_cpu_gemm_bf16.cpp runs both kernels' tests). Threads split blocks of C's rows; a small C
// over many K blocks (a weight gradient) is split over its K blocks instead (split_k_gemm, on
// kernels/cpu/split_over_k.h's schedule), whose partial products are then added in K order:
// bit-identical for any thread count. GFLOP/s:
// `bench_gemm bf16` (examples/bench_gemm.cpp).
#include <algorithm>

#include "minidl/kernels/cpu/aligned_buffer.h"
#include "minidl/kernels/cpu/amx_tiles.h"
#include "minidl/kernels/cpu/cpu_features.h"
#include "minidl/kernels/cpu/gemm_bf16.h"
#include "minidl/kernels/cpu/gemm_bf16_pack.h"
#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/cpu/split_over_k.h"

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define MINIDL_HAVE_AMX_KERNEL 1
#endif

namespace minidl::kernels::cpu {

#ifdef MINIDL_HAVE_AMX_KERNEL
namespace {

using namespace bf16_pack;
using amx::configure_tiles;
using amx::release_tiles;

constexpr int64_t kTileK = 32;  // k per A tile row (32 bf16 = 64 bytes); a B tile holds 16 pairs
constexpr int64_t kTileWords = 256;  // one tile: 16 rows x 16 words of 32 bits
constexpr int64_t kMr = 32;  // rows of C per micro-kernel: two 16-row A tiles
constexpr int64_t kNr = kPanelCols;  // columns of C per micro-kernel: two 16-column B tiles
constexpr int64_t kKcMax = 512;  // K blocks: a B panel (256 pairs x 32 columns, 32 KB) stays in L1
constexpr int64_t kNc = 4096;  // columns of C per packed B block (bounds the B buffer to 4 MB)
constexpr int64_t kMcMax = 8 * kMr;  // rows of C per unit of parallel work (an A block of 256 KB)
constexpr int64_t kSplitBytes = int64_t(4) << 20;  // split_k_gemm's partial products at most

inline __mmask32 first_n16(int64_t n) {  // the first n of 32 16-bit lanes
  return n >= 32 ? ~__mmask32(0) : n <= 0 ? __mmask32(0) : static_cast<__mmask32>((1u << n) - 1);
}

// Rows i0..i0+rows-1 (rows <= 16) of op(A), columns k0..k0+kc-1, as ks = ceil(kc / 32) tiles: tile
// s at dst + s * kTileWords, its row r the 32 values k0 + 32s .. k0 + 32s + 31 of row i0 + r (16
// pair words); rows past `rows` and k past kc zero. op(A)(i, k) = A[i * lda + k], or A[k * lda + i]
// when trans_a. sums (trans_a only; or null): the rows' sums so far, to which the sums of their kc
// values (from zero, in k order) are added.
MINIDL_AMX_TARGET void pack_a_tiles(const uint16_t* A, int64_t lda, bool trans_a, int64_t i0, int64_t rows, int64_t k0,
                                    int64_t kc, int64_t ks, uint32_t* dst, double* sums = nullptr) {
  if (!trans_a) {  // each row's k are contiguous: one masked 64-byte copy per tile row
    for (int64_t r = 0; r < 16; ++r) {
      const uint16_t* row = r < rows ? A + (i0 + r) * lda + k0 : nullptr;
      for (int64_t s = 0; s < ks; ++s) {
        const __m512i v =
            row ? _mm512_maskz_loadu_epi16(first_n16(kc - s * kTileK), row + s * kTileK) : _mm512_setzero_si512();
        _mm512_store_si512(dst + s * kTileWords + r * 16, v);
      }
    }
    return;
  }
  // each k holds the rows' values side by side: 16 pair words across the rows per 2 k, then a
  // 16x16 transpose turns 16 such (one tile's k) into the tile's rows
  PairSums row_sums{};  // this K block's sums, from zero
  for (int64_t s = 0; s < ks; ++s) {
    __m512i v[16];
    for (int64_t q = 0; q < 16; ++q) {
      const int64_t k = s * kTileK + 2 * q;  // within the block
      v[q] = k < kc ? pair_rows(A + (k0 + k) * lda + i0, k + 1 < kc ? A + (k0 + k + 1) * lda + i0 : nullptr, rows)
                    : _mm512_setzero_si512();
      if (sums && k < kc) add_pairs(row_sums, v[q]);
    }
    store_transposed_16x16(v, dst + s * kTileWords, 16, __mmask16(0xFFFF));
  }
  if (sums) add_pair_sums(row_sums, sums, rows);
}

// C (mr <= 32, nr <= 32) = alpha * the 32x32 product of two A tile rows a0, a1 (ks tiles each: tile
// s at a + s * a_step values, its rows a_ld bytes apart) and a B panel b (ks * 16 pairs, 32 columns)
// [+ beta * C on the first K block, or + C on the others]. With bias (the panel's 32 values), the
// first K block's sums start from it: its tiles load the bias row 16 times (a zero row stride).
// With round, C is stored rounded to bfloat16 precision.
MINIDL_AMX_TARGET void micro_kernel(int64_t ks, const uint16_t* a0, const uint16_t* a1, int64_t a_ld, int64_t a_step,
                                    const uint32_t* b, float* c, int64_t ldc, int64_t mr, int64_t nr, bool first,
                                    float alpha, float beta, const float* bias, bool round) {
  if (first && bias) {
    _tile_loadd(0, bias, 0);
    _tile_loadd(1, bias + 16, 0);
    _tile_loadd(2, bias, 0);
    _tile_loadd(3, bias + 16, 0);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int64_t s = 0; s < ks; ++s) {
    _tile_loadd(4, a0 + s * a_step, a_ld);
    _tile_loadd(5, a1 + s * a_step, a_ld);
    _tile_loadd(6, b + s * 16 * kNr, kNr * 4);
    _tile_loadd(7, b + s * 16 * kNr + 16, kNr * 4);
    _tile_dpbf16ps(0, 4, 6);  // C rows 0-15, columns 0-15
    _tile_dpbf16ps(1, 4, 7);  // rows 0-15, columns 16-31
    _tile_dpbf16ps(2, 5, 6);  // rows 16-31, columns 0-15
    _tile_dpbf16ps(3, 5, 7);  // rows 16-31, columns 16-31
  }
  if (first && beta == 0.0f && alpha == 1.0f && !round && mr == kMr && nr == kNr) {  // C = the sums: tiles to C
    _tile_stored(0, c, ldc * 4);
    _tile_stored(1, c + 16, ldc * 4);
    _tile_stored(2, c + 16 * ldc, ldc * 4);
    _tile_stored(3, c + 16 * ldc + 16, ldc * 4);
    return;
  }
  alignas(64) float out[kMr * kNr];  // the 32x32 block, row-major
  _tile_stored(0, out, kNr * 4);
  _tile_stored(1, out + 16, kNr * 4);
  _tile_stored(2, out + 16 * kNr, kNr * 4);
  _tile_stored(3, out + 16 * kNr + 16, kNr * 4);
  const __mmask16 m0 = first_n(nr), m1 = first_n(nr - 16);
  for (int64_t r = 0; r < mr; ++r) {
    add_into_c(_mm512_load_ps(out + r * kNr), c + r * ldc, m0, first, alpha, beta, round);
    if (m1) add_into_c(_mm512_load_ps(out + r * kNr + 16), c + r * ldc + 16, m1, first, alpha, beta, round);
  }
}

// One B panel of a K block (pc, kc): pack_b_panel, then zeros in the pairs past kc up to whole tiles.
void pack_b_tiles(const uint16_t* B, int64_t ldb, bool trans_b, int64_t j0, int64_t nr, int64_t pc, int64_t kc,
                  uint32_t* panel) {
  const int64_t ks = (kc + kTileK - 1) / kTileK;
  pack_b_panel(B, ldb, trans_b, j0, nr, pc, kc, panel);
  std::fill(panel + (kc + 1) / 2 * kNr, panel + ks * 16 * kNr, 0u);
}

// Rows i0 .. i0 + m - 1 of C for one K block (pc, kc), against n_panels packed B panels (bp,
// panel_step words apart; panel p holds columns 32p .. of the block, at most nc - 32p of them): op(A)'s
// rows are read in place where they hold whole 32-k steps and the block whole 32-row blocks,
// otherwise packed into tiles at ap (zeros past its edges; their row sums added to sums, if any);
// then the micro-kernel for each panel and each 32 rows. c and bias (or null) start at the block's
// first column; first, alpha, beta and round as micro_kernel takes them.
void block_products(const uint16_t* A, int64_t lda, bool trans_a, int64_t i0, int64_t m, int64_t pc, int64_t kc,
                    const uint32_t* bp, int64_t panel_step, int64_t n_panels, int64_t nc, uint32_t* ap, double* sums,
                    float* c, int64_t ldc, bool first, float alpha, float beta, const float* bias, bool round) {
  const int64_t ks = (kc + kTileK - 1) / kTileK, m_tiles = (m + kMr - 1) / kMr * 2;
  const bool in_place = !trans_a && kc % kTileK == 0 && m % kMr == 0;
  if (!in_place)
    for (int64_t t = 0; t < m_tiles; ++t)
      pack_a_tiles(A, lda, trans_a, i0 + 16 * t, std::clamp<int64_t>(m - 16 * t, 0, 16), pc, kc, ks,
                   ap + t * ks * kTileWords, sums && 16 * t < m ? sums + 16 * t : nullptr);
  const int64_t a_ld = in_place ? lda * 2 : 64, a_step = in_place ? kTileK : 2 * kTileWords;
  for (int64_t p = 0; p < n_panels; ++p) {
    const int64_t j = p * kNr, nr = std::min(kNr, nc - j);
    for (int64_t q = 0; q < m_tiles / 2; ++q) {
      const int64_t i = q * kMr, mr = std::min(kMr, m - i);
      const uint16_t* a0 =
          in_place ? A + (i0 + i) * lda + pc : reinterpret_cast<const uint16_t*>(ap + 2 * q * ks * kTileWords);
      const uint16_t* a1 = in_place ? a0 + 16 * lda : a0 + 2 * ks * kTileWords;
      micro_kernel(ks, a0, a1, a_ld, a_step, bp + p * panel_step, c + i * ldc + j, ldc, mr, nr, first, alpha, beta,
                   bias ? bias + j : nullptr, round);
    }
  }
}

// K blocks of equal size (the last may be shorter), chosen from K alone, each padded to ks whole
// 32-k steps.
struct KBlocks {
  int64_t count, step;
  explicit KBlocks(int64_t K)
      : count((K + kKcMax - 1) / kKcMax), step(((K + count - 1) / count + kTileK - 1) / kTileK * kTileK) {}
};

// The product split over its K blocks (kernels/cpu/split_over_k.h), as packed_gemm chooses it
// with more than one thread for a small C over many K blocks: on one thread the partial products
// only add memory traffic (15-20% slower on the vit's weight gradients); on two, where the loop
// below would pack B and wake the threads once per K block for a few microseconds of products, it
// ran them 1.3-2x faster. Run 0 goes into C as the loop would (alpha, beta and the bias with its
// first block); the later blocks' partials are the micro-kernel's sums with alpha 1 and no bias,
// their row sums (pack_a_tiles, from zero) partial sums of their own.
void split_k_gemm(const KBlocks& kb, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool trans_a,
                  const uint16_t* B, int64_t ldb, bool trans_b, float* C, int64_t ldc, float alpha, float beta,
                  const float* bias, bool round, double* row_sums) {
  const int64_t n_panels = (N + kNr - 1) / kNr, nc = n_panels * kNr;  // partial rows: whole panels
  const int64_t panel_words = kb.step / kTileK * 16 * kNr;
  const std::vector<float> bias_cols = padded_bias(bias, N, nc);
  SplitOverK split(kb.count, M, nc, row_sums ? M : 0);
  split(
      [&](int64_t t, int64_t q0, int64_t q1) {
        configure_tiles();
        thread_local AlignedBuffer<uint32_t> b_buffer, a_buffer;
        uint32_t* bp = b_buffer.get(static_cast<size_t>(n_panels * panel_words));
        uint32_t* ap = a_buffer.get(static_cast<size_t>((M + kMr - 1) / kMr * 2 * (kb.step / kTileK) * kTileWords));
        for (int64_t q = q0; q < q1; ++q) {
          const int64_t pc = q * kb.step, kc = std::min(kb.step, K - pc), r = q - split.first_run;
          for (int64_t p = 0; p < n_panels; ++p)
            pack_b_tiles(B, ldb, trans_b, p * kNr, std::min(kNr, N - p * kNr), pc, kc, bp + p * panel_words);
          if (t == 0)
            block_products(A, lda, trans_a, 0, M, pc, kc, bp, panel_words, n_panels, N, ap, row_sums, C, ldc, q == 0,
                           alpha, beta, bias ? bias_cols.data() : nullptr, false);
          else
            block_products(A, lda, trans_a, 0, M, pc, kc, bp, panel_words, n_panels, nc, ap, split.partial_sums(r),
                           split.partial(r), nc, true, 1.0f, 0.0f, nullptr, false);
        }
        release_tiles();
      },
      [&](int64_t i, const float* partial_row) {
        add_partials(partial_row, split.partial_step(), split.partials(), N, C + i * ldc, alpha, round);
        if (row_sums) split.add_row_sums(i, row_sums);
      });
}

// row_sums: null, or M doubles (zero) that get the row sums of op(A) (trans_a only), added up
// while the first block of columns packs A.
void packed_gemm(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool trans_a, const uint16_t* B,
                 int64_t ldb, bool trans_b, float* C, int64_t ldc, float alpha, float beta, const float* bias,
                 bool round, double* row_sums = nullptr) {
  const KBlocks kb(K);
  const int64_t n_padded = (N + kNr - 1) / kNr * kNr;  // whole panels
  if (split_over_k_pays(M, n_padded, kb.count, kMcMax, kNc, kSplitBytes))
    return split_k_gemm(kb, M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, alpha, beta, bias, round, row_sums);
  const std::vector<float> bias_cols = padded_bias(bias, N, n_padded);
  const int64_t kc_step = kb.step;
  // Rows of C per unit of work: whole 32-row blocks, at most kMcMax, about 4 units when M is small.
  const int64_t mc = std::clamp<int64_t>(((M + 3) / 4 + kMr - 1) / kMr * kMr, kMr, kMcMax);
  const int64_t m_blocks = (M + mc - 1) / mc;
  thread_local AlignedBuffer<uint32_t> b_buffer;
  for (int64_t jc = 0; jc < N; jc += kNc) {
    const int64_t nc = std::min(kNc, N - jc), n_panels = (nc + kNr - 1) / kNr;
    for (int64_t pc = 0; pc < K; pc += kc_step) {
      const int64_t kc = std::min(kc_step, K - pc), ks = (kc + kTileK - 1) / kTileK;
      const int64_t panel_words = ks * 16 * kNr;
      uint32_t* bp = b_buffer.get(static_cast<size_t>(n_panels * panel_words));
      parallel_for(n_panels, std::max<int64_t>(1, 8192 / panel_words), [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p)
          pack_b_tiles(B, ldb, trans_b, jc + p * kNr, std::min(kNr, nc - p * kNr), pc, kc, bp + p * panel_words);
      });
      parallel_for(m_blocks, 1, [&](int64_t b0, int64_t b1) {
        configure_tiles();
        thread_local AlignedBuffer<uint32_t> a_buffer;
        const int64_t row_tiles = mc / 16;  // 16-row tile rows per A block
        uint32_t* ap = a_buffer.get(static_cast<size_t>(row_tiles * ks * kTileWords));
        for (int64_t blk = b0; blk < b1; ++blk) {
          const int64_t i0 = blk * mc;
          block_products(A, lda, trans_a, i0, std::min(mc, M - i0), pc, kc, bp, panel_words, n_panels, nc, ap,
                         row_sums && jc == 0 ? row_sums + i0 : nullptr, C + i0 * ldc + jc, ldc, pc == 0, alpha, beta,
                         bias ? bias_cols.data() + jc : nullptr, round && pc + kc == K);
        }
        release_tiles();
      });
    }
  }
}

}  // namespace

bool gemm_bf16_amx_supported() {
  static const bool have = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const bool amx_bf16 = edx & (1u << 22), amx_tile = edx & (1u << 24);  // CPUID.(7, 0):EDX
    if (!cpu_allows_amx() || !amx_bf16 || !amx_tile || !cpu_has_avx512_bf16()) return false;
    // Linux hands out the 8 KB tile state only on request (Documentation/arch/x86/xstate.rst).
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return have;
}

bool gemm_bf16_amx(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool trans_a, const uint16_t* B,
                   int64_t ldb, bool trans_b, float* C, int64_t ldc, float alpha, float beta, bool round_bf16) {
  if (!gemm_bf16_amx_supported()) return false;
  if (!finish_trivial_product(M, N, K, alpha, beta, nullptr, C, ldc, round_bf16))
    packed_gemm(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, alpha, beta, nullptr, round_bf16);
  return true;
}

bool gemm_bf16_amx_row_sums(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool trans_a,
                            const uint16_t* B, int64_t ldb, bool trans_b, float* C, int64_t ldc, float* row_sums) {
  return gemm_bf16_amx_supported() && product_with_row_sums(trans_a, M, N, K, row_sums, [&](double* sums) {
           packed_gemm(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, 1.0f, 0.0f, nullptr, false, sums);
         });
}

bool gemm_bf16_amx_bias(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool trans_a,
                        const uint16_t* B, int64_t ldb, bool trans_b, const float* bias, float* C, int64_t ldc,
                        bool round_bf16) {
  if (!gemm_bf16_amx_supported()) return false;
  if (!finish_trivial_product(M, N, K, 1.0f, 0.0f, bias, C, ldc, round_bf16))
    packed_gemm(M, N, K, A, lda, trans_a, B, ldb, trans_b, C, ldc, 1.0f, 0.0f, bias, round_bf16);
  return true;
}
#else
bool gemm_bf16_amx_supported() { return false; }

bool gemm_bf16_amx(int64_t, int64_t, int64_t, const uint16_t*, int64_t, bool, const uint16_t*, int64_t, bool, float*,
                   int64_t, float, float, bool) {
  return false;
}

bool gemm_bf16_amx_bias(int64_t, int64_t, int64_t, const uint16_t*, int64_t, bool, const uint16_t*, int64_t, bool,
                        const float*, float*, int64_t, bool) {
  return false;
}

bool gemm_bf16_amx_row_sums(int64_t, int64_t, int64_t, const uint16_t*, int64_t, bool, const uint16_t*, int64_t, bool,
                            float*, int64_t, float*) {
  return false;
}
#endif

}  // namespace minidl::kernels::cpu
