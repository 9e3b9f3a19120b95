// kernels/cpu/norm.h — batch norm on raw pointers, forward beside backward (layer norm:
// kernels/cpu/layer_norm.h), and norm_grain, the parallel chunking both use.
//
// Batch norm sees x as (N, C, S) (S = product of the trailing dims, 1 for (N, C) input) and is
// split like PyTorch's kernels: stats (per-channel mean and invstd), elemt (normalise + affine),
// backward_reduce (per-channel sums of dy and dy*(x-mean)), backward_elemt (dx from those sums).
//
// Reproducibility: sums accumulate in double. Every reduction runs in a fixed order that does
// not depend on the thread count: each plane (n, c)'s sum is one vectorised reduction whose order
// is fixed at compile time, and a channel's sum adds its planes' sums in n order
// (channel_sums_in_n_order: which thread computes which plane never changes a bit).
// Per-channel vectors (mean, invstd, weight, bias, sums) come in as double arrays; a null weight
// means 1 and a null bias means 0. A ReLU after the batch norm can be fused: elemt applies it,
// the backward pieces mask dy where its output is <= 0, rebuilding that output from x (a
// BatchNormAffine: the forward's expression, so the forward's bits) instead of reading it back. A
// ReLU and a 2x2 max-pool after it can be fused too (batch_norm_relu_max_pool2d_*).
// Tested through tensor/ops_norm.cpp by tests/tensor/test_ops_norm.cpp (hand-computed values, a
// full batch-norm backward assembled from the pieces, float64 finite differences).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "minidl/kernels/batch_norm_gather.h"
#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/cpu/pool.h"

namespace minidl::kernels::cpu {

// Items per parallel chunk so that a chunk touches at least ~16K elements (tiny inputs stay on
// one thread). Chunking decides which thread runs what, never the order of any sum.
inline int64_t norm_grain(int64_t elems_per_item) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(elems_per_item, 1));
}

// A channel's per-plane sums {a, b}, added in n order into sum_a[c] and sum_b[c] from part (N, C, 2):
// image by image, so that part is read in order.
inline void add_planes_in_n_order(const double* part, int64_t N, int64_t C, double* sum_a, double* sum_b) {
  std::fill(sum_a, sum_a + C, 0.0);
  std::fill(sum_b, sum_b + C, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      sum_a[c] += part[2 * (n * C + c)];
      sum_b[c] += part[2 * (n * C + c) + 1];
    }
}

// Planes of at least this many elements are read in memory order (see channel_sums_in_n_order):
// from a plane of one cache line (16 floats, a 4 x 4 feature map) on, the channel-by-channel walk
// is the slower one (a batch norm over (128, 512, 16) sums in half the time in memory order), and
// below it the scratch's two doubles per plane cost more than the walk's jumps.
constexpr int64_t kMemoryOrderMinPlane = 16;

struct PlaneSums {
  double a, b;
};

// The (N, C, 2) scratch of channel_sums_in_n_order: one per thread, shared by every instantiation,
// and reused (a fresh one would be page-faulted in every call)
inline std::vector<double>& plane_sums_scratch() {
  thread_local std::vector<double> scratch;
  return scratch;
}

// For every channel c: sum_a[c], sum_b[c] = the sums over n, in n order, of plane_sums(n * C + c)
// (a PlaneSums of plane (n, c), S elements, computed from that plane alone). Large planes are
// summed in memory order, in parallel over the N*C planes, into a scratch (N, C, 2) that is then
// added in n order: a thread walking one channel through the images would jump C*S elements
// after every plane, and the hardware prefetchers stop at each jump (three to four times slower
// on 32 x 32 planes). Small planes are walked channel by channel (threads split channels), which
// writes no scratch. Both walks add the same planes' sums in the same order; a plane's own sums
// can differ in the last bit between the two, where GCC contracts a multiply and an add into an
// FMA in one inlined copy of plane_sums and not in the other. The walk depends on the shape alone,
// never on the thread count.
template <class F>
void channel_sums_in_n_order(int64_t N, int64_t C, int64_t S, const F& plane_sums, double* sum_a, double* sum_b) {
  if (S < kMemoryOrderMinPlane) {
    parallel_for(C, norm_grain(N * S), [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        double sa = 0, sb = 0;
        for (int64_t n = 0; n < N; ++n) {
          const PlaneSums p = plane_sums(n * C + c);
          sa += p.a;
          sb += p.b;
        }
        sum_a[c] = sa;
        sum_b[c] = sb;
      }
    });
    return;
  }
  std::vector<double>& scratch = plane_sums_scratch();
  scratch.resize(static_cast<size_t>(2 * N * C));
  double* part = scratch.data();
  parallel_for(N * C, norm_grain(S), [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl) {
      const PlaneSums p = plane_sums(pl);
      part[2 * pl] = p.a;
      part[2 * pl + 1] = p.b;
    }
  });
  add_planes_in_n_order(part, N, C, sum_a, sum_b);
}

// ---- batch norm ----

// x (N, C, S) -> mean (C), invstd (C) = 1 / sqrt(biased_var + eps). One pass per channel over
// d = x - shift, with shift the channel's first value (so sum(d^2) - sum(d)^2 / count does not
// cancel catastrophically): mean = shift + sum(d) / count, var = sum(d^2) / count - (sum(d) /
// count)^2. Each plane's sums are one `omp simd` reduction (as vec_math.h's simd_sum: one partial
// sum per lane, its order fixed at compile time), added plane by plane in n order.
template <class T> void batch_norm_stats(const T* x, int64_t N, int64_t C, int64_t S, double eps, T* mean, T* invstd) {
  const double count = static_cast<double>(N * S);
  std::vector<double> sum(static_cast<size_t>(C)), sum_sq(static_cast<size_t>(C));
  channel_sums_in_n_order(
      N, C, S,
      [&](int64_t pl) {
        const double shift = static_cast<double>(x[pl % C * S]);
        const T* p = x + pl * S;
        double s = 0, q = 0;
#pragma omp simd reduction(+ : s, q)
        for (int64_t i = 0; i < S; ++i) {
          const double d = static_cast<double>(p[i]) - shift;
          s += d;
          q += d * d;
        }
        return PlaneSums{s, q};
      },
      sum.data(), sum_sq.data());
  for (int64_t c = 0; c < C; ++c) {
    const double md = sum[c] / count;
    const double var = std::max(0.0, sum_sq[c] / count - md * md);
    mean[c] = static_cast<T>(static_cast<double>(x[c * S]) + md);
    invstd[c] = static_cast<T>(1.0 / std::sqrt(var + eps));
  }
}

// kernels/functors.h's ReluOp (v < 0 ? 0 : v) and ReluBackward (r <= 0 ? 0 : g; a NaN r keeps g)
// on the values' bits: under the default -ftrapping-math GCC keeps a loop's float compare and
// select as branches (mispredicted half the time around a ReLU); integer masks vectorise.
template <class T> inline T relu_bits(T v) {
  using I = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
  I vb;
  std::memcpy(&vb, &v, sizeof vb);
  const I inf_bits = sizeof(T) == 4 ? I(0x7f800000) : I(0x7ff0000000000000);
  const I abs = vb & std::numeric_limits<I>::max();
  const I drop = -static_cast<I>((vb < 0) & (abs != 0) & (abs <= inf_bits));  // v < 0: all ones
  vb &= ~drop;
  T out;
  std::memcpy(&out, &vb, sizeof out);
  return out;
}
template <class T> inline T relu_grad_bits(T r, T g) {
  using I = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
  I rb, gb;
  std::memcpy(&rb, &r, sizeof rb);
  std::memcpy(&gb, &g, sizeof gb);
  const I inf_bits = sizeof(T) == 4 ? I(0x7f800000) : I(0x7ff0000000000000);
  const I drop = -static_cast<I>((rb <= 0) & ((rb & std::numeric_limits<I>::max()) <= inf_bits));  // r <= 0: all ones
  gb &= ~drop;
  T out;
  std::memcpy(&out, &gb, sizeof out);
  return out;
}
// Whether relu_grad_bits(r, g) passes g: r > 0, or r is a NaN.
template <class T> inline bool relu_keeps(T r) {
  const T one(1);
  return relu_grad_bits(r, one) == one;
}
// g where bit number `bit` of `flags` is set, else +0, without a branch.
template <class T> inline T keep_if_bit(uint8_t flags, int bit, T g) {
  using I = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
  I gb;
  std::memcpy(&gb, &g, sizeof gb);
  gb &= -((static_cast<I>(flags) >> bit) & 1);
  T out;
  std::memcpy(&out, &gb, sizeof out);
  return out;
}

// (x - m) * scale + b, the batch norm's output before its ReLU, as every kernel here computes it:
// the forward's loops and the backward's rebuilt ReLU mask get the same bits from one expression.
template <class T> inline T batch_norm_value(T x, double m, double scale, double b) {
  return static_cast<T>((x - m) * scale + b);
}

// y[i] = relu((x[i] - m) * scale + b), i < n: batch_norm_elemt's ReLU loop, shared with the fused
// batch norm + ReLU + max-pool below so that both compute the same bits.
template <class T> inline void batch_norm_relu_row(const T* x, int64_t n, double m, double scale, double b, T* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = relu_bits(batch_norm_value(x[i], m, scale, b));
}

// The per-channel affine of batch_norm_elemt: value = (x - mean) * scale(c) + shift(c).
// The backward pieces take one as `relu` when a ReLU followed the batch norm: they mask dy where
// the forward's output is <= 0 (kernels/functors.h's ReluBackward), rebuilding each output value
// from x (batch_norm_value, the forward's bits) rather than reading it back. That is a pass over
// memory fewer in each piece, for one multiply-add a value. relu_grad_bits of the value before
// the ReLU masks exactly where it does of the ReLU's output: both are <= 0 (or NaN) at the same
// places.
struct BatchNormAffine {
  const double* invstd;
  const double* weight;  // null: 1
  const double* bias;  // null: 0
  double scale(int64_t c) const { return invstd[c] * (weight ? weight[c] : 1.0); }
  double shift(int64_t c) const { return bias ? bias[c] : 0.0; }
};

// y (N, C, S) = (x - mean[c]) * invstd[c] * weight[c] + bias[c]; parallel over the N*C planes.
// relu: y = relu(that) in the same pass (kernels/functors.h's ReluOp: x < 0 ? 0 : x).
template <class T>
void batch_norm_elemt(const T* x, int64_t N, int64_t C, int64_t S, const double* mean, const double* invstd,
                      const double* weight, const double* bias, T* y, bool relu = false) {
  const BatchNormAffine affine{invstd, weight, bias};
  parallel_for(N * C, norm_grain(S), [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl) {
      const int64_t c = pl % C;
      const double m = mean[c], scale = affine.scale(c), b = affine.shift(c);
      const T* xp = x + pl * S;
      T* yp = y + pl * S;
      if (relu) {
        batch_norm_relu_row(xp, S, m, scale, b, yp);
      } else {
        for (int64_t i = 0; i < S; ++i) yp[i] = batch_norm_value(xp[i], m, scale, b);
      }
    }
  });
}

// sum_dy (C) = sum over (n, s) of dy; sum_dy_xmu (C) = sum of dy * (x - mean[c]) (per plane one
// vectorised reduction, planes added in n order). relu (or null): a ReLU followed the batch norm;
// dy is masked where its output is <= 0.
template <class T>
void batch_norm_backward_reduce(const T* dy, const T* x, int64_t N, int64_t C, int64_t S, const double* mean,
                                double* sum_dy, double* sum_dy_xmu, const BatchNormAffine* relu = nullptr) {
  channel_sums_in_n_order(
      N, C, S,
      [&](int64_t pl) {
        const int64_t c = pl % C;
        const double m = mean[c];
        const T* g = dy + pl * S;
        const T* xp = x + pl * S;
        double a = 0, b = 0;
        if (relu) {
          const double scale = relu->scale(c), shift = relu->shift(c);
#pragma omp simd reduction(+ : a, b)
          for (int64_t i = 0; i < S; ++i) {
            const double gi = static_cast<double>(relu_grad_bits(batch_norm_value(xp[i], m, scale, shift), g[i]));
            a += gi;
            b += gi * (static_cast<double>(xp[i]) - m);
          }
        } else {
#pragma omp simd reduction(+ : a, b)
          for (int64_t i = 0; i < S; ++i) {
            const double gi = static_cast<double>(g[i]);
            a += gi;
            b += gi * (static_cast<double>(xp[i]) - m);
          }
        }
        return PlaneSums{a, b};
      },
      sum_dy, sum_dy_xmu);
}

// The per-channel constants of the backward's dx = (g - mean_dy - (x - m) * xmu_coef) * scale for
// channel c: m = mean, mean_dy = sum_dy / count, xmu_coef = invstd^2 * sum_dy_xmu / count (the
// weight of x - mean: the gradient's projection on xhat, divided by invstd), scale = weight * invstd.
struct BatchNormBackwardCoefficients {
  double m, mean_dy, xmu_coef, scale;
};
inline BatchNormBackwardCoefficients batch_norm_backward_coefficients(int64_t c, const double* mean,
                                                                      const double* invstd, const double* weight,
                                                                      const double* sum_dy, const double* sum_dy_xmu,
                                                                      double inv_count) {
  const double is = invstd[c];
  return {mean[c], sum_dy[c] * inv_count, is * is * sum_dy_xmu[c] * inv_count, (weight ? weight[c] : 1.0) * is};
}

// dx[i] = (g[i] - mean_dy - (x[i] - m) * xmu_coef) * scale, i < n: batch_norm_backward_elemt's loop
// without a ReLU, shared with the fused batch norm + ReLU + max-pool's backward (the same bits).
template <class T>
inline void batch_norm_backward_row(const T* g, const T* x, int64_t n, double m, double mean_dy, double xmu_coef,
                                    double scale, T* dx) {
  for (int64_t i = 0; i < n; ++i) dx[i] = static_cast<T>((g[i] - mean_dy - (x[i] - m) * xmu_coef) * scale);
}

// dx = (dy - sum_dy / count - (x - mean) * invstd^2 * sum_dy_xmu / count) * weight * invstd
// (dy masked by relu as in batch_norm_backward_reduce)
template <class T>
void batch_norm_backward_elemt(const T* dy, const T* x, int64_t N, int64_t C, int64_t S, const double* mean,
                               const double* invstd, const double* weight, const double* sum_dy,
                               const double* sum_dy_xmu, int64_t count, T* dx, const BatchNormAffine* relu = nullptr) {
  const double inv_count = 1.0 / static_cast<double>(count);
  parallel_for(N * C, norm_grain(S), [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl) {
      const int64_t c = pl % C;
      const auto [m, mean_dy, xmu_coef, scale] =
          batch_norm_backward_coefficients(c, mean, invstd, weight, sum_dy, sum_dy_xmu, inv_count);
      const T* g = dy + pl * S;
      const T* xp = x + pl * S;
      T* o = dx + pl * S;
      if (relu) {
        const double relu_scale = relu->scale(c), relu_shift = relu->shift(c);
        for (int64_t i = 0; i < S; ++i) {
          const double gi =
              static_cast<double>(relu_grad_bits(batch_norm_value(xp[i], m, relu_scale, relu_shift), g[i]));
          o[i] = static_cast<T>((gi - mean_dy - (xp[i] - m) * xmu_coef) * scale);
        }
      } else {
        batch_norm_backward_row(g, xp, S, m, mean_dy, xmu_coef, scale, o);
      }
    }
  });
}

// SyncBatchNorm's merge of every rank's statistics, channel by channel (kernels/batch_norm_gather.h).
// rows (R, 2C + 1): rank r's (mean (C), invstd (C), count). total: the ranks' summed count.
inline void batch_norm_gather_stats(const double* rows, int64_t R, int64_t C, double eps, double* mean, double* invstd,
                                    double* unbiased_var, double* total) {
  const double n_all = batch_norm_gather_count(rows, R, C);
  for (int64_t c = 0; c < C; ++c) batch_norm_gather_channel(rows, R, C, c, eps, n_all, mean, invstd, unbiased_var);
  *total = n_all;
}

// ---- batch norm + ReLU + 2x2 max-pool (stride 2, no padding) as one op ----
// x (N, C, H, W) -> out (N, C, H/2, W/2) = max_pool2d(relu(batch_norm(x)), 2): the normalised
// values are never written at full resolution. Each window's four values are computed exactly as
// batch_norm_elemt(relu) computes them (batch_norm_relu_row) and compared as
// max_pool2d_plane_forward_2x2 compares them (kernels/cpu/pool.h: row-major order, a later
// candidate wins if greater, or a NaN while the best is not), so out is the composed ops' output
// bit for bit. arg (N, C, H/2, W/2) records the winner's place in its window, 2 * dh + dw, in its
// low two bits, and kReluKeeps when the ReLU passes the gradient there (relu_keeps(out)); x_at
// the input at the winner (what the backward's sums need, at a quarter of the input's size). The
// backward needs neither out nor the ReLU's output: autograd keeps x, arg and x_at, not out.
// A last odd row / column is outside every window (as max_pool2d drops it). Float rows use
// AVX-512 when the CPU has it (kernels/cpu/pool_avx512.cpp, the same rule 16 outputs at a time).
inline constexpr int kReluKeepsBit = 2;  // bit 2 of arg: the ReLU passes the winner's gradient
inline constexpr uint8_t kReluKeeps = 1 << kReluKeepsBit;
inline constexpr uint8_t kWindowPlace = 3;  // in arg: the winner's place 2 * dh + dw

template <class T>
void batch_norm_relu_max_pool2d_forward(const T* x, int64_t N, int64_t C, int64_t H, int64_t W, const double* mean,
                                        const double* invstd, const double* weight, const double* bias, T* out,
                                        uint8_t* arg, T* x_at) {
  const int64_t Ho = H / 2, Wo = W / 2;
  const BatchNormAffine affine{invstd, weight, bias};
  parallel_for(N * C, norm_grain(H * W), [&](int64_t p0, int64_t p1) {
    std::vector<T> z(static_cast<size_t>(H * W));  // relu(batch_norm(x)) of one plane
    for (int64_t pl = p0; pl < p1; ++pl) {
      const int64_t c = pl % C;
      const double m = mean[c], scale = affine.scale(c), b = affine.shift(c);
      const T* const xp = x + pl * H * W;
      batch_norm_relu_row(xp, H * W, m, scale, b, z.data());
      T* const yo = out + pl * Ho * Wo;
      uint8_t* const ao = arg + pl * Ho * Wo;
      T* const xo = x_at + pl * Ho * Wo;
      if constexpr (std::is_same_v<T, float>) {
        if (pool_detail::max_pool2d_plane_2x2_arg_avx512(z.data(), xp, W, Ho, Wo, yo, ao, xo)) continue;
      }
      for (int64_t oh = 0; oh < Ho; ++oh) {
        const T* z0 = z.data() + 2 * oh * W;
        const T* z1 = z0 + W;
        const T* x0 = xp + 2 * oh * W;
        const T* x1 = x0 + W;
        for (int64_t ow = 0; ow < Wo; ++ow) {
          T best = z0[2 * ow], bx = x0[2 * ow];
          uint8_t bi = 0;
          auto consider = [&](T v, T xv, uint8_t pos) {
            const bool take = (best == best) & ((v > best) | (v != v));
            best = take ? v : best;
            bx = take ? xv : bx;
            bi = take ? pos : bi;
          };
          consider(z0[2 * ow + 1], x0[2 * ow + 1], 1);
          consider(z1[2 * ow], x1[2 * ow], 2);
          consider(z1[2 * ow + 1], x1[2 * ow + 1], 3);
          yo[oh * Wo + ow] = best;
          ao[oh * Wo + ow] = static_cast<uint8_t>(bi | (relu_keeps(best) ? kReluKeeps : 0));
          xo[oh * Wo + ow] = bx;
        }
      }
    }
  });
}

// The backward's per-channel sums over the pooled planes: only the windows' winners have a
// non-zero input gradient, dout masked by the ReLU (arg's kReluKeeps), at x_at: the loop of
// batch_norm_backward_reduce, with this mask in place of the rebuilt one.
template <class T>
void batch_norm_relu_max_pool2d_backward_reduce(const T* dout, const uint8_t* arg, const T* x_at, int64_t N, int64_t C,
                                                int64_t S, const double* mean, double* sum_dy, double* sum_dy_xmu) {
  channel_sums_in_n_order(
      N, C, S,
      [&](int64_t pl) {
        const double m = mean[pl % C];
        const T* g = dout + pl * S;
        const uint8_t* keep = arg + pl * S;
        const T* xp = x_at + pl * S;
        // 16 lanes, as the ReLU loop gets: left alone, the uint8 flags make GCC take 64 at a
        // time, and planes of 49 or 196 values then run mostly in the remainder loop (3x slower)
        double a = 0, b = 0;
#pragma omp simd simdlen(16) reduction(+ : a, b)
        for (int64_t i = 0; i < S; ++i) {
          const double gi = static_cast<double>(keep_if_bit(keep[i], kReluKeepsBit, g[i]));
          a += gi;
          b += gi * (static_cast<double>(xp[i]) - m);
        }
        return PlaneSums{a, b};
      },
      sum_dy, sum_dy_xmu);
}

// dx (N, C, H, W) as batch_norm_backward_elemt computes it from the input's gradient (rebuilt row
// by row: dout, ReLU-masked, at the winner arg names, 0 elsewhere), x and the sums; one pass.
template <class T>
void batch_norm_relu_max_pool2d_backward_elemt(const T* dout, const uint8_t* arg, const T* x, int64_t N, int64_t C,
                                               int64_t H, int64_t W, const double* mean, const double* invstd,
                                               const double* weight, const double* sum_dy, const double* sum_dy_xmu,
                                               int64_t count, T* dx) {
  const int64_t Ho = H / 2, Wo = W / 2;
  const double inv_count = 1.0 / static_cast<double>(count);
  parallel_for(N * C, norm_grain(H * W), [&](int64_t p0, int64_t p1) {
    // the input's gradient of one plane; a last odd row / column, in no window, stays 0
    std::vector<T> g(static_cast<size_t>(H * W), T(0));
    for (int64_t pl = p0; pl < p1; ++pl) {
      const auto [m, mean_dy, xmu_coef, scale] =
          batch_norm_backward_coefficients(pl % C, mean, invstd, weight, sum_dy, sum_dy_xmu, inv_count);
      const T* const dr = dout + pl * Ho * Wo;
      const uint8_t* const ar = arg + pl * Ho * Wo;
      bool done = false;
      if constexpr (std::is_same_v<T, float>)
        done = pool_detail::relu_max_pool2d_grad_plane_2x2_avx512(dr, ar, W, Ho, Wo, g.data());
      for (int64_t oh = 0; oh < Ho && !done; ++oh) {
        T* const g0 = g.data() + 2 * oh * W;
        T* const g1 = g0 + W;
        for (int64_t ow = 0; ow < Wo; ++ow) {
          // as max_pool2d_plane_backward (0 + dout) then relu_backward
          const int64_t j = oh * Wo + ow;
          const T v = keep_if_bit(ar[j], kReluKeepsBit, static_cast<T>(T(0) + dr[j]));
          const int place = ar[j] & kWindowPlace;
          g0[2 * ow] = place == 0 ? v : T(0);
          g0[2 * ow + 1] = place == 1 ? v : T(0);
          g1[2 * ow] = place == 2 ? v : T(0);
          g1[2 * ow + 1] = place == 3 ? v : T(0);
        }
      }
      batch_norm_backward_row(g.data(), x + pl * H * W, H * W, m, mean_dy, xmu_coef, scale, dx + pl * H * W);
    }
  });
}

}  // namespace minidl::kernels::cpu
