// kernels/cpu/conv2d_winograd.cpp — Winograd convolution (see conv2d_winograd.h): the forward
// pass and the input gradient as F(4x4, 3x3), the weight gradient as F(2x2, 3x3).
// Inside, channels are innermost (padded to a multiple of 16, so every transform step is one
// 16-lane vector operation over channels). With m the tile size and α = m + 2:
//   weights:  U[ξ][ci][co] = (G g(co, ci) G^T)[ξ]                        once per call
//   per chunk of kChunk images, in parallel over chunks:
//     input:  P = each image zero-padded, (Hp, Wp, Cip);  V[ξ][t][ci] = (B^T d(t, ci) B)[ξ]
//             (t: the chunk's tiles, image-major, row-major; ξ: the α² positions)
//     GEMMs:  M[ξ] (T, Cop) = V[ξ] (T, Cip) · U[ξ] (Cip, Cop)   (kernels/cpu/gemm.h; gemm_narrow
//             below when Cop = 16)
//     output: (A^T M[.][t][co] A + b[co]) -> (m th, m tw, Cop) per image -> y (Co, Ho, Wo), clipped
// Padded channels are zero in U and V and are never written out.
#include "minidl/kernels/cpu/conv2d_winograd.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "minidl/kernels/cpu/gemm.h"
#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/cpu/reduce.h"
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

// The 1-d transforms of F(m, 3) (α = m + 2 values per transformed row), applied along columns
// and then along rows; each tile size holds the ones its pass uses (F(4, 3) the forward's, F(2, 3)
// the weight gradient's):
//   input:       o (α) = B^T d (α)        output:       y (m) = A^T o (α)
//   kernel:      u (α) = G g (3)          output grad:  o (α) = A e (m)
//   kernel grad: t (3) = G^T u (α)
// F(2, 3) (points 0, 1, -1, ∞) has B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],
// G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1], A^T = [1 1 1 0; 0 1 -1 -1]. F(4, 3) (points 0,
// ±1, ±2, ∞) has B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0;
// 0 4 0 -5 0 1], G = [1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6; 1/24 1/12 1/6; 1/24 -1/12 1/6;
// 0 0 1], A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1].
template <int M> struct Tile;

template <> struct Tile<2> {
  template <class V> static void input(const V (&d)[4], V (&o)[4]) {
    o[0] = d[0] - d[2];
    o[1] = d[1] + d[2];
    o[2] = d[2] - d[1];
    o[3] = d[1] - d[3];
  }
  template <class V> static void output_grad(const V (&e)[2], V (&o)[4]) {
    o[0] = e[0];
    o[1] = e[0] + e[1];
    o[2] = e[0] - e[1];
    o[3] = -e[1];
  }
  static void kernel_grad(const float (&u)[4], float (&t)[3]) {
    t[0] = u[0] + 0.5f * (u[1] + u[2]);
    t[1] = 0.5f * (u[1] - u[2]);
    t[2] = 0.5f * (u[1] + u[2]) + u[3];
  }
};

template <> struct Tile<4> {
  template <class V> static void input(const V (&d)[6], V (&o)[6]) {
    const V d42 = d[4] - d[2], d31 = d[3] - d[1];
    o[0] = d42 + 4.0f * (d[0] - d[2]);
    o[1] = (d[3] + d[4]) - 4.0f * (d[1] + d[2]);
    o[2] = (d[4] - d[3]) + 4.0f * (d[1] - d[2]);
    o[3] = d42 + 2.0f * d31;
    o[4] = d42 - 2.0f * d31;
    o[5] = (d[5] - d[3]) + 4.0f * (d[1] - d[3]);
  }
  template <class V> static void output(const V (&m)[6], V (&y)[4]) {
    const V a = m[1] + m[2], b = m[1] - m[2], c = m[3] + m[4], d = m[3] - m[4];
    y[0] = m[0] + a + c;
    y[1] = b + 2.0f * d;
    y[2] = a + 4.0f * c;
    y[3] = b + 8.0f * d + m[5];
  }
  static void kernel(const float (&g)[3], float (&u)[6]) {
    u[0] = g[0] / 4.0f;
    u[1] = -(g[0] + g[1] + g[2]) / 6.0f;
    u[2] = -(g[0] - g[1] + g[2]) / 6.0f;
    u[3] = (g[0] + 2.0f * g[1] + 4.0f * g[2]) / 24.0f;
    u[4] = (g[0] - 2.0f * g[1] + 4.0f * g[2]) / 24.0f;
    u[5] = g[2];
  }
};

// u (α x α) = G g G^T for one 3x3 kernel g (row-major).
template <int M> void transform_kernel(const float g[9], float u[(M + 2) * (M + 2)]) {
  constexpr int kA = M + 2;
  float t[3][kA];  // (G g)^T: column j of g transformed
  for (int j = 0; j < 3; ++j) {
    const float col[3] = {g[j], g[3 + j], g[6 + j]};
    Tile<M>::kernel(col, t[j]);
  }
  for (int i = 0; i < kA; ++i) {  // (G g) G^T
    const float row[3] = {t[0][i], t[1][i], t[2][i]};
    float out[kA];
    Tile<M>::kernel(row, out);
    for (int j = 0; j < kA; ++j) u[kA * i + j] = out[j];
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

// D (Ci, Co) (+)= A^T · E, A (T, Ci), E (T, Co) and D row-major, Ci and Co multiples of 16 (the
// weight gradient's dU[ξ] = V[ξ]^T E[ξ]): one 16 x 16 block of D at a time, its 16 vectors in
// registers, adding each t's outer product in t order; accumulate: D's old values are the start.
// (The packed GEMM's tile spends a broadcast load per FMA too, and packs A^T and E first.)
void gemm_narrow_at(int64_t T, int64_t Ci, int64_t Co, const float* A, const float* E, float* D, bool accumulate) {
  for (int64_t c0 = 0; c0 < Ci; c0 += kW)
    for (int64_t j0 = 0; j0 < Co; j0 += kW) {
      FloatLanes acc[kW];
      for (int64_t c = 0; c < kW; ++c) acc[c] = accumulate ? load_lanes(D + (c0 + c) * Co + j0) : FloatLanes{};
      for (int64_t t = 0; t < T; ++t) {
        const FloatLanes e = load_lanes(E + t * Co + j0);
#pragma GCC unroll 16
        for (int64_t c = 0; c < kW; ++c) acc[c] += broadcast_lanes(A + t * Ci + c0 + c) * e;
      }
      for (int64_t c = 0; c < kW; ++c) store_lanes(D + (c0 + c) * Co + j0, acc[c]);
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

// V (α², images * th * tw, Cip) = B^T d B for every α x α input patch d of the images x (images,
// Ci, H, W), one every m rows and columns, zero-padded by pad on the top and left (and as far as
// the tiles reach on the bottom and right); tiles image-major, row-major. plane is scratch.
template <int M>
void transform_input(const float* x, int64_t images, int64_t Ci, int64_t H, int64_t W, int64_t pad, int64_t th,
                     int64_t tw, int64_t Cip, std::vector<float>& plane, std::vector<float>& V) {
  constexpr int kA = M + 2;
  const int64_t Hp = M * th + 2, Wp = M * tw + 2;  // the zero-padded input plane every tile reads
  const int64_t tiles = th * tw, v_stride = xi_stride(images * tiles, Cip);
  plane.assign(static_cast<size_t>(Hp * Wp * Cip), 0.0f);  // the padding stays zero for every image
  for (int64_t img = 0; img < images; ++img) {
    // (Ci, H, W) -> the interior of (Hp, Wp, Cip)
    to_channels_last(x + img * Ci * H * W, Ci, H, W, plane.data() + (pad * Wp + pad) * Cip, Wp, Cip);
    for (int64_t ty = 0; ty < th; ++ty)
      for (int64_t tx = 0; tx < tw; ++tx) {
        const int64_t t = img * tiles + ty * tw + tx;
        for (int64_t cv = 0; cv < Cip; cv += kW) {
          const float* p = plane.data() + (M * ty * Wp + M * tx) * Cip + cv;
          FloatLanes s[kA][kA];  // s[j] = B^T (column j of d)
          for (int j = 0; j < kA; ++j) {
            FloatLanes d[kA];
            for (int i = 0; i < kA; ++i) d[i] = load_lanes(p + (i * Wp + j) * Cip);
            Tile<M>::input(d, s[j]);
          }
          float* v = V.data() + t * Cip + cv;
          for (int i = 0; i < kA; ++i) {  // (B^T d) B, row i
            FloatLanes row[kA], o[kA];
            for (int j = 0; j < kA; ++j) row[j] = s[j][i];
            Tile<M>::input(row, o);
            for (int j = 0; j < kA; ++j) store_lanes(v + (kA * i + j) * v_stride, o[j]);
          }
        }
      }
  }
}

// The sum of a tile's m x m values, by halves (a fixed tree)
template <int M> FloatLanes tile_sum(const FloatLanes (&e)[M][M]) {
  FloatLanes rows[M];
  for (int i = 0; i < M; ++i) {
    FloatLanes r[M];
    for (int j = 0; j < M; ++j) r[j] = e[i][j];
    for (int h = M / 2; h >= 1; h /= 2)
      for (int j = 0; j < h; ++j) r[j] = r[2 * j] + r[2 * j + 1];
    rows[i] = r[0];
  }
  for (int h = M / 2; h >= 1; h /= 2)
    for (int i = 0; i < h; ++i) rows[i] = rows[2 * i] + rows[2 * i + 1];
  return rows[0];
}

// E (α², images * th * tw, Cop) = A e A^T for every m x m tile e of the output gradients dy
// (images, Co, Ho, Wo), zero past the edges (the gradient of M[ξ] when y = A^T M A); and, when db
// is not null, db[co] += each image's sum of dy[., co] (the tiles' sums in float, then in double).
// plane and sums are scratch.
template <int M>
void transform_output_grad(const float* dy, int64_t images, int64_t Co, int64_t Ho, int64_t Wo, int64_t th, int64_t tw,
                           int64_t Cop, std::vector<float>& plane, std::vector<float>& sums, std::vector<float>& E,
                           double* db) {
  constexpr int kA = M + 2;
  const int64_t Wq = M * tw, tiles = th * tw, e_stride = xi_stride(images * tiles, Cop);
  plane.assign(static_cast<size_t>(M * th * Wq * Cop), 0.0f);  // (m th, m tw, Cop); the edges stay zero
  for (int64_t img = 0; img < images; ++img) {
    sums.assign(static_cast<size_t>(Cop), 0.0f);
    // (Co, Ho, Wo) -> (Ho, Wo, Cop) at the top left of the plane
    to_channels_last(dy + img * Co * Ho * Wo, Co, Ho, Wo, plane.data(), Wq, Cop);
    for (int64_t ty = 0; ty < th; ++ty)
      for (int64_t tx = 0; tx < tw; ++tx) {
        const int64_t t = img * tiles + ty * tw + tx;
        for (int64_t cv = 0; cv < Cop; cv += kW) {
          const float* p = plane.data() + (M * ty * Wq + M * tx) * Cop + cv;
          FloatLanes e[M][M];
          for (int i = 0; i < M; ++i)
            for (int j = 0; j < M; ++j) e[i][j] = load_lanes(p + (i * Wq + j) * Cop);
          FloatLanes s[M][kA];  // s[j] = A (column j of e)
          for (int j = 0; j < M; ++j) {
            FloatLanes col[M];
            for (int i = 0; i < M; ++i) col[i] = e[i][j];
            Tile<M>::output_grad(col, s[j]);
          }
          float* o = E.data() + t * Cop + cv;
          for (int i = 0; i < kA; ++i) {  // (A e) A^T, row i
            FloatLanes row[M], r[kA];
            for (int j = 0; j < M; ++j) row[j] = s[j][i];
            Tile<M>::output_grad(row, r);
            for (int j = 0; j < kA; ++j) store_lanes(o + (kA * i + j) * e_stride, r[j]);
          }
          if (db) store_lanes(sums.data() + cv, load_lanes(sums.data() + cv) + tile_sum<M>(e));
        }
      }
    if (db)
      for (int64_t co = 0; co < Co; ++co) db[co] += static_cast<double>(sums[static_cast<size_t>(co)]);
  }
}

template <int M>
void winograd_forward(const float* x, const float* k, const float* b, int64_t N, int64_t Ci, int64_t H, int64_t W,
                      int64_t Co, int64_t pad, bool flip, float* y) {
  constexpr int kA = M + 2, kXi = kA * kA;
  const int64_t Ho = H + 2 * pad - 2, Wo = W + 2 * pad - 2;
  const int64_t th = (Ho + M - 1) / M, tw = (Wo + M - 1) / M, tiles = th * tw;
  const int64_t Cip = (Ci + kW - 1) / kW * kW, Cop = (Co + kW - 1) / kW * kW;

  // U (α², Cip, Cop), zero in the padding (written below for every unpadded ci, co; a serial
  // zero fill of the whole buffer would cost more than the parallel transform on two threads)
  const auto U = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(kXi * Cip * Cop));
  if (Cip != Ci || Cop != Co) std::fill_n(U.get(), kXi * Cip * Cop, 0.0f);
  parallel_for(Co, std::max<int64_t>(1, 256 / std::max<int64_t>(Ci, 1)), [&](int64_t o0, int64_t o1) {
    for (int64_t co = o0; co < o1; ++co)
      for (int64_t ci = 0; ci < Ci; ++ci) {
        float g[9], u[kXi];
        for (int i = 0; i < 9; ++i) g[i] = flip ? k[(ci * Co + co) * 9 + 8 - i] : k[(co * Ci + ci) * 9 + i];
        transform_kernel<M>(g, u);
        for (int xi = 0; xi < kXi; ++xi) U[static_cast<size_t>((xi * Cip + ci) * Cop + co)] = u[xi];
      }
  });

  const int64_t chunks = (N + kChunk - 1) / kChunk;
  parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
    thread_local std::vector<float> plane, V, Mb, out;
    for (int64_t chunk = c0; chunk < c1; ++chunk) {
      const int64_t n0 = chunk * kChunk, images = std::min(kChunk, N - n0), T = images * tiles;
      const int64_t v_stride = xi_stride(T, Cip), m_stride = xi_stride(T, Cop);  // between the positions ξ
      V.resize(static_cast<size_t>(kXi * v_stride));
      Mb.resize(static_cast<size_t>(kXi * m_stride));
      out.resize(static_cast<size_t>(M * th * M * tw * Cop));
      transform_input<M>(x + n0 * Ci * H * W, images, Ci, H, W, pad, th, tw, Cip, plane, V);
      // M[ξ] (T, Cop) = V[ξ] (T, Cip) · U[ξ] (Cip, Cop)
      for (int64_t xi = 0; xi < kXi; ++xi) {
        const float *v = V.data() + xi * v_stride, *u = U.get() + xi * Cip * Cop;
        if (Cop == kW)
          gemm_narrow(T, Cip, v, u, Mb.data() + xi * m_stride);
        else
          gemm_fast(T, Cop, Cip, v, u, Mb.data() + xi * m_stride);
      }
      // y = A^T M A (+ b): (m th, m tw, Cop) per image, then clipped into (Co, Ho, Wo)
      for (int64_t img = 0; img < images; ++img) {
        for (int64_t ty = 0; ty < th; ++ty)
          for (int64_t tx = 0; tx < tw; ++tx) {
            const int64_t t = img * tiles + ty * tw + tx;
            for (int64_t cv = 0; cv < Cop; cv += kW) {
              const float* m = Mb.data() + t * Cop + cv;
              FloatLanes bias = {};
              if (b)
                for (int64_t l = 0; l < kW && cv + l < Co; ++l) bias[l] = b[cv + l];
              FloatLanes s[kA][M];  // s[j] = A^T (column j of M)
              for (int j = 0; j < kA; ++j) {
                FloatLanes col[kA];
                for (int i = 0; i < kA; ++i) col[i] = load_lanes(m + (kA * i + j) * m_stride);
                Tile<M>::output(col, s[j]);
              }
              for (int i = 0; i < M; ++i) {  // (A^T M) A, row i
                FloatLanes row[kA], r[M];
                for (int j = 0; j < kA; ++j) row[j] = s[j][i];
                Tile<M>::output(row, r);
                float* o = out.data() + ((M * ty + i) * M * tw + M * tx) * Cop + cv;
                for (int j = 0; j < M; ++j) store_lanes(o + j * Cop, r[j] + bias);
              }
            }
          }
        // (Ho, m tw, Cop) -> (Co, Ho, Wo)
        from_channels_last(out.data(), M * tw, Cop, Co, Ho, Wo, y + (n0 + img) * Co * Ho * Wo);
      }
    }
  });
}

template <int M>
void winograd_weight_grad(const float* x, const float* dy, int64_t N, int64_t Ci, int64_t H, int64_t W, int64_t Co,
                          int64_t pad, float* dw, float* db) {
  constexpr int kA = M + 2, kXi = kA * kA;
  const int64_t Ho = H + 2 * pad - 2, Wo = W + 2 * pad - 2;
  const int64_t th = (Ho + M - 1) / M, tw = (Wo + M - 1) / M, tiles = th * tw;
  const int64_t Cip = (Ci + kW - 1) / kW * kW, Cop = (Co + kW - 1) / kW * kW;
  const int64_t u_numel = kXi * Cip * Cop;
  // Fixed blocks of chunks (depend on N only): block k sums its chunks' dU into partial[k].
  const int64_t chunks = (N + kChunk - 1) / kChunk, per_block = (chunks + kMaxBlocks - 1) / kMaxBlocks;
  const int64_t blocks = (chunks + per_block - 1) / per_block;
  // not zeroed: each block's first chunk overwrites its whole partial sum
  const auto partial = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(blocks * u_numel));
  std::vector<double> partial_db(static_cast<size_t>(db ? blocks * Co : 0), 0.0);  // (blocks, Co)
  parallel_for(blocks, 1, [&](int64_t k0, int64_t k1) {
    thread_local std::vector<float> plane, sums, V, E;
    for (int64_t k = k0; k < k1; ++k) {
      float* dU = partial.get() + k * u_numel;  // (α², Cip, Cop)
      double* db_k = db ? partial_db.data() + k * Co : nullptr;
      for (int64_t chunk = k * per_block; chunk < std::min(chunks, (k + 1) * per_block); ++chunk) {
        const int64_t n0 = chunk * kChunk, images = std::min(kChunk, N - n0), T = images * tiles;
        const int64_t v_stride = xi_stride(T, Cip), e_stride = xi_stride(T, Cop);  // between the positions ξ
        V.resize(static_cast<size_t>(kXi * v_stride));
        E.resize(static_cast<size_t>(kXi * e_stride));
        transform_input<M>(x + n0 * Ci * H * W, images, Ci, H, W, pad, th, tw, Cip, plane, V);
        transform_output_grad<M>(dy + n0 * Co * Ho * Wo, images, Co, Ho, Wo, th, tw, Cop, plane, sums, E, db_k);
        // dU[ξ] (Cip, Cop) (+)= V[ξ]^T (Cip, T) · E[ξ] (T, Cop)
        const bool accumulate = chunk != k * per_block;  // the block's first chunk starts its sums
        for (int64_t xi = 0; xi < kXi; ++xi) {
          const float* v = V.data() + xi * v_stride;
          const float* e = E.data() + xi * e_stride;
          float* u = dU + xi * Cip * Cop;
          gemm_narrow_at(T, Cip, Cop, v, e, u, accumulate);
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
  float* dU = partial.get();
  sum_blocks_in_order(partial.get(), blocks, u_numel, dU);
  // dw(co, ci) = G^T dU(ci, co) G
  parallel_for(Co, std::max<int64_t>(1, 256 / std::max<int64_t>(Ci, 1)), [&](int64_t o0, int64_t o1) {
    for (int64_t co = o0; co < o1; ++co)
      for (int64_t ci = 0; ci < Ci; ++ci) {
        float t[kA][3];  // t[j] = G^T (column j of dU(ci, co))
        for (int j = 0; j < kA; ++j) {
          float col[kA];
          for (int i = 0; i < kA; ++i) col[i] = dU[((kA * i + j) * Cip + ci) * Cop + co];
          Tile<M>::kernel_grad(col, t[j]);
        }
        float* g = dw + (co * Ci + ci) * 9;
        for (int i = 0; i < 3; ++i) {  // (G^T dU) G, row i
          float row[kA], r[3];
          for (int j = 0; j < kA; ++j) row[j] = t[j][i];
          Tile<M>::kernel_grad(row, r);
          for (int j = 0; j < 3; ++j) g[3 * i + j] = r[j];
        }
      }
  });
}

}  // namespace

void conv3x3_winograd(const float* x, const float* k, const float* b, int64_t N, int64_t Ci, int64_t H, int64_t W,
                      int64_t Co, int64_t pad, bool flip, float* y) {
  const int64_t Ho = H + 2 * pad - 2, Wo = W + 2 * pad - 2;
  if (N <= 0 || Co <= 0 || Ho <= 0 || Wo <= 0) return;
  winograd_forward<4>(x, k, b, N, Ci, H, W, Co, pad, flip, y);
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
  winograd_weight_grad<2>(x, dy, N, Ci, H, W, Co, pad, dw, db);
}

}  // namespace minidl::kernels::cpu
