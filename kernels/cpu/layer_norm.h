// kernels/cpu/layer_norm.h — layer norm on raw pointers: x seen as (rows, M), each row normalised
// (mean and biased variance over its M values), forward beside backward, each fast loop next to
// the reference it is tested against (tests/tensor/test_cpu_fast_paths.cpp):
//   layer_norm_forward   float rows: the row sums 16 lanes at a time in two 8-double halves, the
//                        element loop in float (layer_norm_row); float64: layer_norm_forward_reference
//   layer_norm_backward  one pass over dy and x for dx and the weight / bias gradients, against
//                        layer_norm_backward_reference (a pass for dx, then one for the sums)
// Precision: the references compute in double; the fast float paths sum each row in double and
// compute the elements in float, as PyTorch does (equal to float rounding, tested).
// Reproducibility: the row sums are fixed-order lane sums (kernels/cpu/vec_math.h); the weight
// gradient sums fixed 32-row chunks, then the chunks in order: no result depends on the thread
// count. Also tested through tensor/ops_norm.cpp by
// tests/tensor/test_ops_norm.cpp (hand-computed values, float64 finite differences).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "minidl/kernels/cpu/norm.h"
#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/cpu/vec_math.h"

namespace minidl::kernels::cpu {

// x (rows, M) -> y (rows, M), mean (rows), invstd (rows); weight / bias (M) or null. The plain
// loops (each row's sums one vec_math.h simd_sum): the float64 path, and the reference of the
// float rows below.
template <class T>
void layer_norm_forward_reference(const T* x, int64_t rows, int64_t M, const T* weight, const T* bias, double eps, T* y,
                                  T* mean, T* invstd) {
  parallel_for(rows, norm_grain(M), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xp = x + r * M;
      T* yp = y + r * M;
      const double m = simd_sum(M, [&](int64_t j) { return xp[j]; }) / static_cast<double>(M);
      const double ss = simd_sum(M, [&](int64_t j) {
        const double d = static_cast<double>(xp[j]) - m;
        return d * d;
      });
      const double is = 1.0 / std::sqrt(ss / static_cast<double>(M) + eps);
      for (int64_t j = 0; j < M; ++j) {
        double v = (xp[j] - m) * is;
        if (weight) v *= weight[j];
        if (bias) v += bias[j];
        yp[j] = static_cast<T>(v);
      }
      mean[r] = static_cast<T>(m);
      invstd[r] = static_cast<T>(is);
    }
  });
}

// sum of (x - m)^2 over M floats, in double: 16 at a time as two 8-double halves, the tail last
// (also group norm's, group_norm.h)
inline double centered_square_sum(const float* __restrict xp, int64_t M, double m) {
  const int64_t M16 = M - M % 16;
  DoubleLanes lo = {}, hi = {};
  for (int64_t j = 0; j < M16; j += 16) {
    DoubleLanes dlo, dhi;
    as_doubles(load_lanes(xp + j), dlo, dhi);
    dlo -= m;
    dhi -= m;
    lo += dlo * dlo;
    hi += dhi * dhi;
  }
  double ss = lanes_sum(lo, hi);
  for (int64_t j = M16; j < M; ++j) {
    const double d = static_cast<double>(xp[j]) - m;
    ss += d * d;
  }
  return ss;
}

// One float row of layer norm (the ViT's rows are 64 long: an omp simd reduction's set-up costs
// more than such a row, so this is faster than the reference). The mean and the centred sum of
// squares in double, 16 floats at a time as two 8-double halves (the order of the row sums
// differs from the reference's: lanes, then the tail); the element loop in float, as PyTorch
// computes it, with the mean split into two floats (mh + ml) so that x - mean loses nothing to a
// mean far from zero. The loop would be compute-bound in double (four conversions an element);
// in float it runs at memory speed.
template <bool kWeight, bool kBias>
void layer_norm_row(const float* __restrict xp, int64_t M, const float* __restrict weight, const float* __restrict bias,
                    double eps, float* __restrict yp, float* mean, float* invstd) {
  const double m = sum_span(xp, M) / static_cast<double>(M);
  const double ss = centered_square_sum(xp, M, m);
  const double is = 1.0 / std::sqrt(ss / static_cast<double>(M) + eps);
  const float mh = static_cast<float>(m), ml = static_cast<float>(m - mh), a = static_cast<float>(is);
#pragma omp simd
  for (int64_t j = 0; j < M; ++j) {
    float v = ((xp[j] - mh) - ml) * a;
    if constexpr (kWeight) v *= weight[j];
    if constexpr (kBias) v += bias[j];
    yp[j] = v;
  }
  *mean = mh;
  *invstd = a;
}

template <bool kWeight, bool kBias>
void layer_norm_forward_rows(const float* x, int64_t rows, int64_t M, const float* weight, const float* bias,
                             double eps, float* y, float* mean, float* invstd) {
  parallel_for(rows, norm_grain(M), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      prefetch_elements(x + r * M + kPrefetchAhead, M);  // x's rows a little ahead (prefetch.h)
      layer_norm_row<kWeight, kBias>(x + r * M, M, weight, bias, eps, y + r * M, mean + r, invstd + r);
    }
  });
}

template <class T>
void layer_norm_forward(const T* x, int64_t rows, int64_t M, const T* weight, const T* bias, double eps, T* y, T* mean,
                        T* invstd) {
  if constexpr (std::is_same_v<T, float>) {
    if (weight && bias) return layer_norm_forward_rows<true, true>(x, rows, M, weight, bias, eps, y, mean, invstd);
    if (weight) return layer_norm_forward_rows<true, false>(x, rows, M, weight, bias, eps, y, mean, invstd);
    if (bias) return layer_norm_forward_rows<false, true>(x, rows, M, weight, bias, eps, y, mean, invstd);
    return layer_norm_forward_rows<false, false>(x, rows, M, weight, bias, eps, y, mean, invstd);
  } else {
    layer_norm_forward_reference(x, rows, M, weight, bias, eps, y, mean, invstd);
  }
}

// dx (rows, M) = invstd * (g - mean_j(g) - xhat * mean_j(g * xhat)), g = dy * weight, xhat = (x - mean) * invstd.
template <class T>
void layer_norm_backward_input_reference(const T* dy, const T* x, int64_t rows, int64_t M, const T* mean,
                                         const T* invstd, const T* weight, T* dx) {
  parallel_for(rows, norm_grain(M), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* g = dy + r * M;
      const T* xp = x + r * M;
      T* o = dx + r * M;
      const double m = mean[r], is = invstd[r];
      auto gw = [&](int64_t j) { return weight ? static_cast<double>(g[j]) * weight[j] : static_cast<double>(g[j]); };
      const double sg = simd_sum(M, gw);
      const double sgx = simd_sum(M, [&](int64_t j) { return gw(j) * (static_cast<double>(xp[j]) - m) * is; });
      const double mg = sg / static_cast<double>(M), mgx = sgx / static_cast<double>(M);
      for (int64_t j = 0; j < M; ++j) {
        const double gj = weight ? static_cast<double>(g[j]) * weight[j] : static_cast<double>(g[j]);
        o[j] = static_cast<T>(is * (gj - mg - (xp[j] - m) * is * mgx));
      }
    }
  });
}

// dweight (M) = sum over rows of dy * xhat, dbias (M) = sum over rows of dy; in fixed 32-row chunks.
template <class T>
void layer_norm_backward_affine_reference(const T* dy, const T* x, int64_t rows, int64_t M, const T* mean,
                                          const T* invstd, double* dweight, double* dbias) {
  constexpr int64_t kChunk = 32;
  const int64_t chunks = (rows + kChunk - 1) / kChunk;
  std::vector<double> part(static_cast<size_t>(2 * chunks * M), 0.0);  // (chunks, 2, M)
  parallel_for(chunks, norm_grain(kChunk * M), [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      double* pw = part.data() + 2 * k * M;
      double* pb = pw + M;
      const int64_t r_end = std::min(rows, (k + 1) * kChunk);
      for (int64_t r = k * kChunk; r < r_end; ++r) {
        const T* g = dy + r * M;
        const T* xp = x + r * M;
        const double m = mean[r], is = invstd[r];
        for (int64_t j = 0; j < M; ++j) {
          pw[j] += g[j] * ((xp[j] - m) * is);
          pb[j] += g[j];
        }
      }
    }
  });
  parallel_for(M, 1024, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      double w = 0, b = 0;
      for (int64_t k = 0; k < chunks; ++k) {
        w += part[static_cast<size_t>(2 * k * M + j)];
        b += part[static_cast<size_t>((2 * k + 1) * M + j)];
      }
      dweight[j] = w;
      dbias[j] = b;
    }
  });
}

// layer_norm_backward's reference: dx as layer_norm_backward_input_reference, then, with a
// weight, dweight / dbias as layer_norm_backward_affine_reference (two passes over dy and x).
template <class T>
void layer_norm_backward_reference(const T* dy, const T* x, int64_t rows, int64_t M, const T* mean, const T* invstd,
                                   const T* weight, T* dx, double* dweight, double* dbias) {
  layer_norm_backward_input_reference(dy, x, rows, M, mean, invstd, weight, dx);
  if (weight) layer_norm_backward_affine_reference(dy, x, rows, M, mean, invstd, dweight, dbias);
}

// Layer norm's whole backward in one pass over dy and x: dx and, when weight is given, dweight /
// dbias, as layer_norm_backward_reference computes them (equal to rounding). Faster than the
// reference because dy and x are read once, not twice: a row's two sums in one vectorised loop,
// then dx and the chunk's column sums in a second. The row sums accumulate in double; the element
// loop computes in T (float rows in float, as PyTorch does: in double the loop is compute-bound);
// the column sums of a chunk of 32 rows in T into part, then the chunks in order in double (no
// dependence on the thread count). part: (layer_norm_chunks(rows), 2, M) values of T, the caller's
// scratch (from the tensor allocator: a steady-state step then maps no memory), written here.
inline constexpr int64_t kLayerNormChunk = 32;
inline int64_t layer_norm_chunks(int64_t rows) { return (rows + kLayerNormChunk - 1) / kLayerNormChunk; }

// One chunk of rows of layer_norm_backward; kWeight: weight given (else 1, and no affine sums;
// pw / pb, the chunk's column sums, are then null).
template <bool kWeight, class T>
void layer_norm_backward_rows(const T* __restrict dy, const T* __restrict x, int64_t r0, int64_t r1, int64_t M,
                              const T* mean, const T* invstd, const T* __restrict weight, T* __restrict dx,
                              T* __restrict pw, T* __restrict pb) {
  if constexpr (kWeight) {
    std::fill(pw, pw + M, T(0));
    std::fill(pb, pb + M, T(0));
  }
  for (int64_t r = r0; r < r1; ++r) {
    const T* __restrict g = dy + r * M;
    const T* __restrict xp = x + r * M;
    T* __restrict o = dx + r * M;
    prefetch_elements(xp + kPrefetchAhead, M);  // the rows a little ahead (prefetch.h): x has left
    prefetch_elements(g + kPrefetchAhead, M);  // the caches since the forward
    const T m = mean[r], is = invstd[r];
    double sg = 0, sgx = 0;  // sums of g * w and g * w * xhat, xhat = (x - mean) * invstd
    int64_t j0 = 0;
    if constexpr (std::is_same_v<T, float>) {  // 16 lanes, each sum as two 8-double halves
      DoubleLanes sg_lo = {}, sg_hi = {}, sgx_lo = {}, sgx_hi = {};
      for (; j0 + 16 <= M; j0 += 16) {
        FloatLanes gw = load_lanes(g + j0);
        if constexpr (kWeight) gw *= load_lanes(weight + j0);
        const FloatLanes xhat = (load_lanes(xp + j0) - m) * is;
        add_as_doubles(gw, sg_lo, sg_hi);
        add_as_doubles(gw * xhat, sgx_lo, sgx_hi);
      }
      sg = lanes_sum(sg_lo, sg_hi);
      sgx = lanes_sum(sgx_lo, sgx_hi);
    }
    for (int64_t j = j0; j < M; ++j) {
      const T gw = kWeight ? g[j] * weight[j] : g[j];
      sg += gw;
      sgx += gw * ((xp[j] - m) * is);
    }
    // dx = invstd * (g w - mean(g w) - xhat * mean(g w xhat))
    const T mg = static_cast<T>(sg / static_cast<double>(M)), mgx = static_cast<T>(sgx / static_cast<double>(M));
#pragma omp simd
    for (int64_t j = 0; j < M; ++j) {
      const T xhat = (xp[j] - m) * is;
      const T gj = g[j];
      o[j] = is * ((kWeight ? gj * weight[j] : gj) - mg - xhat * mgx);
      if constexpr (kWeight) {
        pw[j] += gj * xhat;
        pb[j] += gj;
      }
    }
  }
}

template <class T>
void layer_norm_backward(const T* dy, const T* x, int64_t rows, int64_t M, const T* mean, const T* invstd,
                         const T* weight, T* dx, T* part, double* dweight, double* dbias) {
  const int64_t chunks = layer_norm_chunks(rows);
  parallel_for(chunks, norm_grain(kLayerNormChunk * M), [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t r0 = k * kLayerNormChunk, r1 = std::min(rows, r0 + kLayerNormChunk);
      if (weight) {
        layer_norm_backward_rows<true>(dy, x, r0, r1, M, mean, invstd, weight, dx, part + 2 * k * M,
                                       part + (2 * k + 1) * M);
      } else {
        layer_norm_backward_rows<false, T>(dy, x, r0, r1, M, mean, invstd, weight, dx, nullptr, nullptr);
      }
    }
  });
  if (!weight) return;
  parallel_for(M, 1024, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      double w = 0, b = 0;
      for (int64_t k = 0; k < chunks; ++k) {
        w += part[2 * k * M + j];
        b += part[(2 * k + 1) * M + j];
      }
      dweight[j] = w;
      dbias[j] = b;
    }
  });
}

}  // namespace minidl::kernels::cpu
