// kernels/cpu/conv2d_winograd.cpp — F(2x2, 3x3) Winograd convolution (see conv2d_winograd.h).
// Inside, channels are innermost (padded to a multiple of 16, so every transform step is one
// 16-lane vector operation over channels):
//   weights:  U[ξ][ci][co] = (G g(co, ci) G^T)[ξ]                        once per call
//   per chunk of kChunk images, in parallel over chunks:
//     input:  P = each image zero-padded, (Hp, Wp, Cip);  V[ξ][t][ci] = (B^T d(t, ci) B)[ξ]
//             (t: the chunk's tiles, image-major, row-major)
//     GEMMs:  M[ξ] (T, Cop) = V[ξ] (T, Cip) · U[ξ] (Cip, Cop)   (kernels/cpu/gemm.h; gemm_narrow
//             below when Cop = 16)
//     output: (A^T M[.][t][co] A + b[co]) -> (2 th, 2 tw, Cop) per image -> y (Co, Ho, Wo), clipped
// with B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1],
// A^T = [1 1 1 0; 0 1 -1 -1]. Padded channels are zero in U and V and are never written out.
#include "minidl/kernels/cpu/conv2d_winograd.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "minidl/kernels/cpu/gemm.h"
#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/cpu/vec_math.h"

namespace minidl::kernels::cpu {

namespace {

constexpr int64_t kChunk = 8;  // images per unit of work (bounds the V and M buffers)
constexpr int64_t kW = kLanes<float>;  // channels per vector (vec_math.h's FloatLanes)
constexpr int64_t kMaxBlocks = 16;  // weight gradient: at most this many partial sums over blocks of images

// The distance between the 16 matrices of V, M or E (positions ξ), each (rows, cols): one vector
// more than a matrix, so that the transforms' 16 streams, one per ξ, do not all fall into the same
// cache sets when a matrix is a power of two bytes (8 images of 32 x 32 with 16 channels: 128 KB).
int64_t xi_stride(int64_t rows, int64_t cols) { return rows * cols + kW; }

// u (4x4) = G g G^T for one 3x3 kernel g (row-major).
void transform_kernel(const float g[9], float u[16]) {
  float t[4][3];  // G g
  for (int j = 0; j < 3; ++j) {
    t[0][j] = g[j];
    t[1][j] = 0.5f * (g[j] + g[3 + j] + g[6 + j]);
    t[2][j] = 0.5f * (g[j] - g[3 + j] + g[6 + j]);
    t[3][j] = g[6 + j];
  }
  for (int i = 0; i < 4; ++i) {  // (G g) G^T
    u[4 * i + 0] = t[i][0];
    u[4 * i + 1] = 0.5f * (t[i][0] + t[i][1] + t[i][2]);
    u[4 * i + 2] = 0.5f * (t[i][0] - t[i][1] + t[i][2]);
    u[4 * i + 3] = t[i][2];
  }
}

void gemm_fast(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C) {
  if (!gemm_avx512(M, N, K, A, K, false, B, N, false, C, N, 1.0f, 0.0f))
    gemm(M, N, K, A, K, false, B, N, false, C, N, 1.0f, 0.0f);
}

// Products with one vector of output channels (Cop = 16), where the packed GEMM's 8x16 tile
// spends a broadcast load on every FMA and rereads B: here a 16 x 16 block of the narrow factor
// stays in 16 registers while the rows stream past it (about 1.35x the packed GEMM's speed on
// 2048 x 16 x 16). Each element is still a sum over k in order.

// Rows t .. t + R - 1 of C (16 wide) += A's rows times the 16 x 16 block b (k0: the block's first
// k; C is overwritten when k0 == 0)
template <int64_t R>
void narrow_rows(const float* A, int64_t lda, int64_t k0, const FloatLanes (&b)[kW], int64_t t, float* C) {
  FloatLanes acc[R];
#pragma GCC unroll 16
  for (int64_t r = 0; r < R; ++r) acc[r] = k0 == 0 ? FloatLanes{} : load_lanes(C + (t + r) * kW);
#pragma GCC unroll 16
  for (int64_t k = 0; k < kW; ++k)
#pragma GCC unroll 16
    for (int64_t r = 0; r < R; ++r) acc[r] += broadcast_lanes(A + (t + r) * lda + k0 + k) * b[k];
#pragma GCC unroll 16
  for (int64_t r = 0; r < R; ++r) store_lanes(C + (t + r) * kW, acc[r]);
}

// C (T, 16) = A (T, K) · B (K, 16), row-major (lda = K, ldc = 16), K a multiple of 16: for each
// block of 16 values of k, B's block in registers and rows of C eight at a time (C holds the sum
// so far between blocks).
void gemm_narrow(int64_t T, int64_t K, const float* A, const float* B, float* C) {
  constexpr int64_t kRows = 8;
  for (int64_t k0 = 0; k0 < K; k0 += kW) {
    FloatLanes b[kW];
    for (int64_t k = 0; k < kW; ++k) b[k] = load_lanes(B + (k0 + k) * kW);
    int64_t t = 0;
    for (; t + kRows <= T; t += kRows) narrow_rows<kRows>(A, K, k0, b, t, C);
    for (; t < T; ++t) narrow_rows<1>(A, K, k0, b, t, C);
  }
}

// D (Ci, 16) (+)= A^T · E, A (T, Ci) and E (T, 16) row-major, Ci a multiple of 16 (the weight
// gradient's dU[ξ] = V[ξ]^T E[ξ]): for each block of 16 rows of D, its 16 vectors in registers,
// adding each t's outer product in t order; accumulate: D's old values are the start.
void gemm_narrow_at(int64_t T, int64_t Ci, const float* A, const float* E, float* D, bool accumulate) {
  for (int64_t c0 = 0; c0 < Ci; c0 += kW) {
    FloatLanes acc[kW];
    for (int64_t c = 0; c < kW; ++c) acc[c] = accumulate ? load_lanes(D + (c0 + c) * kW) : FloatLanes{};
    for (int64_t t = 0; t < T; ++t) {
      const FloatLanes e = load_lanes(E + t * kW);
#pragma GCC unroll 16
      for (int64_t c = 0; c < kW; ++c) acc[c] += broadcast_lanes(A + t * Ci + c0 + c) * e;
    }
    for (int64_t c = 0; c < kW; ++c) store_lanes(D + (c0 + c) * kW, acc[c]);
  }
}

// Planes (C, H, W) -> channels innermost: dst[(r * ld_row + j) * ld_ch + c] = src[(c * H + r) * W + j],
// and zeros in dst's channels C .. (C rounded up to 16) - 1 (ld_ch: a multiple of 16, at least that).
// Blocks of 16 channels x 16 positions (r, j) in row-major order, transposed in registers.
void to_channels_last(const float* src, int64_t C, int64_t H, int64_t W, float* dst, int64_t ld_row, int64_t ld_ch) {
  const int64_t HW = H * W;
  for (int64_t c0 = 0; c0 < C; c0 += kW) {
    const int64_t nc = std::min(kW, C - c0);
    int64_t p0 = 0, r0 = 0, j0 = 0;  // p0 = r0 * W + j0
    for (; p0 + kW <= HW; p0 += kW) {
      FloatLanes v[16];
      for (int i = 0; i < 16; ++i) {
        v[i] = FloatLanes{};
        if (i < nc) v[i] = load_lanes(src + (c0 + i) * HW + p0);
      }
      transpose16(v);
      for (int k = 0; k < 16; ++k) {
        store_lanes(dst + (r0 * ld_row + j0) * ld_ch + c0, v[k]);
        if (++j0 == W) j0 = 0, ++r0;
      }
    }
    for (; p0 < HW; ++p0) {
      for (int64_t c = 0; c < kW; ++c)
        dst[(r0 * ld_row + j0) * ld_ch + c0 + c] = c < nc ? src[(c0 + c) * HW + p0] : 0.0f;
      if (++j0 == W) j0 = 0, ++r0;
    }
  }
}

// The inverse: dst[(c * H + r) * W + j] = src[(r * ld_row + j) * ld_ch + c] (ld_ch: a multiple of
// 16, at least C rounded up to 16).
void from_channels_last(const float* src, int64_t ld_row, int64_t ld_ch, int64_t C, int64_t H, int64_t W, float* dst) {
  const int64_t HW = H * W;
  for (int64_t c0 = 0; c0 < C; c0 += kW) {
    const int64_t nc = std::min(kW, C - c0);
    int64_t p0 = 0, r0 = 0, j0 = 0;  // p0 = r0 * W + j0
    for (; p0 + kW <= HW; p0 += kW) {
      FloatLanes v[16];
      for (int k = 0; k < 16; ++k) {
        v[k] = load_lanes(src + (r0 * ld_row + j0) * ld_ch + c0);
        if (++j0 == W) j0 = 0, ++r0;
      }
      transpose16(v);
      for (int i = 0; i < nc; ++i) store_lanes(dst + (c0 + i) * HW + p0, v[i]);
    }
    for (; p0 < HW; ++p0) {
      for (int64_t c = 0; c < nc; ++c) dst[(c0 + c) * HW + p0] = src[(r0 * ld_row + j0) * ld_ch + c0 + c];
      if (++j0 == W) j0 = 0, ++r0;
    }
  }
}

// V (16, images * th * tw, Cip) = B^T d B for every 4x4 input patch d of the images x (images, Ci,
// H, W), zero-padded by pad on the top and left (and as far as the tiles reach on the bottom and
// right); tiles image-major, row-major. plane is scratch.
void transform_input(const float* x, int64_t images, int64_t Ci, int64_t H, int64_t W, int64_t pad, int64_t th,
                     int64_t tw, int64_t Cip, std::vector<float>& plane, std::vector<float>& V) {
  const int64_t Hp = 2 * th + 2, Wp = 2 * tw + 2;  // the zero-padded input plane every tile reads
  const int64_t tiles = th * tw, v_stride = xi_stride(images * tiles, Cip);
  plane.assign(static_cast<size_t>(Hp * Wp * Cip), 0.0f);  // the padding stays zero for every image
  for (int64_t img = 0; img < images; ++img) {
    // (Ci, H, W) -> the interior of (Hp, Wp, Cip)
    to_channels_last(x + img * Ci * H * W, Ci, H, W, plane.data() + (pad * Wp + pad) * Cip, Wp, Cip);
    for (int64_t ty = 0; ty < th; ++ty)
      for (int64_t tx = 0; tx < tw; ++tx) {
        const int64_t t = img * tiles + ty * tw + tx;
        for (int64_t cv = 0; cv < Cip; cv += kW) {
          const float* p = plane.data() + (2 * ty * Wp + 2 * tx) * Cip + cv;
          FloatLanes s[4][4];  // B^T d
          for (int j = 0; j < 4; ++j) {
            const FloatLanes d0 = load_lanes(p + j * Cip), d1 = load_lanes(p + (Wp + j) * Cip),
                             d2 = load_lanes(p + (2 * Wp + j) * Cip), d3 = load_lanes(p + (3 * Wp + j) * Cip);
            s[0][j] = d0 - d2;
            s[1][j] = d1 + d2;
            s[2][j] = d2 - d1;
            s[3][j] = d1 - d3;
          }
          float* v = V.data() + t * Cip + cv;
          for (int i = 0; i < 4; ++i) {  // (B^T d) B
            store_lanes(v + (4 * i + 0) * v_stride, s[i][0] - s[i][2]);
            store_lanes(v + (4 * i + 1) * v_stride, s[i][1] + s[i][2]);
            store_lanes(v + (4 * i + 2) * v_stride, s[i][2] - s[i][1]);
            store_lanes(v + (4 * i + 3) * v_stride, s[i][1] - s[i][3]);
          }
        }
      }
  }
}

// E (16, images * th * tw, Cop) = A e A^T for every 2x2 tile e of the output gradients dy
// (images, Co, Ho, Wo), zero past the edges (the gradient of M[ξ] when y = A^T M A); and, when db
// is not null, db[co] += each image's sum of dy[., co] (the tiles' sums in float, then in double).
// plane and sums are scratch.
void transform_output_grad(const float* dy, int64_t images, int64_t Co, int64_t Ho, int64_t Wo, int64_t th, int64_t tw,
                           int64_t Cop, std::vector<float>& plane, std::vector<float>& sums, std::vector<float>& E,
                           double* db) {
  const int64_t Wq = 2 * tw, tiles = th * tw, e_stride = xi_stride(images * tiles, Cop);
  plane.assign(static_cast<size_t>(2 * th * Wq * Cop), 0.0f);  // (2 th, 2 tw, Cop); the edges stay zero
  for (int64_t img = 0; img < images; ++img) {
    sums.assign(static_cast<size_t>(Cop), 0.0f);
    // (Co, Ho, Wo) -> (Ho, Wo, Cop) at the top left of the plane
    to_channels_last(dy + img * Co * Ho * Wo, Co, Ho, Wo, plane.data(), Wq, Cop);
    for (int64_t ty = 0; ty < th; ++ty)
      for (int64_t tx = 0; tx < tw; ++tx) {
        const int64_t t = img * tiles + ty * tw + tx;
        for (int64_t cv = 0; cv < Cop; cv += kW) {
          const float* p = plane.data() + (2 * ty * Wq + 2 * tx) * Cop + cv;
          const FloatLanes e00 = load_lanes(p);
          const FloatLanes e01 = load_lanes(p + Cop);
          const FloatLanes e10 = load_lanes(p + Wq * Cop);
          const FloatLanes e11 = load_lanes(p + (Wq + 1) * Cop);
          // A e, rows (4, 2), with A = [1 0; 1 1; 1 -1; 0 -1]
          const FloatLanes s[4][2] = {{e00, e01}, {e00 + e10, e01 + e11}, {e00 - e10, e01 - e11}, {-e10, -e11}};
          float* o = E.data() + t * Cop + cv;
          for (int i = 0; i < 4; ++i) {  // (A e) A^T
            store_lanes(o + (4 * i + 0) * e_stride, s[i][0]);
            store_lanes(o + (4 * i + 1) * e_stride, s[i][0] + s[i][1]);
            store_lanes(o + (4 * i + 2) * e_stride, s[i][0] - s[i][1]);
            store_lanes(o + (4 * i + 3) * e_stride, -s[i][1]);
          }
          if (db) {
            const FloatLanes sum = load_lanes(sums.data() + cv);
            store_lanes(sums.data() + cv, sum + ((e00 + e01) + (e10 + e11)));
          }
        }
      }
    if (db)
      for (int64_t co = 0; co < Co; ++co) db[co] += static_cast<double>(sums[static_cast<size_t>(co)]);
  }
}

}  // namespace

void conv3x3_winograd(const float* x, const float* k, const float* b, int64_t N, int64_t Ci, int64_t H, int64_t W,
                      int64_t Co, int64_t pad, bool flip, float* y) {
  const int64_t Ho = H + 2 * pad - 2, Wo = W + 2 * pad - 2;
  if (N <= 0 || Co <= 0 || Ho <= 0 || Wo <= 0) return;
  const int64_t th = (Ho + 1) / 2, tw = (Wo + 1) / 2, tiles = th * tw;
  const int64_t Cip = (Ci + kW - 1) / kW * kW, Cop = (Co + kW - 1) / kW * kW;

  // U (16, Cip, Cop), zero in the padding
  std::vector<float> U(static_cast<size_t>(16 * Cip * Cop), 0.0f);
  parallel_for(Co, std::max<int64_t>(1, 4096 / std::max<int64_t>(Ci, 1)), [&](int64_t o0, int64_t o1) {
    for (int64_t co = o0; co < o1; ++co)
      for (int64_t ci = 0; ci < Ci; ++ci) {
        float g[9], u[16];
        for (int i = 0; i < 9; ++i) g[i] = flip ? k[(ci * Co + co) * 9 + 8 - i] : k[(co * Ci + ci) * 9 + i];
        transform_kernel(g, u);
        for (int xi = 0; xi < 16; ++xi) U[static_cast<size_t>((xi * Cip + ci) * Cop + co)] = u[xi];
      }
  });

  const int64_t chunks = (N + kChunk - 1) / kChunk;
  parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
    thread_local std::vector<float> plane, V, Mb, out;
    for (int64_t chunk = c0; chunk < c1; ++chunk) {
      const int64_t n0 = chunk * kChunk, images = std::min(kChunk, N - n0), T = images * tiles;
      const int64_t v_stride = xi_stride(T, Cip), m_stride = xi_stride(T, Cop);  // between the 16 positions ξ
      V.resize(static_cast<size_t>(16 * v_stride));
      Mb.resize(static_cast<size_t>(16 * m_stride));
      out.resize(static_cast<size_t>(2 * th * 2 * tw * Cop));
      transform_input(x + n0 * Ci * H * W, images, Ci, H, W, pad, th, tw, Cip, plane, V);
      // M[ξ] (T, Cop) = V[ξ] (T, Cip) · U[ξ] (Cip, Cop)
      for (int64_t xi = 0; xi < 16; ++xi) {
        const float *v = V.data() + xi * v_stride, *u = U.data() + xi * Cip * Cop;
        if (Cop == kW)
          gemm_narrow(T, Cip, v, u, Mb.data() + xi * m_stride);
        else
          gemm_fast(T, Cop, Cip, v, u, Mb.data() + xi * m_stride);
      }
      // y = A^T M A (+ b): (2 th, 2 tw, Cop) per image, then clipped into (Co, Ho, Wo)
      for (int64_t img = 0; img < images; ++img) {
        for (int64_t ty = 0; ty < th; ++ty)
          for (int64_t tx = 0; tx < tw; ++tx) {
            const int64_t t = img * tiles + ty * tw + tx;
            for (int64_t cv = 0; cv < Cop; cv += kW) {
              const float* m = Mb.data() + t * Cop + cv;
              FloatLanes bias = {};
              if (b)
                for (int64_t l = 0; l < kW && cv + l < Co; ++l) bias[l] = b[cv + l];
              FloatLanes s[2][4];  // A^T M
              for (int j = 0; j < 4; ++j) {
                const FloatLanes m0 = load_lanes(m + j * m_stride);
                const FloatLanes m1 = load_lanes(m + (4 + j) * m_stride);
                const FloatLanes m2 = load_lanes(m + (8 + j) * m_stride);
                const FloatLanes m3 = load_lanes(m + (12 + j) * m_stride);
                s[0][j] = m0 + m1 + m2;
                s[1][j] = m1 - m2 - m3;
              }
              for (int i = 0; i < 2; ++i) {  // (A^T M) A
                float* o = out.data() + ((2 * ty + i) * 2 * tw + 2 * tx) * Cop + cv;
                store_lanes(o, s[i][0] + s[i][1] + s[i][2] + bias);
                store_lanes(o + Cop, s[i][1] - s[i][2] - s[i][3] + bias);
              }
            }
          }
        // (Ho, 2 tw, Cop) -> (Co, Ho, Wo)
        from_channels_last(out.data(), 2 * tw, Cop, Co, Ho, Wo, y + (n0 + img) * Co * Ho * Wo);
      }
    }
  });
}

void conv3x3_winograd_weight_grad(const float* x, const float* dy, int64_t N, int64_t Ci, int64_t H, int64_t W,
                                  int64_t Co, int64_t pad, float* dw, float* db) {
  const int64_t Ho = H + 2 * pad - 2, Wo = W + 2 * pad - 2;
  if (Co <= 0 || Ci <= 0) return;
  if (N <= 0 || Ho <= 0 || Wo <= 0) {
    std::fill(dw, dw + Co * Ci * 9, 0.0f);
    if (db) std::fill(db, db + Co, 0.0f);
    return;
  }
  const int64_t th = (Ho + 1) / 2, tw = (Wo + 1) / 2, tiles = th * tw;
  const int64_t Cip = (Ci + kW - 1) / kW * kW, Cop = (Co + kW - 1) / kW * kW;
  const int64_t u_numel = 16 * Cip * Cop;
  // Fixed blocks of chunks (depend on N only): block k sums its chunks' dU into partial[k].
  const int64_t chunks = (N + kChunk - 1) / kChunk, per_block = (chunks + kMaxBlocks - 1) / kMaxBlocks;
  const int64_t blocks = (chunks + per_block - 1) / per_block;
  std::vector<float> partial(static_cast<size_t>(blocks * u_numel));
  std::vector<double> partial_db(static_cast<size_t>(db ? blocks * Co : 0), 0.0);  // (blocks, Co)
  parallel_for(blocks, 1, [&](int64_t k0, int64_t k1) {
    thread_local std::vector<float> plane, sums, V, E;
    for (int64_t k = k0; k < k1; ++k) {
      float* dU = partial.data() + k * u_numel;  // (16, Cip, Cop)
      double* db_k = db ? partial_db.data() + k * Co : nullptr;
      for (int64_t chunk = k * per_block; chunk < std::min(chunks, (k + 1) * per_block); ++chunk) {
        const int64_t n0 = chunk * kChunk, images = std::min(kChunk, N - n0), T = images * tiles;
        const int64_t v_stride = xi_stride(T, Cip), e_stride = xi_stride(T, Cop);  // between the 16 positions ξ
        V.resize(static_cast<size_t>(16 * v_stride));
        E.resize(static_cast<size_t>(16 * e_stride));
        transform_input(x + n0 * Ci * H * W, images, Ci, H, W, pad, th, tw, Cip, plane, V);
        transform_output_grad(dy + n0 * Co * Ho * Wo, images, Co, Ho, Wo, th, tw, Cop, plane, sums, E, db_k);
        // dU[ξ] (Cip, Cop) (+)= V[ξ]^T (Cip, T) · E[ξ] (T, Cop)
        const float beta = chunk == k * per_block ? 0.0f : 1.0f;
        for (int64_t xi = 0; xi < 16; ++xi) {
          const float* v = V.data() + xi * v_stride;
          const float* e = E.data() + xi * e_stride;
          float* u = dU + xi * Cip * Cop;
          if (Cop == kW)
            gemm_narrow_at(T, Cip, v, e, u, beta != 0.0f);
          else if (!gemm_avx512(Cip, Cop, T, v, Cip, true, e, Cop, false, u, Cop, 1.0f, beta))
            gemm(Cip, Cop, T, v, Cip, true, e, Cop, false, u, Cop, 1.0f, beta);
        }
      }
    }
  });
  if (db)
    for (int64_t co = 0; co < Co; ++co) {
      double acc = 0;
      for (int64_t k = 0; k < blocks; ++k) acc += partial_db[static_cast<size_t>(k * Co + co)];
      db[co] = static_cast<float>(acc);
    }
  // partial[0] = the blocks' dU summed in block order
  float* dU = partial.data();
  parallel_for(u_numel, 4096, [&](int64_t i0, int64_t i1) {
    for (int64_t k = 1; k < blocks; ++k)
      for (int64_t i = i0; i < i1; ++i) dU[i] += partial[static_cast<size_t>(k * u_numel + i)];
  });
  // dw(co, ci) = G^T dU(ci, co) G
  parallel_for(Co, std::max<int64_t>(1, 256 / std::max<int64_t>(Ci, 1)), [&](int64_t o0, int64_t o1) {
    for (int64_t co = o0; co < o1; ++co)
      for (int64_t ci = 0; ci < Ci; ++ci) {
        float u[16];
        for (int xi = 0; xi < 16; ++xi) u[xi] = dU[(xi * Cip + ci) * Cop + co];
        float t[3][4];  // G^T u
        for (int j = 0; j < 4; ++j) {
          t[0][j] = u[j] + 0.5f * (u[4 + j] + u[8 + j]);
          t[1][j] = 0.5f * (u[4 + j] - u[8 + j]);
          t[2][j] = 0.5f * (u[4 + j] + u[8 + j]) + u[12 + j];
        }
        float* g = dw + (co * Ci + ci) * 9;
        for (int i = 0; i < 3; ++i) {  // (G^T u) G
          g[3 * i + 0] = t[i][0] + 0.5f * (t[i][1] + t[i][2]);
          g[3 * i + 1] = 0.5f * (t[i][1] - t[i][2]);
          g[3 * i + 2] = 0.5f * (t[i][1] + t[i][2]) + t[i][3];
        }
      }
  });
}

}  // namespace minidl::kernels::cpu
