// kernels/cpu/conv2d_winograd.cpp — F(2x2, 3x3) Winograd convolution (see conv2d_winograd.h).
// Inside, channels are innermost (padded to a multiple of 16, so every transform step is one
// 16-lane vector operation over channels):
//   weights:  U[ξ][ci][co] = (G g(co, ci) G^T)[ξ]                        once per call
//   per chunk of kChunk images, in parallel over chunks:
//     input:  P = each image zero-padded, (Hp, Wp, Cip);  V[ξ][t][ci] = (B^T d(t, ci) B)[ξ]
//             (t: the chunk's tiles, image-major, row-major)
//     GEMMs:  M[ξ] (T, Cop) = V[ξ] (T, Cip) · U[ξ] (Cip, Cop)               (kernels/cpu/gemm.h)
//     output: (A^T M[.][t][co] A + b[co]) -> (2 th, 2 tw, Cop) per image -> y (Co, Ho, Wo), clipped
// with B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1],
// A^T = [1 1 1 0; 0 1 -1 -1]. Padded channels are zero in U and V and are never written out.
#include "minidl/kernels/cpu/conv2d_winograd.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "minidl/kernels/cpu/gemm.h"
#include "minidl/kernels/cpu/parallel.h"

namespace minidl::kernels::cpu {

namespace {

constexpr int64_t kChunk = 8;  // images per unit of work (bounds the V and M buffers)
constexpr int64_t kLanes = 16;  // channels per vector

// 16 floats as one GCC/Clang vector (one AVX-512 register; split into narrower ones elsewhere).
// Passed by reference only: by value, its calling convention would depend on -march.
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));
inline void load(Vec& v, const float* p) { std::memcpy(&v, p, sizeof v); }
inline void store(float* p, const Vec& v) { std::memcpy(p, &v, sizeof v); }

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
  const int64_t Cip = (Ci + kLanes - 1) / kLanes * kLanes, Cop = (Co + kLanes - 1) / kLanes * kLanes;

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
      plane.assign(static_cast<size_t>(Hp * Wp * Cip), 0.0f);
      V.resize(static_cast<size_t>(16 * T * Cip));
      Mb.resize(static_cast<size_t>(16 * T * Cop));
      out.resize(static_cast<size_t>(2 * th * 2 * tw * Cop));
      const int64_t v_stride = T * Cip, m_stride = T * Cop;  // between the 16 positions ξ
      // V (16, T, Cip)
      for (int64_t img = 0; img < images; ++img) {
        for (int64_t ci = 0; ci < Ci; ++ci) {  // (Ci, H, W) -> the interior of (Hp, Wp, Cip)
          const float* src = x + ((n0 + img) * Ci + ci) * H * W;
          for (int64_t r = 0; r < H; ++r)
            for (int64_t c = 0; c < W; ++c) plane[static_cast<size_t>(((r + pad) * Wp + c + pad) * Cip + ci)] = src[r * W + c];
        }
        for (int64_t ty = 0; ty < th; ++ty)
          for (int64_t tx = 0; tx < tw; ++tx) {
            const int64_t t = img * tiles + ty * tw + tx;
            for (int64_t cv = 0; cv < Cip; cv += kLanes) {
              const float* p = plane.data() + (2 * ty * Wp + 2 * tx) * Cip + cv;
              Vec s[4][4];  // B^T d
              for (int j = 0; j < 4; ++j) {
                Vec d0, d1, d2, d3;
                load(d0, p + j * Cip);
                load(d1, p + (Wp + j) * Cip);
                load(d2, p + (2 * Wp + j) * Cip);
                load(d3, p + (3 * Wp + j) * Cip);
                s[0][j] = d0 - d2;
                s[1][j] = d1 + d2;
                s[2][j] = d2 - d1;
                s[3][j] = d1 - d3;
              }
              float* v = V.data() + t * Cip + cv;
              for (int i = 0; i < 4; ++i) {  // (B^T d) B
                store(v + (4 * i + 0) * v_stride, s[i][0] - s[i][2]);
                store(v + (4 * i + 1) * v_stride, s[i][1] + s[i][2]);
                store(v + (4 * i + 2) * v_stride, s[i][2] - s[i][1]);
                store(v + (4 * i + 3) * v_stride, s[i][1] - s[i][3]);
              }
            }
          }
      }
      // M[ξ] (T, Cop) = V[ξ] (T, Cip) · U[ξ] (Cip, Cop)
      for (int64_t xi = 0; xi < 16; ++xi)
        gemm_fast(T, Cop, Cip, V.data() + xi * v_stride, U.data() + xi * Cip * Cop, Mb.data() + xi * m_stride);
      // y = A^T M A (+ b): (2 th, 2 tw, Cop) per image, then clipped into (Co, Ho, Wo)
      for (int64_t img = 0; img < images; ++img) {
        for (int64_t ty = 0; ty < th; ++ty)
          for (int64_t tx = 0; tx < tw; ++tx) {
            const int64_t t = img * tiles + ty * tw + tx;
            for (int64_t cv = 0; cv < Cop; cv += kLanes) {
              const float* m = Mb.data() + t * Cop + cv;
              Vec bias = {};
              if (b)
                for (int64_t l = 0; l < kLanes && cv + l < Co; ++l) bias[l] = b[cv + l];
              Vec s[2][4];  // A^T M
              for (int j = 0; j < 4; ++j) {
                Vec m0, m1, m2, m3;
                load(m0, m + j * m_stride);
                load(m1, m + (4 + j) * m_stride);
                load(m2, m + (8 + j) * m_stride);
                load(m3, m + (12 + j) * m_stride);
                s[0][j] = m0 + m1 + m2;
                s[1][j] = m1 - m2 - m3;
              }
              for (int i = 0; i < 2; ++i) {  // (A^T M) A
                float* o = out.data() + ((2 * ty + i) * 2 * tw + 2 * tx) * Cop + cv;
                store(o, s[i][0] + s[i][1] + s[i][2] + bias);
                store(o + Cop, s[i][1] - s[i][2] - s[i][3] + bias);
              }
            }
          }
        for (int64_t co = 0; co < Co; ++co) {
          float* dst = y + ((n0 + img) * Co + co) * Ho * Wo;
          for (int64_t oh = 0; oh < Ho; ++oh)
            for (int64_t ow = 0; ow < Wo; ++ow) dst[oh * Wo + ow] = out[static_cast<size_t>((oh * 2 * tw + ow) * Cop + co)];
        }
      }
    }
  });
}

}  // namespace minidl::kernels::cpu
