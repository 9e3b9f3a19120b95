// kernels/cpu/conv2d_depthwise.cpp — the depthwise convolution (see conv2d_depthwise.h). Layout
// inside, per plane: the phase planes one after another, each (Hq, Wq) then kLanes zeros (a
// vector that starts in the last row may read past it); dy of one output channel in the same
// width Wq, after `front` zeros (so the input gradient's gather, which reads up to front floats
// before a position, stays in the buffer) and with zeros in columns W_out .. Wq - 1 and after.
// 3x3 kernels (9 taps) run a loop unrolled at compile time, other sizes the same loop at run time.
#include "minidl/kernels/cpu/conv2d_depthwise.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "minidl/kernels/cpu/conv2d.h"
#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/cpu/vec_math.h"

namespace minidl::kernels::cpu {

namespace {

constexpr int64_t kV = kLanes<float>;  // outputs per vector (vec_math.h's FloatLanes)
constexpr int64_t kMaxBlocks = 16;  // weight gradient: at most this many partial sums over blocks of images

int64_t ceil_div(int64_t a, int64_t b) { return a <= 0 ? 0 : (a + b - 1) / b; }  // a <= 0 -> 0

struct Phases {
  int64_t H, W, Ho, Wo, sh, sw, ph, pw;
  int64_t Hq, Wq;  // one phase plane
  int64_t len;  // floats per phase plane in a buffer: Hq * Wq + kV
  int64_t front;  // zeros before dy in its wide layout: (kH - 1) / sh rows and (kW - 1) / sw floats
  int64_t dy_len;  // floats per wide dy plane: front + Hq * Wq + kV
  int64_t vectors;  // vectors of outputs per plane: ceil(Ho * Wq / kV)
  int64_t taps;  // kH * kW
  std::vector<int64_t> offset;  // tap t = kh * kW + kw: where it reads, relative to the output position
  std::vector<int64_t> back;  // tap t: how far before a phase position the dy it gathers lies
  std::vector<int64_t> phase;  // tap t: its phase plane, (kh % sh) * sw + kw % sw
};

Phases phases_of(const Conv2dShape& s) {
  Phases p{};
  p.H = s.H, p.W = s.W, p.Ho = s.H_out, p.Wo = s.W_out, p.sh = s.stride_h, p.sw = s.stride_w, p.ph = s.pad_h,
  p.pw = s.pad_w;
  p.Hq = s.H_out + (s.kH - 1) / s.stride_h, p.Wq = s.W_out + (s.kW - 1) / s.stride_w;
  p.len = p.Hq * p.Wq + kV;
  p.front = (s.kH - 1) / s.stride_h * p.Wq + (s.kW - 1) / s.stride_w;
  p.dy_len = p.front + p.len;
  p.vectors = ceil_div(p.Ho * p.Wq, kV);
  p.taps = s.kH * s.kW;
  for (int64_t kh = 0; kh < s.kH; ++kh)
    for (int64_t kw = 0; kw < s.kW; ++kw) {
      const int64_t ph = (kh % p.sh) * p.sw + kw % p.sw, back = kh / p.sh * p.Wq + kw / p.sw;
      p.offset.push_back(ph * p.len + back);
      p.back.push_back(back);
      p.phase.push_back(ph);
    }
  return p;
}

// The even and the odd lanes of the 32 floats lo, hi; and back
inline FloatLanes even_lanes(FloatLanes lo, FloatLanes hi) {
  return __builtin_shufflevector(lo, hi, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
}
inline FloatLanes odd_lanes(FloatLanes lo, FloatLanes hi) {
  return __builtin_shufflevector(lo, hi, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
}
inline void interleave(FloatLanes even, FloatLanes odd, FloatLanes& lo, FloatLanes& hi) {
  lo = __builtin_shufflevector(even, odd, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  hi = __builtin_shufflevector(even, odd, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
}

// x (H, W) -> the phase planes P[a, b][i, j] = xp[sh i + a, sw j + b] (zero in the padding).
// With sw > 1 each row of xp is first laid out in `row` (sw * Wq rounded up to vectors, zero
// outside x's columns), then split into the sw phases (sw = 2: 32 floats -> 2 x 16 by shuffles;
// the vectors past Wq spill into the next row, written after, or the tail, zeroed last).
void split(const float* x, const Phases& p, float* P, std::vector<float>& row) {
  const int64_t n = std::clamp<int64_t>(p.sw * p.Wq - p.pw, 0, p.W);  // x's columns that some phase holds
  if (p.sw > 1) row.assign(static_cast<size_t>(p.sw * ceil_div(p.Wq, kV) * kV), 0.0f);
  for (int64_t a = 0; a < p.sh; ++a)
    for (int64_t i = 0; i < p.Hq; ++i) {
      float* q = P + a * p.sw * p.len + i * p.Wq;  // phase (a, b)'s row i at q + b * len
      const int64_t r = p.sh * i + a - p.ph;
      if (r < 0 || r >= p.H) {
        for (int64_t b = 0; b < p.sw; ++b) std::fill(q + b * p.len, q + b * p.len + p.Wq, 0.0f);
        continue;
      }
      if (p.sw == 1) {
        std::fill(q, q + p.pw, 0.0f);
        std::memcpy(q + p.pw, x + r * p.W, static_cast<size_t>(n) * sizeof(float));
        std::fill(q + p.pw + n, q + p.Wq, 0.0f);
        continue;
      }
      std::memcpy(row.data() + p.pw, x + r * p.W, static_cast<size_t>(n) * sizeof(float));
      if (p.sw == 2) {
        for (int64_t j = 0; j < p.Wq; j += kV) {
          const FloatLanes lo = load_lanes(row.data() + 2 * j), hi = load_lanes(row.data() + 2 * j + kV);
          store_lanes(q + j, even_lanes(lo, hi));
          store_lanes(q + p.len + j, odd_lanes(lo, hi));
        }
        continue;
      }
      for (int64_t b = 0; b < p.sw; ++b)
        for (int64_t j = 0; j < p.Wq; ++j) q[b * p.len + j] = row[static_cast<size_t>(p.sw * j + b)];
    }
  for (int64_t ph = 0; ph < p.sh * p.sw; ++ph) std::fill(P + ph * p.len + p.Hq * p.Wq, P + (ph + 1) * p.len, 0.0f);
}

// The adjoint of split, restricted to x's positions: dx[h, w] = dP[(h + ph) % sh, (w + pw) % sw]
// at ((h + ph) / sh, (w + pw) / sw), 0 where that lies outside the phase plane (no output read
// it). With sw > 1 the phases' rows are interleaved into `row` first.
void merge(const float* dP, const Phases& p, float* dx, std::vector<float>& row) {
  const int64_t n = std::clamp<int64_t>(p.sw * p.Wq - p.pw, 0, p.W);  // x's columns that some phase holds
  if (p.sw > 1) row.resize(static_cast<size_t>(p.sw * ceil_div(p.Wq, kV) * kV));
  for (int64_t h = 0; h < p.H; ++h) {
    float* out = dx + h * p.W;
    const int64_t a = (h + p.ph) % p.sh, i = (h + p.ph) / p.sh;
    if (i >= p.Hq) {
      std::fill(out, out + p.W, 0.0f);
      continue;
    }
    const float* q = dP + a * p.sw * p.len + i * p.Wq;  // phase (a, b)'s row i at q + b * len
    if (p.sw == 1) {
      std::memcpy(out, q + p.pw, static_cast<size_t>(n) * sizeof(float));
    } else if (p.sw == 2) {
      for (int64_t j = 0; j < p.Wq; j += kV) {
        FloatLanes lo, hi;
        interleave(load_lanes(q + j), load_lanes(q + p.len + j), lo, hi);
        store_lanes(row.data() + 2 * j, lo);
        store_lanes(row.data() + 2 * j + kV, hi);
      }
    } else {
      for (int64_t b = 0; b < p.sw; ++b)
        for (int64_t j = 0; j < p.Wq; ++j) row[static_cast<size_t>(p.sw * j + b)] = q[b * p.len + j];
    }
    if (p.sw > 1) std::memcpy(out, row.data() + p.pw, static_cast<size_t>(n) * sizeof(float));
    std::fill(out + n, out + p.W, 0.0f);
  }
}

// dy (Ho, Wo) -> dyw: front zeros, then Hq rows of Wq (dy in the first Ho rows' first Wo columns,
// zeros elsewhere), then kV zeros
void widen(const float* dy, const Phases& p, float* dyw) {
  std::fill(dyw, dyw + p.front, 0.0f);
  float* q = dyw + p.front;
  for (int64_t i = 0; i < p.Ho; ++i) {
    std::memcpy(q + i * p.Wq, dy + i * p.Wo, static_cast<size_t>(p.Wo) * sizeof(float));
    std::fill(q + i * p.Wq + p.Wo, q + (i + 1) * p.Wq, 0.0f);
  }
  std::fill(q + p.Ho * p.Wq, dyw + p.dy_len, 0.0f);
}

// sum over t < n of c[t] * the vector at base + offset[t], n = kTaps when that is not 0
template <int kTaps> FloatLanes dot_taps(const float* c, const float* base, const int64_t* offset, int64_t n) {
  if constexpr (kTaps > 0) n = kTaps;
  FloatLanes acc = {};
  for (int64_t t = 0; t < n; ++t) acc += c[t] * load_lanes(base + offset[t]);
  return acc;
}

// One plane of output: y (Ho, Wo) = b + the taps wo over the phase planes P
template <int kTaps>
void plane_forward(const float* P, const float* wo, float bias, const Phases& p, float* yw, float* y) {
  for (int64_t v = 0; v < p.vectors; ++v)
    store_lanes(yw + v * kV, dot_taps<kTaps>(wo, P + v * kV, p.offset.data(), p.taps) + bias);
  for (int64_t i = 0; i < p.Ho; ++i)
    std::memcpy(y + i * p.Wo, yw + i * p.Wq, static_cast<size_t>(p.Wo) * sizeof(float));
}

// The block's lanes acc (taps, kV) += sum over the flat outputs of dyw * each tap's phase vector
template <int kTaps> void plane_weight_grad(const float* P, const float* dyw, const Phases& p, FloatLanes* acc) {
  const int64_t n = kTaps > 0 ? kTaps : p.taps;
  FloatLanes a[kTaps > 0 ? kTaps : 1];
  FloatLanes* lanes = kTaps > 0 ? a : acc;
  if constexpr (kTaps > 0)
    for (int64_t t = 0; t < n; ++t) a[t] = acc[t];
  for (int64_t v = 0; v < p.vectors; ++v) {
    const FloatLanes d = load_lanes(dyw + v * kV);
    for (int64_t t = 0; t < n; ++t) lanes[t] += d * load_lanes(P + v * kV + p.offset[static_cast<size_t>(t)]);
  }
  if constexpr (kTaps > 0)
    for (int64_t t = 0; t < n; ++t) acc[t] = a[t];
}

// One phase of the input gradient: dP (Hq * Wq, whole vectors) = sum over the terms of
// c[t] * the wide dy vector at dyw + offset[t] (offsets count from the phase position)
template <int kTaps>
void phase_input_grad(const float* dyw, const float* c, const int64_t* offset, int64_t terms, const Phases& p,
                      float* dP) {
  const int64_t vectors = ceil_div(p.Hq * p.Wq, kV);
  for (int64_t v = 0; v < vectors; ++v) store_lanes(dP + v * kV, dot_taps<kTaps>(c, dyw + v * kV, offset, terms));
}

}  // namespace

void conv2d_depthwise_forward(const float* x, const float* w, const float* b, const Conv2dShape& s, float* y) {
  const Phases p = phases_of(s);
  const int64_t k = s.O / s.C, plane = p.vectors * kV;
  parallel_for(s.N * s.C, conv_grain(k * plane * p.taps), [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> P, yw, row;
    P.resize(static_cast<size_t>(p.sh * p.sw * p.len));
    yw.resize(static_cast<size_t>(plane));
    for (int64_t i = i0; i < i1; ++i) {  // i = n * C + c
      split(x + i * s.H * s.W, p, P.data(), row);
      const int64_t n = i / s.C, c = i % s.C;
      for (int64_t o = c * k; o < (c + 1) * k; ++o) {
        const float* wo = w + o * p.taps;
        float* yo = y + (n * s.O + o) * p.Ho * p.Wo;
        const float bias = b ? b[o] : 0.0f;
        if (p.taps == 9)
          plane_forward<9>(P.data(), wo, bias, p, yw.data(), yo);
        else
          plane_forward<0>(P.data(), wo, bias, p, yw.data(), yo);
      }
    }
  });
}

void conv2d_depthwise_backward(const float* x, const float* w, const float* dy, const Conv2dShape& s, float* dx,
                               float* dw, float* db) {
  if (db) conv2d_bias_grad(dy, s, db);
  if (!dx && !dw) return;
  const Phases p = phases_of(s);
  const int64_t k = s.O / s.C, phases = p.sh * p.sw, plane_in = s.H * s.W, plane_out = p.Ho * p.Wo;
  // Fixed blocks of images (depend on N only): item (block, c) sums its images into lanes per
  // (output channel, tap), then its lanes (horizontal_sum) into partial (blocks, O, taps).
  const int64_t per_block = std::max<int64_t>(1, (s.N + kMaxBlocks - 1) / kMaxBlocks);
  const int64_t blocks = (s.N + per_block - 1) / per_block;
  std::vector<float> partial(static_cast<size_t>(dw ? blocks * s.O * p.taps : 0));
  // The input gradient's terms per phase: (k output channels) x (that phase's taps), as indices
  // into a channel's k * taps weights and where they read in its k wide dy planes.
  std::vector<std::vector<int64_t>> term(static_cast<size_t>(phases)), offset(static_cast<size_t>(phases));
  for (int64_t m = 0; m < k; ++m)
    for (int64_t t = 0; t < p.taps; ++t) {
      const size_t ph = static_cast<size_t>(p.phase[static_cast<size_t>(t)]);
      term[ph].push_back(m * p.taps + t);
      offset[ph].push_back(m * p.dy_len + p.front - p.back[static_cast<size_t>(t)]);
    }
  const int64_t work = per_block * k * p.vectors * kV * p.taps * 2;
  parallel_for(blocks * s.C, conv_grain(work), [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> P, dyw, dP, coef, row;
    thread_local std::vector<FloatLanes> lanes;
    P.resize(static_cast<size_t>(phases * p.len));
    dyw.resize(static_cast<size_t>(k * p.dy_len));
    dP.resize(static_cast<size_t>(phases * p.len));
    coef.resize(static_cast<size_t>(phases * k * p.taps));
    lanes.resize(static_cast<size_t>(k * p.taps));
    for (int64_t i = i0; i < i1; ++i) {  // i = block * C + c
      const int64_t blk = i / s.C, c = i % s.C;
      std::fill(lanes.begin(), lanes.end(), FloatLanes{});
      for (int64_t ph = 0; dx && ph < phases; ++ph) {  // this channel's weights, in each phase's term order
        const std::vector<int64_t>& tm = term[static_cast<size_t>(ph)];
        for (size_t j = 0; j < tm.size(); ++j)
          coef[static_cast<size_t>(ph * k * p.taps) + j] = w[c * k * p.taps + tm[j]];
      }
      for (int64_t n = blk * per_block; n < std::min(s.N, (blk + 1) * per_block); ++n) {
        for (int64_t m = 0; m < k; ++m) widen(dy + (n * s.O + c * k + m) * plane_out, p, dyw.data() + m * p.dy_len);
        if (dw) {
          split(x + (n * s.C + c) * plane_in, p, P.data(), row);
          for (int64_t m = 0; m < k; ++m) {
            const float* d = dyw.data() + m * p.dy_len + p.front;
            FloatLanes* acc = lanes.data() + m * p.taps;
            if (p.taps == 9)
              plane_weight_grad<9>(P.data(), d, p, acc);
            else
              plane_weight_grad<0>(P.data(), d, p, acc);
          }
        }
        if (!dx) continue;
        for (int64_t ph = 0; ph < phases; ++ph) {
          const float* c0 = coef.data() + ph * k * p.taps;
          const std::vector<int64_t>& off = offset[static_cast<size_t>(ph)];
          const int64_t terms = static_cast<int64_t>(off.size());
          float* out = dP.data() + ph * p.len;
          if (terms == 9)
            phase_input_grad<9>(dyw.data(), c0, off.data(), terms, p, out);
          else
            phase_input_grad<0>(dyw.data(), c0, off.data(), terms, p, out);
        }
        merge(dP.data(), p, dx + (n * s.C + c) * plane_in, row);
      }
      if (dw)
        for (int64_t t = 0; t < k * p.taps; ++t)  // (m, tap) = output channel c * k + m's tap
          partial[static_cast<size_t>((blk * s.O + c * k) * p.taps + t)] =
              horizontal_sum(lanes[static_cast<size_t>(t)]);
    }
  });
  if (dw)
    for (int64_t j = 0; j < s.O * p.taps; ++j) {
      float acc = 0.0f;
      for (int64_t blk = 0; blk < blocks; ++blk) acc += partial[static_cast<size_t>(blk * s.O * p.taps + j)];
      dw[j] = acc;
    }
}

}  // namespace minidl::kernels::cpu
