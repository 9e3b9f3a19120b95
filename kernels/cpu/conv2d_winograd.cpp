// kernels/cpu/conv2d_winograd.cpp — F(2x2, 3x3) Winograd convolution (see conv2d_winograd.h).
//   weights:  U[ξ][co][ci] = (G g(co, ci) G^T)[ξ]                      once per call
//   per chunk of kChunk images, in parallel over chunks:
//     input:  V[ξ][ci][t] = (B^T d(ci, t) B)[ξ]  (t: the chunk's tiles, image-major, row-major)
//     GEMMs:  M[ξ] (Co, T) = U[ξ] (Co, Ci) · V[ξ] (Ci, T)               (kernels/cpu/gemm.h)
//     output: y(co, tile t) = A^T M[.][co][t] A + b[co], clipped at the image's edge
// with B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1],
// A^T = [1 1 1 0; 0 1 -1 -1].
#include "minidl/kernels/cpu/conv2d_winograd.h"

#include <algorithm>
#include <vector>

#include "minidl/kernels/cpu/gemm.h"
#include "minidl/kernels/cpu/parallel.h"

namespace minidl::kernels::cpu {

namespace {

constexpr int64_t kChunk = 8;  // images per unit of work (bounds the V and M buffers)

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

}  // namespace

void conv3x3_winograd(const float* x, const float* k, const float* b, int64_t N, int64_t Ci, int64_t H, int64_t W,
                      int64_t Co, int64_t pad, bool flip, float* y) {
  const int64_t Ho = H + 2 * pad - 2, Wo = W + 2 * pad - 2;
  if (N <= 0 || Co <= 0 || Ho <= 0 || Wo <= 0) return;
  const int64_t th = (Ho + 1) / 2, tw = (Wo + 1) / 2, tiles = th * tw;
  const int64_t Hp = 2 * th + 2, Wp = 2 * tw + 2;  // the zero-padded input plane every tile reads

  // U (16, Co, Ci)
  std::vector<float> U(static_cast<size_t>(16 * Co * Ci));
  parallel_for(Co, std::max<int64_t>(1, 4096 / std::max<int64_t>(Ci, 1)), [&](int64_t o0, int64_t o1) {
    for (int64_t co = o0; co < o1; ++co)
      for (int64_t ci = 0; ci < Ci; ++ci) {
        float g[9], u[16];
        for (int i = 0; i < 9; ++i) g[i] = flip ? k[(ci * Co + co) * 9 + 8 - i] : k[(co * Ci + ci) * 9 + i];
        transform_kernel(g, u);
        for (int xi = 0; xi < 16; ++xi) U[static_cast<size_t>((xi * Co + co) * Ci + ci)] = u[xi];
      }
  });

  const int64_t chunks = (N + kChunk - 1) / kChunk;
  parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
    thread_local std::vector<float> plane, V, Mb;
    for (int64_t chunk = c0; chunk < c1; ++chunk) {
      const int64_t n0 = chunk * kChunk, images = std::min(kChunk, N - n0), T = images * tiles;
      plane.assign(static_cast<size_t>(Hp * Wp), 0.0f);
      V.resize(static_cast<size_t>(16 * Ci * T));
      Mb.resize(static_cast<size_t>(16 * Co * T));
      // V (16, Ci, T)
      for (int64_t img = 0; img < images; ++img)
        for (int64_t ci = 0; ci < Ci; ++ci) {
          const float* src = x + ((n0 + img) * Ci + ci) * H * W;
          for (int64_t r = 0; r < H; ++r)  // interior of the padded plane (its border stays zero)
            std::copy(src + r * W, src + (r + 1) * W, plane.data() + (r + pad) * Wp + pad);
          float* v = V.data() + ci * T + img * tiles;
          const int64_t xi_stride = Ci * T;
          for (int64_t ty = 0; ty < th; ++ty)
            for (int64_t tx = 0; tx < tw; ++tx) {
              const float* p = plane.data() + 2 * ty * Wp + 2 * tx;
              float s[4][4];  // B^T d
              for (int j = 0; j < 4; ++j) {
                const float d0 = p[j], d1 = p[Wp + j], d2 = p[2 * Wp + j], d3 = p[3 * Wp + j];
                s[0][j] = d0 - d2;
                s[1][j] = d1 + d2;
                s[2][j] = d2 - d1;
                s[3][j] = d1 - d3;
              }
              float* out = v + ty * tw + tx;
              for (int i = 0; i < 4; ++i) {  // (B^T d) B
                out[(4 * i + 0) * xi_stride] = s[i][0] - s[i][2];
                out[(4 * i + 1) * xi_stride] = s[i][1] + s[i][2];
                out[(4 * i + 2) * xi_stride] = s[i][2] - s[i][1];
                out[(4 * i + 3) * xi_stride] = s[i][1] - s[i][3];
              }
            }
        }
      // M[ξ] (Co, T) = U[ξ] (Co, Ci) · V[ξ] (Ci, T)
      for (int64_t xi = 0; xi < 16; ++xi)
        gemm_fast(Co, T, Ci, U.data() + xi * Co * Ci, V.data() + xi * Ci * T, Mb.data() + xi * Co * T);
      // y = A^T M A (+ b), clipped
      for (int64_t img = 0; img < images; ++img)
        for (int64_t co = 0; co < Co; ++co) {
          const float bias = b ? b[co] : 0.0f;
          const float* m = Mb.data() + co * T + img * tiles;
          const int64_t xi_stride = Co * T;
          float* out = y + ((n0 + img) * Co + co) * Ho * Wo;
          for (int64_t ty = 0; ty < th; ++ty)
            for (int64_t tx = 0; tx < tw; ++tx) {
              const float* mt = m + ty * tw + tx;
              float s[2][4];  // A^T M
              for (int j = 0; j < 4; ++j) {
                const float m0 = mt[j * xi_stride], m1 = mt[(4 + j) * xi_stride], m2 = mt[(8 + j) * xi_stride],
                            m3 = mt[(12 + j) * xi_stride];
                s[0][j] = m0 + m1 + m2;
                s[1][j] = m1 - m2 - m3;
              }
              for (int i = 0; i < 2; ++i) {  // (A^T M) A
                const int64_t oh = 2 * ty + i, ow = 2 * tx;
                if (oh >= Ho) break;
                out[oh * Wo + ow] = s[i][0] + s[i][1] + s[i][2] + bias;
                if (ow + 1 < Wo) out[oh * Wo + ow + 1] = s[i][1] - s[i][2] - s[i][3] + bias;
              }
            }
        }
    }
  });
}

}  // namespace minidl::kernels::cpu
