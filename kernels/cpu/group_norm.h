// kernels/cpu/group_norm.h — group norm on raw pointers, forward beside backward. x (N, C, S)
// contiguous, its C channels in G groups of Cg = C / G: group (n, g) is the contiguous block of
// M = Cg * S values at x + (n * C + g * Cg) * S, normalised by its own mean and biased variance,
// then scaled and shifted per channel c:
//   y = (x - mean) * rstd * weight[c] + bias[c]             rstd = 1 / sqrt(var + eps)
//   dx = rstd * (g - mean_M(g) - xhat * mean_M(g * xhat))   g = dy * weight[c], xhat = (x - mean) * rstd
//   dweight[c] = sum over n, s of dy * xhat                 dbias[c] = sum over n, s of dy
// group_norm_forward / _backward (float) do each group in one task: the forward takes the mean
// and the centred sum of squares in double (the layer norm rows' loops, layer_norm.h), then
// writes y = x * a[c] + b[c] with a = rstd * weight[c], b = bias[c] - mean * a (per-channel
// coefficients in double, rounded to float once, as PyTorch's CPU kernel does); the backward sums
// dy and dy * x per channel in double, turns them into the group's two sums and each channel's
// dweight / dbias terms, then writes dx = dy * a[c] + x * bx + c0 (float, the coefficients in
// double). That replaces reshape + layer_norm + mul + add (three passes over memory forward, six
// backward) by one pass each way over a group held in cache. The *_reference templates are the
// plain loops in double (also the float64 path), which tests/kernels/test_cpu_group_norm.cpp
// compares the fast kernels with. relu (forward): a ReLU after the group norm in the same pass,
// y = relu(that) as relu_bits (kernels/cpu/norm.h) computes it: the two ops' bits with one pass
// over memory fewer (autograd's group_norm_relu). relu (backward): dy is masked where that y is
// <= 0, y rebuilt from x as the forward computes it (the same bits: both normalise a group with
// its stored mean and rstd), in place of a relu_backward pass over y and dy before the backward.
// Reproducibility: every sum runs in an order fixed by the shape; dweight / dbias add the
// per-(n, c) terms in n order after the parallel loop: no result depends on the thread count.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "minidl/kernels/cpu/layer_norm.h"
#include "minidl/kernels/cpu/norm.h"
#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/cpu/vec_math.h"

namespace minidl::kernels::cpu {

// The reference's y of one value of channel c, in double: ((x - mean) * rstd) * weight[c] + bias[c]
template <class T>
inline T group_norm_value_reference(T x, double m, double is, const T* weight, const T* bias, int64_t c) {
  double v = (x - m) * is;
  if (weight) v *= weight[c];
  if (bias) v += bias[c];
  return static_cast<T>(v);
}

// x (N, C, S) -> y (N, C, S), mean (N, G), rstd (N, G); weight / bias (C) or null.
template <class T>
void group_norm_forward_reference(const T* x, int64_t N, int64_t C, int64_t S, int64_t G, const T* weight,
                                  const T* bias, double eps, T* y, T* mean, T* rstd, bool relu = false) {
  const int64_t Cg = C / G, M = Cg * S;
  parallel_for(N * G, norm_grain(M), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const T* xp = x + t * M;
      T* yp = y + t * M;
      double sum = 0, ss = 0;
      for (int64_t j = 0; j < M; ++j) sum += xp[j];
      mean[t] = static_cast<T>(sum / static_cast<double>(M));
      const double m = mean[t];  // the stored values normalise: the backward rebuilds y from them
      for (int64_t j = 0; j < M; ++j) ss += (xp[j] - m) * (xp[j] - m);
      rstd[t] = static_cast<T>(1.0 / std::sqrt(ss / static_cast<double>(M) + eps));
      const double is = rstd[t];
      for (int64_t j = 0; j < M; ++j) {
        const T v = group_norm_value_reference(xp[j], m, is, weight, bias, t % G * Cg + j / S);
        yp[j] = relu ? relu_bits(v) : v;
      }
    }
  });
}

// dy, x (N, C, S), mean, rstd (N, G), weight (C) or null -> dx (N, C, S), dweight, dbias (C) in
// double (dweight's sum is the gradient of a weight of ones when weight is null).
// relu: dy masked where the forward's y (rebuilt from x, bias and the rest) is <= 0.
template <class T>
void group_norm_backward_reference(const T* dy, const T* x, int64_t N, int64_t C, int64_t S, int64_t G, const T* mean,
                                   const T* rstd, const T* weight, T* dx, double* dweight, double* dbias,
                                   const T* bias = nullptr, bool relu = false) {
  const int64_t Cg = C / G, M = Cg * S;
  auto w = [&](int64_t c) { return weight ? static_cast<double>(weight[c]) : 1.0; };
  auto grad = [&](int64_t t, int64_t j) {  // dy at value j of group t, masked by the ReLU
    const int64_t c = t % G * Cg + j / S;
    const T g = dy[t * M + j];
    return relu ? relu_grad_bits(group_norm_value_reference(x[t * M + j], mean[t], rstd[t], weight, bias, c), g) : g;
  };
  parallel_for(N * G, norm_grain(M), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const T* xp = x + t * M;
      const double m = mean[t], is = rstd[t];
      double sg = 0, sgx = 0;  // sums of dy * w and dy * w * xhat
      for (int64_t j = 0; j < M; ++j) {
        const double gw = grad(t, j) * w(t % G * Cg + j / S);
        sg += gw;
        sgx += gw * (xp[j] - m) * is;
      }
      const double mg = sg / static_cast<double>(M), mgx = sgx / static_cast<double>(M);
      for (int64_t j = 0; j < M; ++j) {
        const double gw = grad(t, j) * w(t % G * Cg + j / S);
        dx[t * M + j] = static_cast<T>(is * (gw - mg - (xp[j] - m) * is * mgx));
      }
    }
  });
  for (int64_t c = 0; c < C; ++c) dweight[c] = dbias[c] = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t t = n * G + c / Cg;
      const T* xp = x + (n * C + c) * S;
      for (int64_t s = 0; s < S; ++s) {
        const double g = grad(t, c % Cg * S + s);
        dweight[c] += g * ((xp[s] - static_cast<double>(mean[t])) * rstd[t]);
        dbias[c] += g;
      }
    }
}

// y = x * a + b for channel c of a float group: a = rstd * weight[c], b = bias[c] - mean * a in
// double, each rounded to float once. The forward and the backward's rebuilt ReLU mask both take
// them from the group's stored (float) mean and rstd, so they agree to the bit.
struct GroupNormAffine {
  float a, b;
};
inline GroupNormAffine group_norm_affine(double m, double is, const float* weight, const float* bias, int64_t c) {
  const double a = weight ? is * weight[c] : is;
  return {static_cast<float>(a), static_cast<float>((bias ? bias[c] : 0.0) - m * a)};
}
// One channel's y before the ReLU: group_norm_group's and the mask's loops share it.
inline float group_norm_value(float x, GroupNormAffine k) { return x * k.a + k.b; }

// One float group: x, y (Cg, S), weight / bias its Cg channels' (or null).
inline void group_norm_group(const float* __restrict x, int64_t Cg, int64_t S, const float* weight, const float* bias,
                             double eps, float* __restrict y, float* mean, float* rstd, bool relu) {
  const int64_t M = Cg * S;
  *mean = static_cast<float>(sum_span(x, M) / static_cast<double>(M));
  const double m = *mean;  // the stored values normalise: the backward rebuilds y from them
  *rstd = static_cast<float>(1.0 / std::sqrt(centered_square_sum(x, M, m) / static_cast<double>(M) + eps));
  const double is = *rstd;
  for (int64_t c = 0; c < Cg; ++c) {
    const GroupNormAffine k = group_norm_affine(m, is, weight, bias, c);
    const float* __restrict xc = x + c * S;
    float* __restrict yc = y + c * S;
    if (relu) {
#pragma omp simd
      for (int64_t s = 0; s < S; ++s) yc[s] = relu_bits(group_norm_value(xc[s], k));
    } else {
#pragma omp simd
      for (int64_t s = 0; s < S; ++s) yc[s] = group_norm_value(xc[s], k);
    }
  }
}

template <class T>
void group_norm_forward(const T* x, int64_t N, int64_t C, int64_t S, int64_t G, const T* weight, const T* bias,
                        double eps, T* y, T* mean, T* rstd, bool relu = false) {
  if constexpr (std::is_same_v<T, float>) {
    const int64_t Cg = C / G, M = Cg * S;
    parallel_for(N * G, norm_grain(M), [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t c0 = t % G * Cg;
        group_norm_group(x + t * M, Cg, S, weight ? weight + c0 : nullptr, bias ? bias + c0 : nullptr, eps, y + t * M,
                         mean + t, rstd + t, relu);
      }
    });
  } else {
    group_norm_forward_reference(x, N, C, S, G, weight, bias, eps, y, mean, rstd, relu);
  }
}

// sum of dy and of dy * x over n floats, in double (16 lanes as two 8-double halves, the tail last)
inline void channel_sums(const float* __restrict g, const float* __restrict x, int64_t n, double& sdy, double& sdyx) {
  DoubleLanes dy_lo = {}, dy_hi = {}, dyx_lo = {}, dyx_hi = {};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    DoubleLanes glo, ghi, xlo, xhi;
    as_doubles(load_lanes(g + j), glo, ghi);
    as_doubles(load_lanes(x + j), xlo, xhi);
    dy_lo += glo;
    dy_hi += ghi;
    dyx_lo += glo * xlo;
    dyx_hi += ghi * xhi;
  }
  sdy = lanes_sum(dy_lo, dy_hi);
  sdyx = lanes_sum(dyx_lo, dyx_hi);
  for (; j < n; ++j) {
    sdy += g[j];
    sdyx += static_cast<double>(g[j]) * x[j];
  }
}

// One float group of the backward: dy, x, dx (Cg, S); part (Cg, 2) <- each channel's
// {sum dy * xhat, sum dy}.
inline void group_norm_backward_group(const float* __restrict dy, const float* __restrict x, int64_t Cg, int64_t S,
                                      double m, double is, const float* weight, float* __restrict dx,
                                      double* __restrict part) {
  double sg = 0, sgx = 0;  // the group's sums of g = dy * w and of g * (x - mean)
  for (int64_t c = 0; c < Cg; ++c) {
    double sdy, sdyx;
    channel_sums(dy + c * S, x + c * S, S, sdy, sdyx);
    const double w = weight ? weight[c] : 1.0, centred = sdyx - m * sdy;  // sum dy * (x - mean)
    sg += w * sdy;
    sgx += w * centred;
    part[2 * c] = centred * is;
    part[2 * c + 1] = sdy;
  }
  // dx = is * (g - mean(g)) - (x - mean) * k,  k = is^3 * mean(g * (x - mean))
  const double M = static_cast<double>(Cg * S), k = is * is * is * sgx / M;
  const float bx = static_cast<float>(-k), c0 = static_cast<float>(k * m - is * sg / M);
  for (int64_t c = 0; c < Cg; ++c) {
    const float a = static_cast<float>(weight ? is * weight[c] : is);
    const float* __restrict g = dy + c * S;
    const float* __restrict xc = x + c * S;
    float* __restrict o = dx + c * S;
#pragma omp simd
    for (int64_t s = 0; s < S; ++s) o[s] = g[s] * a + (xc[s] * bx + c0);
  }
}

// One float group's dy masked by the ReLU after the group norm: masked (Cg, S) = dy where the
// forward's y, rebuilt from x (group_norm_affine, group_norm_value), is > 0 (or NaN), else 0.
inline void group_norm_relu_mask(const float* __restrict dy, const float* __restrict x, int64_t Cg, int64_t S, double m,
                                 double is, const float* weight, const float* bias, float* __restrict masked) {
  for (int64_t c = 0; c < Cg; ++c) {
    const GroupNormAffine k = group_norm_affine(m, is, weight, bias, c);
    const float* __restrict g = dy + c * S;
    const float* __restrict xc = x + c * S;
    float* __restrict o = masked + c * S;
#pragma omp simd
    for (int64_t s = 0; s < S; ++s) o[s] = relu_grad_bits(group_norm_value(xc[s], k), g[s]);
  }
}

// part: (N, C, 2) doubles, the caller's scratch. bias, relu: as group_norm_backward_reference's.
// With the ReLU each group's masked dy goes through a per-thread scratch of one group, which the
// group's two passes then read from cache.
template <class T>
void group_norm_backward(const T* dy, const T* x, int64_t N, int64_t C, int64_t S, int64_t G, const T* mean,
                         const T* rstd, const T* weight, T* dx, double* part, double* dweight, double* dbias,
                         const T* bias = nullptr, bool relu = false) {
  if constexpr (std::is_same_v<T, float>) {
    const int64_t Cg = C / G, M = Cg * S;
    parallel_for(N * G, norm_grain(M), [&](int64_t t0, int64_t t1) {
      thread_local std::vector<float> masked;
      if (relu) masked.resize(static_cast<size_t>(M));
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t c0 = t % G * Cg;
        const float* w = weight ? weight + c0 : nullptr;
        const float* g = dy + t * M;
        if (relu) {
          group_norm_relu_mask(g, x + t * M, Cg, S, mean[t], rstd[t], w, bias ? bias + c0 : nullptr, masked.data());
          g = masked.data();
        }
        group_norm_backward_group(g, x + t * M, Cg, S, mean[t], rstd[t], w, dx + t * M, part + 2 * t * Cg);
      }
    });
    add_planes_in_n_order(part, N, C, dweight, dbias);
  } else {
    group_norm_backward_reference(dy, x, N, C, S, G, mean, rstd, weight, dx, dweight, dbias, bias, relu);
  }
}

}  // namespace minidl::kernels::cpu
