// kernels/cpu/conv2d_bf16_implicit.cpp — stride-1 convolution of bfloat16 operands on AMX tiles as
// an implicit GEMM (conv2d_bf16.h): no im2col matrix. Per image:
//
//   The input is zero-padded and flattened: pixel q = h * Wp + w of the padded image (Wp = W + 2
//   pad_w), so output (oh, ow) is position q = oh * Wp + ow and its tap (kh, kw) reads padded pixel
//   q + kh * dil_h * Wp + kw * dil_w — one offset per tap for every output. Positions with ow >=
//   W_out (the rows' padding) are computed and dropped.
//   forward:  y[o, q] = sum over taps t, channels c of w[o, c, t] x[c, q + off_t]: for each tap a
//             product of a (O, C) weight slice and (C, 16 positions) of the input, read from a
//             channel-pair-interleaved copy of the padded image at offset off_t. A tiles are the
//             weights (packed once per call), B tiles 16 channel pairs x 16 positions, C tiles
//             (16 output channels, 16 positions) stored straight into a (O, positions) buffer.
//   dx:       the same kernel on dy, with the weights flipped and transposed and padding
//             dil (k - 1) - pad: the input gradient of a stride-1 convolution is a convolution.
//   dw:       dw[o, c, t] = sum over images of a block, positions q of dy[o, q] x[c, q + off_t]: A
//             tiles 16 output channels x 32 positions of dy (zero at the dropped positions), B tiles
//             16 position pairs x 16 channels of a pixel-pair-interleaved copy of the padded image
//             (two copies: pairs starting at even and at odd pixels, for even and odd offsets).
//
// All sums are float32 in the tiles (tdpbf16ps: pairs of products), one per output over all its
// taps and channels; the weight gradient sums its images in conv2d's fixed blocks (depending on N
// alone), added in order, so nothing depends on the thread count. Tested against the float32
// im2col reference on the widened operands (tests/kernels/test_cpu_conv_bf16.cpp).
#include <algorithm>
#include <vector>

#include "minidl/kernels/cpu/aligned_buffer.h"
#include "minidl/kernels/cpu/amx_tiles.h"
#include "minidl/kernels/cpu/bf16_round_avx512.h"
#include "minidl/kernels/cpu/conv2d_bf16.h"
#include "minidl/kernels/cpu/gemm_bf16.h"
#include "minidl/kernels/cpu/gemm_bf16_pack.h"
#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/cpu/reduce.h"

namespace minidl::kernels::cpu {

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
namespace {

using namespace bf16_pack;

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// The flattened padded image of one stride-1 convolution (input H x W, padding, dilated kernel).
struct Flat {
  int64_t Wp;  // padded row width
  int64_t Q;  // output positions computed: H_out rows of Wp
  int64_t Qp;  // Q rounded up to whole 32-position blocks
  int64_t QQ;  // padded pixels stored, with the slack the last block's farthest tap reads (a multiple of 32)
  std::vector<int64_t> tap;  // offset of each tap (kh, kw), kh-major
  Flat(int64_t H, int64_t W, int64_t kH, int64_t kW, int64_t pad_h, int64_t pad_w, int64_t dil_h, int64_t dil_w,
       int64_t H_out) {
    Wp = W + 2 * pad_w;
    Q = H_out * Wp;
    Qp = round_up(Q, 32);
    for (int64_t kh = 0; kh < kH; ++kh)
      for (int64_t kw = 0; kw < kW; ++kw) tap.push_back(kh * dil_h * Wp + kw * dil_w);
    QQ = round_up(std::max((H + 2 * pad_h) * Wp, Qp + tap.back() + 2), 32);
  }
};

// rows (rows, W) of bf16 -> dst rows ld apart, 16 values a masked store: rows are short (a feature
// map's width), where a memcpy call per row costs more than the copy.
MINIDL_BF16_TARGET void copy_rows(const uint16_t* src, int64_t rows, int64_t W, uint16_t* dst, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r, src += W, dst += ld)
    for (int64_t w0 = 0; w0 < W; w0 += 16) {
      const __mmask16 m = first_n(W - w0);
      _mm256_mask_storeu_epi16(dst + w0, m, _mm256_maskz_loadu_epi16(m, src + w0));
    }
}

// flat (C, QQ + 32): each channel's padded image, flattened. Only the image's pixels are written:
// the zeros around and past them are the caller's, written once per call (every image of the call
// has the same geometry, so they stay zero).
void fill_flat(const uint16_t* x, int64_t C, int64_t H, int64_t W, int64_t pad_h, int64_t pad_w, const Flat& f,
               uint16_t* flat) {
  const int64_t stride = f.QQ + 32;
  for (int64_t c = 0; c < C; ++c) copy_rows(x + c * H * W, H, W, flat + c * stride + pad_h * f.Wp + pad_w, f.Wp);
}

// pairs (Cp / 2, QQ) words: pairs[p][q] = (x[2p] at padded pixel q, x[2p + 1] there), zero past C
// and at the padding — the forward's B operand (16 channel pairs x 16 positions per tile), built
// straight from the image. Only the pixels are written; the zeros are the caller's, as fill_flat's.
MINIDL_BF16_TARGET void channel_pairs(const uint16_t* x, int64_t C, int64_t H, int64_t W, int64_t pad_h, int64_t pad_w,
                                      const Flat& f, uint32_t* pairs) {
  for (int64_t p = 0; 2 * p < C; ++p) {
    const uint16_t* a = x + 2 * p * H * W;
    const uint16_t* b = 2 * p + 1 < C ? a + H * W : nullptr;
    uint32_t* row = pairs + p * f.QQ + pad_h * f.Wp + pad_w;
    for (int64_t h = 0; h < H; ++h, row += f.Wp)
      for (int64_t w0 = 0; w0 < W; w0 += 16)
        _mm512_mask_storeu_epi32(row + w0, first_n(W - w0),
                                 pair_rows(a + h * W + w0, b ? b + h * W + w0 : nullptr, W - w0));
  }
}

// out (C_out, H_out, W_out) = the sums' rows (C_out, Qp) without the dropped positions, + bias;
// round: each rounded to bfloat16 precision (kept float32) as it is stored.
MINIDL_BF16_TARGET void store_outputs(const float* sums, int64_t C_out, int64_t H_out, int64_t W_out, const Flat& f,
                                      const float* bias, bool round, float* out) {
  for (int64_t o = 0; o < C_out; ++o) {
    const __m512 b = _mm512_set1_ps(bias ? bias[o] : 0.0f);
    for (int64_t oh = 0; oh < H_out; ++oh) {
      const float* src = sums + o * f.Qp + oh * f.Wp;
      float* dst = out + (o * H_out + oh) * W_out;
      for (int64_t w0 = 0; w0 < W_out; w0 += 16) {
        const __mmask16 m = first_n(W_out - w0);
        const __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, src + w0), b);
        _mm512_mask_storeu_ps(dst + w0, m, round ? round_bf16_ps(v) : v);
      }
    }
  }
}

// pixel pairs (QQ / 2, Cp) words: out[j][c] = (flat[c][2j + odd], flat[c][2j + 1 + odd]), zero past
// C — the weight gradient's B operand (16 position pairs x 16 channels per tile).
MINIDL_BF16_TARGET void pixel_pairs(const uint16_t* flat, int64_t C, int64_t Cp, const Flat& f, int odd,
                                    uint32_t* out) {
  const int64_t stride = f.QQ + 32;
  for (int64_t c0 = 0; c0 < Cp; c0 += 16)
    for (int64_t j0 = 0; j0 < f.QQ / 2; j0 += 16) {
      __m512i v[16];
      for (int64_t i = 0; i < 16; ++i)
        v[i] = c0 + i < C ? _mm512_loadu_si512(flat + (c0 + i) * stride + 2 * j0 + odd) : _mm512_setzero_si512();
      store_transposed_16x16(v, out + j0 * Cp + c0, Cp, __mmask16(0xFFFF));
    }
}

// The A tiles of the forward kernel: for each tap t, 32-channel step s and 16-row block of output
// channels: rows o, 32 bf16 = weight(o, 32 s + i, t), zero past the channels.
template <class Weight>
std::vector<uint16_t> pack_weight_tiles(int64_t taps, int64_t C_in, int64_t C_out, Weight weight) {
  const int64_t S = round_up(C_in, 32) / 32, OT = round_up(C_out, 32) / 16;
  std::vector<uint16_t> tiles(static_cast<size_t>(taps * S * OT * 512), 0);
  for (int64_t t = 0; t < taps; ++t)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t ot = 0; ot < OT; ++ot) {
        uint16_t* tile = tiles.data() + ((t * S + s) * OT + ot) * 512;
        for (int64_t r = 0; r < 16 && ot * 16 + r < C_out; ++r)
          for (int64_t i = 0; i < 32 && 32 * s + i < C_in; ++i) tile[r * 32 + i] = weight(ot * 16 + r, 32 * s + i, t);
      }
  return tiles;
}

// out (C_out, Qp) float32 = the forward sums of one image, from its channel pairs (Cp / 2, QQ) and
// the packed weight tiles; rows past C_out are garbage.
MINIDL_AMX_TARGET void forward_tiles(const uint32_t* pairs, const uint16_t* wt, int64_t Cp, int64_t C_out,
                                     const Flat& f, float* out) {
  const int64_t S = Cp / 32, OT = round_up(C_out, 32) / 16, taps = static_cast<int64_t>(f.tap.size());
  for (int64_t ob = 0; ob < OT / 2; ++ob)
    for (int64_t q0 = 0; q0 < f.Qp; q0 += 32) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t t = 0; t < taps; ++t)
        for (int64_t s = 0; s < S; ++s) {
          const uint16_t* a = wt + ((t * S + s) * OT + 2 * ob) * 512;
          const uint32_t* b = pairs + 16 * s * f.QQ + q0 + f.tap[t];
          _tile_loadd(4, a, 64);
          _tile_loadd(5, a + 512, 64);
          _tile_loadd(6, b, f.QQ * 4);
          _tile_loadd(7, b + 16, f.QQ * 4);
          _tile_dpbf16ps(0, 4, 6);  // output channels 0-15 of the block, positions 0-15
          _tile_dpbf16ps(1, 4, 7);  // channels 0-15, positions 16-31
          _tile_dpbf16ps(2, 5, 6);  // channels 16-31, positions 0-15
          _tile_dpbf16ps(3, 5, 7);  // channels 16-31, positions 16-31
        }
      float* c = out + ob * 32 * f.Qp + q0;
      _tile_stored(0, c, f.Qp * 4);
      _tile_stored(1, c + 16, f.Qp * 4);
      _tile_stored(2, c + 16 * f.Qp, f.Qp * 4);
      _tile_stored(3, c + 16 * f.Qp + 16, f.Qp * 4);
    }
}

// One stride-1 convolution of a batch, (N, C_in, H, W) bf16 -> (N, C_out, H_out, W_out) float32
// (+ bias; rounded to bfloat16 precision where `round`), the weights given as weight(o, c, t).
template <class Weight>
void implicit_conv(const uint16_t* in, int64_t N, int64_t C_in, int64_t H, int64_t W, int64_t kH, int64_t kW,
                   int64_t pad_h, int64_t pad_w, int64_t dil_h, int64_t dil_w, int64_t C_out, int64_t H_out,
                   int64_t W_out, Weight weight, const float* bias, bool round, float* out) {
  const Flat f(H, W, kH, kW, pad_h, pad_w, dil_h, dil_w, H_out);
  const int64_t Cp = round_up(C_in, 32), Op = round_up(C_out, 32);
  const std::vector<uint16_t> wt = pack_weight_tiles(kH * kW, C_in, C_out, weight);
  parallel_for(N, 1, [&](int64_t n0, int64_t n1) {
    // each thread's buffers grow and stay (no allocation in a steady training step)
    thread_local AlignedBuffer<uint32_t> pairs;
    thread_local AlignedBuffer<float> sums;
    const size_t pairs_words = static_cast<size_t>(Cp / 2 * f.QQ);
    uint32_t* pr = pairs.get(pairs_words);
    std::fill(pr, pr + pairs_words, 0u);  // the padding's zeros, for every image of the call
    float* sm = sums.get(static_cast<size_t>(Op * f.Qp));
    amx::configure_tiles();
    for (int64_t n = n0; n < n1; ++n) {
      channel_pairs(in + n * C_in * H * W, C_in, H, W, pad_h, pad_w, f, pr);
      forward_tiles(pr, wt.data(), Cp, C_out, f, sm);
      store_outputs(sm, C_out, H_out, W_out, f, bias, round, out + n * C_out * H_out * W_out);
    }
    amx::release_tiles();
  });
}

// dw of one block of images, into dw_k (O, C, taps): tap by tap, 32 x 32 blocks of (O, C), summed
// over the block's images and positions in the tiles.
MINIDL_AMX_TARGET void weight_grad_tiles(const std::vector<const uint16_t*>& dys,
                                         const std::vector<const uint32_t*>& even,
                                         const std::vector<const uint32_t*>& odd, int64_t O, int64_t C, int64_t Cp,
                                         const Flat& f, float* dw_k) {
  const int64_t Op = round_up(O, 32), taps = static_cast<int64_t>(f.tap.size());
  alignas(64) float block[32 * 32];
  for (int64_t t = 0; t < taps; ++t)
    for (int64_t o0 = 0; o0 < Op; o0 += 32)
      for (int64_t c0 = 0; c0 < Cp; c0 += 32) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (size_t i = 0; i < dys.size(); ++i)
          for (int64_t q0 = 0; q0 < f.Qp; q0 += 32) {
            const uint16_t* a = dys[i] + o0 * f.Qp + q0;  // dy rows o0.., positions q0..q0+31
            const int64_t at = q0 + f.tap[t];
            const uint32_t* b = (at % 2 ? odd[i] + (at - 1) / 2 * Cp : even[i] + at / 2 * Cp) + c0;
            _tile_loadd(4, a, f.Qp * 2);
            _tile_loadd(5, a + 16 * f.Qp, f.Qp * 2);
            _tile_loadd(6, b, Cp * 4);
            _tile_loadd(7, b + 16, Cp * 4);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
          }
        _tile_stored(0, block, 128);
        _tile_stored(1, block + 16, 128);
        _tile_stored(2, block + 16 * 32, 128);
        _tile_stored(3, block + 16 * 32 + 16, 128);
        for (int64_t o = 0; o < 32 && o0 + o < O; ++o)
          for (int64_t c = 0; c < 32 && c0 + c < C; ++c) dw_k[((o0 + o) * C + c0 + c) * taps + t] = block[o * 32 + c];
      }
}

}  // namespace

bool conv2d_bf16_implicit_applies(const Conv2dShape& s) {
  return s.stride_h == 1 && s.stride_w == 1 && s.groups == 1 && s.kH * s.kW > 1 && s.C >= 8 &&
         s.pad_h <= s.dil_h * (s.kH - 1) && s.pad_w <= s.dil_w * (s.kW - 1) && s.H_out > 0 && s.W_out > 0 &&
         gemm_bf16_amx_supported();
}

bool conv2d_bf16_implicit_forward(const uint16_t* x, const uint16_t* w, const float* b, const Conv2dShape& s,
                                  float* y) {
  if (!conv2d_bf16_implicit_applies(s)) return false;
  const int64_t taps = s.kH * s.kW;
  implicit_conv(
      x, s.N, s.C, s.H, s.W, s.kH, s.kW, s.pad_h, s.pad_w, s.dil_h, s.dil_w, s.O, s.H_out, s.W_out,
      [&](int64_t o, int64_t c, int64_t t) { return w[(o * s.C + c) * taps + t]; }, b, false, y);
  return true;
}

bool conv2d_bf16_implicit_backward(const uint16_t* x, const uint16_t* w, const uint16_t* dy, const Conv2dShape& s,
                                   float* dx, float* dw, bool round_dx) {
  if (!conv2d_bf16_implicit_applies(s)) return false;
  const int64_t taps = s.kH * s.kW;
  if (dx)  // the convolution of dy with w flipped and transposed: dx[c] += w[o, c, kH-1-kh, kW-1-kw] dy[o, ...]
    implicit_conv(
        dy, s.N, s.O, s.H_out, s.W_out, s.kH, s.kW, s.dil_h * (s.kH - 1) - s.pad_h, s.dil_w * (s.kW - 1) - s.pad_w,
        s.dil_h, s.dil_w, s.C, s.H, s.W,
        [&](int64_t c, int64_t o, int64_t t) { return w[(o * s.C + c) * taps + (taps - 1 - t)]; }, nullptr, round_dx,
        dx);
  // dw in conv2d's fixed blocks of images, added in order
  const Flat f(s.H, s.W, s.kH, s.kW, s.pad_h, s.pad_w, s.dil_h, s.dil_w, s.H_out);
  const int64_t Cp = round_up(s.C, 32), Op = round_up(s.O, 32), w_numel = s.O * s.C * taps;
  const int64_t per_block = std::max<int64_t>(1, (s.N + 15) / 16);
  const int64_t blocks = (s.N + per_block - 1) / per_block;
  // the buffers grow and stay, per thread (no allocation in a steady training step); each block's
  // partial dw is written whole
  thread_local AlignedBuffer<float> partial_buf;
  float* partial = partial_buf.get(static_cast<size_t>(blocks * w_numel));
  parallel_for(blocks, 1, [&](int64_t k0, int64_t k1) {
    const size_t pairs_words = static_cast<size_t>(f.QQ / 2 * Cp);
    thread_local AlignedBuffer<uint16_t> flat_buf, dys_buf;
    thread_local AlignedBuffer<uint32_t> even_buf, odd_buf;
    const size_t flat_count = static_cast<size_t>(s.C * (f.QQ + 32)),
                 dys_count = static_cast<size_t>(per_block * Op * f.Qp);
    uint16_t* flat = flat_buf.get(flat_count);
    uint16_t* dys = dys_buf.get(dys_count);
    uint32_t* even = even_buf.get(per_block * pairs_words);
    uint32_t* odd = odd_buf.get(per_block * pairs_words);
    // the zeros around the pixels (and at the dropped positions, and past O), for every image of
    // the call: each image writes only its own values
    std::fill(flat, flat + flat_count, uint16_t(0));
    std::fill(dys, dys + dys_count, uint16_t(0));
    amx::configure_tiles();
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t n_begin = k * per_block, n_end = std::min(s.N, n_begin + per_block);
      std::vector<const uint16_t*> dy_rows;
      std::vector<const uint32_t*> even_rows, odd_rows;
      for (int64_t n = n_begin; n < n_end; ++n) {
        const int64_t i = n - n_begin;
        uint16_t* d = dys + i * Op * f.Qp;  // dy[n] on the flat positions, zero at the dropped ones
        for (int64_t o = 0; o < s.O; ++o)
          copy_rows(dy + (n * s.O + o) * s.H_out * s.W_out, s.H_out, s.W_out, d + o * f.Qp, f.Wp);
        fill_flat(x + n * s.C * s.H * s.W, s.C, s.H, s.W, s.pad_h, s.pad_w, f, flat);
        pixel_pairs(flat, s.C, Cp, f, 0, even + i * pairs_words);
        pixel_pairs(flat, s.C, Cp, f, 1, odd + i * pairs_words);
        dy_rows.push_back(d);
        even_rows.push_back(even + i * pairs_words);
        odd_rows.push_back(odd + i * pairs_words);
      }
      weight_grad_tiles(dy_rows, even_rows, odd_rows, s.O, s.C, Cp, f, partial + k * w_numel);
    }
    amx::release_tiles();
  });
  sum_blocks_in_order(partial, blocks, w_numel, dw);
  return true;
}
#else
bool conv2d_bf16_implicit_applies(const Conv2dShape&) { return false; }
bool conv2d_bf16_implicit_forward(const uint16_t*, const uint16_t*, const float*, const Conv2dShape&, float*) {
  return false;
}
bool conv2d_bf16_implicit_backward(const uint16_t*, const uint16_t*, const uint16_t*, const Conv2dShape&, float*,
                                   float*, bool) {
  return false;
}
#endif

}  // namespace minidl::kernels::cpu
