// kernels/cpu/conv2d_bf16.cpp — the bfloat16 convolution's im2col + GEMM kernel and the choice
// between it and the implicit-GEMM one (conv2d_bf16.h).
#include "minidl/kernels/cpu/conv2d_bf16.h"

#include <immintrin.h>

#include <algorithm>

#include "minidl/kernels/cpu/aligned_buffer.h"
#include "minidl/kernels/cpu/cpu_features.h"
#include "minidl/kernels/cpu/gemm_bf16.h"
#include "minidl/kernels/cpu/half.h"
#include "minidl/kernels/cpu/half_span.h"
#include "minidl/kernels/cpu/im2col.h"
#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/cpu/reduce.h"

namespace minidl::kernels::cpu {

bool conv2d_bf16_pays(const Conv2dShape& s) {
  return s.groups == 1 && !conv2d_uses_direct(s) && gemm_bf16_amx_supported();
}

bool conv2d_bf16_im2col_forward(const uint16_t* x, const uint16_t* w, const float* b, const Conv2dShape& s, float* y) {
  if (!gemm_bf16_supported() || s.groups != 1) return false;
  const ConvGeometry geo = s.group_geometry();
  const int64_t K = s.C * s.kH * s.kW, L = s.H_out * s.W_out;
  const bool in_place = conv2d_uses_1x1(s);  // x[n] (C, L) is its own col
  parallel_for(s.N, conv_grain(s.O * K * L / 8), [&](int64_t n0, int64_t n1) {
    thread_local AlignedBuffer<uint16_t> col_buf;  // grows and stays: no allocation in a steady step
    uint16_t* col = in_place ? nullptr : col_buf.get(static_cast<size_t>(K * L));  // (K, L)
    for (int64_t n = n0; n < n1; ++n) {
      const uint16_t* x_n = x + n * s.C * s.H * s.W;
      if (!in_place) im2col(x_n, geo, col);
      gemm_bf16(s.O, L, K, w, K, false, in_place ? x_n : col, L, false, y + n * s.O * L, L);
    }
    if (b) add_conv_bias(b, n0, n1, s.O, L, y);
  });
  return true;
}

bool conv2d_bf16_im2col_backward(const uint16_t* x, const uint16_t* w, const uint16_t* dy, const Conv2dShape& s,
                                 float* dx, float* dw, bool round_dx) {
  if (!gemm_bf16_supported() || s.groups != 1) return false;
  const ConvGeometry geo = s.group_geometry();
  const int64_t K = s.C * s.kH * s.kW, L = s.H_out * s.W_out, w_numel = s.O * K;
  const bool in_place = conv2d_uses_1x1(s);
  // Fixed blocks of images (depend on N only), as conv2d_backward_im2col: block k sums its
  // images' dw into partial[k], and the blocks are added in order.
  const int64_t per_block = std::max<int64_t>(1, (s.N + 15) / 16);
  const int64_t blocks = (s.N + per_block - 1) / per_block;
  // The buffers grow and stay, per thread: no allocation in a steady training step.
  thread_local AlignedBuffer<float> partial_buf;
  float* partial = partial_buf.get(static_cast<size_t>(blocks * w_numel));
  parallel_for(blocks, conv_grain(2 * per_block * s.O * K * L / 8), [&](int64_t k0, int64_t k1) {
    thread_local AlignedBuffer<uint16_t> col_buf;
    thread_local AlignedBuffer<float> dcol_buf;
    uint16_t* col = in_place ? nullptr : col_buf.get(static_cast<size_t>(K * L));  // (K, L)
    float* dcol = dx && !in_place ? dcol_buf.get(static_cast<size_t>(K * L)) : nullptr;  // (K, L)
    for (int64_t k = k0; k < k1; ++k) {
      float* dw_k = partial + k * w_numel;
      const int64_t n_begin = k * per_block, n_end = std::min(s.N, n_begin + per_block);
      for (int64_t n = n_begin; n < n_end; ++n) {
        const uint16_t *x_n = x + n * s.C * s.H * s.W, *dy_n = dy + n * s.O * L;  // dy[n] (O, L)
        if (!in_place) im2col(x_n, geo, col);
        const uint16_t* col_n = in_place ? x_n : col;
        // dw (O, K) += dy[n] (O, L) · col^T (L, K); the block's first image overwrites
        gemm_bf16(s.O, K, L, dy_n, L, false, col_n, L, true, dw_k, K, 1.0f, n == n_begin ? 0.0f : 1.0f);
        if (!dx) continue;
        float* dx_n = dx + n * s.C * s.H * s.W;
        if (in_place) {  // dx[n] (C, L) = w^T (C, O) · dy[n] (O, L), rounded as stored where asked
          gemm_bf16(K, L, s.O, w, K, true, dy_n, L, false, dx_n, L, 1.0f, 0.0f, round_dx);
          continue;
        }
        // dcol (K, L) = w^T (K, O) · dy[n] (O, L), scattered back into dx[n]
        gemm_bf16(K, L, s.O, w, K, true, dy_n, L, false, dcol, L);
        std::fill(dx_n, dx_n + s.C * s.H * s.W, 0.0f);
        col2im(dcol, geo, dx_n);
        if (round_dx) round_to_bf16_span(dx_n, dx_n, s.C * s.H * s.W);  // while dx[n] is in cache
      }
    }
  });
  sum_blocks_in_order(partial, blocks, w_numel, dw);
  return true;
}

#if defined(__x86_64__) && defined(__GNUC__)
namespace {
// 8 bfloat16 -> 8 doubles (zeros off the mask)
MINIDL_AVX512_BW_VL_TARGET inline __m512d widen8(const uint16_t* p, __mmask8 m) {
  const __m256i bits = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_maskz_loadu_epi16(m, p)), 16);
  return _mm512_cvtps_pd(_mm256_castsi256_ps(bits));
}

// conv2d_bias_grad's sum for channel o on bfloat16 dy, eight values a vector: lane j of acc is its
// partial sum acc[j] (the ragged end adds to the first lanes only), the same double additions in
// the same order, so the same bits as the generic loop, which the compiler leaves at two doubles a
// step.
MINIDL_AVX512_BW_VL_TARGET float bias_grad_channel(const uint16_t* dy, const Conv2dShape& s, int64_t o) {
  const int64_t L = s.H_out * s.W_out, image_stride = s.O * L;
  __m512d acc = _mm512_setzero_pd();
  for (int64_t n = 0; n < s.N; ++n) {
    const uint16_t* plane = dy + n * image_stride + o * L;
    int64_t l = 0;
    for (; l + 8 <= L; l += 8) acc = _mm512_add_pd(acc, widen8(plane + l, 0xFF));
    if (l < L) {
      const __mmask8 m = static_cast<__mmask8>((1u << (L - l)) - 1);
      acc = _mm512_mask_add_pd(acc, m, acc, widen8(plane + l, m));
    }
  }
  alignas(64) double lanes[8];
  _mm512_store_pd(lanes, acc);
  double sum = 0;
  for (double a : lanes) sum += a;
  return static_cast<float>(sum);
}
}  // namespace
#endif

void conv2d_bf16_bias_grad(const uint16_t* dy, const Conv2dShape& s, float* db) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (cpu_has_avx512_bw_vl()) {
    parallel_for(s.O, conv_grain(s.N * s.H_out * s.W_out), [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) db[o] = bias_grad_channel(dy, s, o);
    });
    return;
  }
#endif
  conv2d_bias_grad(dy, s, db, s.O * s.H_out * s.W_out, [](uint16_t h) { return bf16_to_float(h); });
}

bool conv2d_bf16_forward(const uint16_t* x, const uint16_t* w, const float* b, const Conv2dShape& s, float* y) {
  return conv2d_bf16_implicit_forward(x, w, b, s, y) || conv2d_bf16_im2col_forward(x, w, b, s, y);
}

bool conv2d_bf16_backward(const uint16_t* x, const uint16_t* w, const uint16_t* dy, const Conv2dShape& s, float* dx,
                          float* dw, bool round_dx) {
  return conv2d_bf16_implicit_backward(x, w, dy, s, dx, dw, round_dx) ||
         conv2d_bf16_im2col_backward(x, w, dy, s, dx, dw, round_dx);
}

}  // namespace minidl::kernels::cpu
