// kernels/cpu/conv2d_depthwise.cpp — the depthwise convolution (see conv2d_depthwise.h). Layout
// inside, per plane: the phase planes one after another, each (Hq, Wq) then kLanes zeros (a
// vector that starts in the last row may read past it); dy of one output channel in the same
// width Wq, after `front` zeros (so the input gradient's gather, which reads up to front floats
// before a position, stays in the buffer) and with zeros in columns W_out .. Wq - 1 and after.
// The buffers are zeroed once per chunk of planes; each plane then writes only the positions that
// hold its data (the zeros around them are the same for every plane), with inline 16-lane copies:
// a plane of 8 x 8 is a few hundred FMAs, and library memcpy / memset calls per row cost more.
// 3x3 kernels (9 taps) run a loop unrolled at compile time, other sizes the same loop at run time.
#include "minidl/kernels/cpu/conv2d_depthwise.h"

#include <algorithm>
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

// Asks for the n floats at p to be brought into the caches, one prefetch per 64-byte line: the
// next plane is often on another page (in the backward pass C planes away), where the hardware
// prefetchers, which stop at page boundaries, would leave its first reads waiting on memory.
void prefetch_floats(const float* p, int64_t n) {
  for (int64_t i = 0; i < n; i += kV) __builtin_prefetch(p + i);
}

// dst[0 .. n) = src[0 .. n), 16 lanes at a time (masked for the last n % 16)
void copy_floats(float* dst, const float* src, int64_t n) {
  int64_t i = 0;
  for (; i + kV <= n; i += kV) store_lanes(dst + i, load_lanes(src + i));
  if (i < n) store_first_lanes(dst + i, load_first_lanes(src + i, n - i), n - i);
}

// x's columns that some phase holds: x[., w] sits at padded column w + pw, and the phases hold
// padded columns 0 .. sw * Wq - 1
int64_t held_columns(const Phases& p) { return std::clamp<int64_t>(p.sw * p.Wq - p.pw, 0, p.W); }

// Sizes the buffers of a chunk of planes and zeroes them (split and widen write only data after):
// P and dP (phases * len), `row` (one padded row, sw * Wq rounded up to vectors), dyw (k * dy_len).
void zeroed(std::vector<float>& v, int64_t n) { v.assign(static_cast<size_t>(n), 0.0f); }
int64_t row_len(const Phases& p) { return p.sw * ceil_div(p.Wq, kV) * kV; }

// x (H, W) -> the phase planes P[a, b][i, j] = xp[sh i + a, sw j + b] (zero in the padding), into
// P and `row` zeroed for this geometry (only the rows of x are written: the padding stays zero).
// sw = 2 (with pw <= 16): each padded row's vectors are built in registers, vector k of (pw zeros,
// x's row, zeros) from x's vectors k - 1 and k (lanes_from; masked loads past the row), and split
// into the 2 phases by shuffles (the zeros past Wq that a last vector writes land in the next row,
// written after if it holds data, or in the zero tail).
// Other sw: each row of xp is first laid out in `row` (zero outside x's columns), then split.
void split(const float* x, const Phases& p, float* P, float* row) {
  const int64_t n = held_columns(p);
  for (int64_t a = 0; a < p.sh; ++a)
    for (int64_t i = std::max<int64_t>(0, ceil_div(p.ph - a, p.sh)); i < p.Hq; ++i) {
      const int64_t r = p.sh * i + a - p.ph;  // >= 0
      if (r >= p.H) break;
      float* q = P + a * p.sw * p.len + i * p.Wq;  // phase (a, b)'s row i at q + b * len
      if (p.sw == 1) {
        copy_floats(q + p.pw, x + r * p.W, n);
        continue;
      }
      if (p.sw == 2 && p.pw <= kV) {
        const float* xr = x + r * p.W;
        auto part = [&](int64_t m) {  // x's row's vector m, zero past n
          return m * kV >= n ? FloatLanes{} : load_first_lanes(xr + m * kV, std::min(kV, n - m * kV));
        };
        FloatLanes prev = {};  // the row's vector before the padded pair's first
        for (int64_t j = 0; j < p.Wq; j += kV) {
          const FloatLanes x0 = part(2 * j / kV), x1 = part(2 * j / kV + 1);
          const FloatLanes lo = lanes_from(prev, x0, kV - p.pw), hi = lanes_from(x0, x1, kV - p.pw);
          store_lanes(q + j, even_lanes(lo, hi));
          store_lanes(q + p.len + j, odd_lanes(lo, hi));
          prev = x1;
        }
        continue;
      }
      copy_floats(row + p.pw, x + r * p.W, n);
      for (int64_t b = 0; b < p.sw; ++b)
        for (int64_t j = 0; j < p.Wq; ++j) q[b * p.len + j] = row[p.sw * j + b];
    }
}

// The adjoint of split, restricted to x's positions: dx[h, w] = dP[(h + ph) % sh, (w + pw) % sw]
// at ((h + ph) / sh, (w + pw) / sw), 0 where that lies outside the phase plane (no output read
// it). sw = 2 (with pw <= 16): the phases' rows are interleaved in registers, each output vector
// taken from the two interleaved vectors around it (lanes_from). Other sw: through `row`.
void merge(const float* dP, const Phases& p, float* dx, float* row) {
  const int64_t n = held_columns(p);
  for (int64_t h = 0; h < p.H; ++h) {
    float* out = dx + h * p.W;
    const int64_t a = (h + p.ph) % p.sh, i = (h + p.ph) / p.sh;
    if (i >= p.Hq) {
      std::fill(out, out + p.W, 0.0f);
      continue;
    }
    const float* q = dP + a * p.sw * p.len + i * p.Wq;  // phase (a, b)'s row i at q + b * len
    if (p.sw == 1) {
      copy_floats(out, q + p.pw, n);
    } else if (p.sw == 2 && p.pw <= kV) {
      // the padded row's vectors 2 j and 2 j + 1: the phases' vectors j interleaved (lanes past the
      // phase rows' ends are other rows' values, which land only past n)
      const int64_t vectors = ceil_div(2 * p.Wq, kV);  // the padded row's vectors
      FloatLanes lo, hi;  // the pair of padded vectors that holds vector m
      interleave(load_lanes(q), load_lanes(q + p.len), lo, hi);
      FloatLanes cur = lo;  // the padded row's vector m
      for (int64_t m = 0; m * kV < n; ++m) {  // out[16 m ..] = padded[16 m + pw ..]
        FloatLanes next = {};  // vector m + 1, zero past the row
        if (m % 2 == 0) {
          next = hi;
        } else if (m + 1 < vectors) {
          interleave(load_lanes(q + (m + 1) / 2 * kV), load_lanes(q + p.len + (m + 1) / 2 * kV), lo, hi);
          next = lo;
        }
        const FloatLanes v = lanes_from(cur, m + 1 < vectors ? next : FloatLanes{}, p.pw);
        if (n - m * kV >= kV)
          store_lanes(out + m * kV, v);
        else
          store_first_lanes(out + m * kV, v, n - m * kV);
        cur = next;
      }
    } else {
      for (int64_t b = 0; b < p.sw; ++b)
        for (int64_t j = 0; j < p.Wq; ++j) row[p.sw * j + b] = q[b * p.len + j];
      copy_floats(out, row + p.pw, n);
    }
    if (n < p.W) std::fill(out + n, out + p.W, 0.0f);
  }
}

// dy (Ho, Wo) -> dyw, zeroed for this geometry: dy's rows at front + i * Wq (the zeros around
// them, in front, in columns Wo .. Wq - 1, in rows Ho .. Hq - 1 and after, stay)
void widen(const float* dy, const Phases& p, float* dyw) {
  for (int64_t i = 0; i < p.Ho; ++i) copy_floats(dyw + p.front + i * p.Wq, dy + i * p.Wo, p.Wo);
}

// dst's vector v = bias + sum over t < n of c[t] * the vector at src + v * kV + offset[t], for v <
// vectors (n = kTaps when that is not 0: then c and offset are first copied into locals, which
// stay in registers; read through the pointers, they would be reloaded after every store)
template <int kTaps>
void apply_taps(const float* c, const int64_t* offset, int64_t n, float bias, const float* src, int64_t vectors,
                float* dst) {
  constexpr int kLocal = kTaps > 0 ? kTaps : 1;
  float c_local[kLocal];
  int64_t offset_local[kLocal];
  if constexpr (kTaps > 0) {
    n = kTaps;
    for (int t = 0; t < kTaps; ++t) c_local[t] = c[t], offset_local[t] = offset[t];
    c = c_local, offset = offset_local;
  }
  for (int64_t v = 0; v < vectors; ++v) {
    FloatLanes acc = splat(bias);
    for (int64_t t = 0; t < n; ++t) acc += c[t] * load_lanes(src + v * kV + offset[t]);
    store_lanes(dst + v * kV, acc);
  }
}

// One plane of output: y (Ho, Wo) = b + the taps wo over the phase planes P
template <int kTaps>
void plane_forward(const float* P, const float* wo, float bias, const Phases& p, float* yw, float* y) {
  apply_taps<kTaps>(wo, p.offset.data(), p.taps, bias, P, p.vectors, yw);
  for (int64_t i = 0; i < p.Ho; ++i) copy_floats(y + i * p.Wo, yw + i * p.Wq, p.Wo);
}

// The block's lanes acc (taps, kV) += sum over the flat outputs of dyw * each tap's phase vector
// (with kTaps fixed, the lanes and offsets in locals)
template <int kTaps> void plane_weight_grad(const float* P, const float* dyw, const Phases& p, FloatLanes* acc) {
  constexpr int kLocal = kTaps > 0 ? kTaps : 1;
  FloatLanes a[kLocal];
  int64_t offset_local[kLocal];
  FloatLanes* lanes = acc;
  const int64_t* offset = p.offset.data();
  int64_t n = p.taps;
  if constexpr (kTaps > 0) {
    n = kTaps;
    for (int t = 0; t < kTaps; ++t) a[t] = acc[t], offset_local[t] = offset[t];
    lanes = a, offset = offset_local;
  }
  for (int64_t v = 0; v < p.vectors; ++v) {
    const FloatLanes d = load_lanes(dyw + v * kV);
    for (int64_t t = 0; t < n; ++t) lanes[t] += d * load_lanes(P + v * kV + offset[t]);
  }
  if constexpr (kTaps > 0)
    for (int t = 0; t < kTaps; ++t) acc[t] = a[t];
}

// One phase of the input gradient: dP (Hq * Wq, whole vectors) = sum over the terms of
// c[t] * the wide dy vector at dyw + offset[t] (offsets count from the phase position)
template <int kTaps>
void phase_input_grad(const float* dyw, const float* c, const int64_t* offset, int64_t terms, const Phases& p,
                      float* dP) {
  apply_taps<kTaps>(c, offset, terms, 0.0f, dyw, ceil_div(p.Hq * p.Wq, kV), dP);
}
// The same with the term counts of 3x3 kernels fixed at compile time: 9 at stride 1; 4, 2, 2 and 1
// in the four phases of stride 2
void phase_input_grad(const float* dyw, const float* c, const int64_t* offset, int64_t terms, const Phases& p,
                      float* dP) {
  switch (terms) {
    case 9:
      return phase_input_grad<9>(dyw, c, offset, terms, p, dP);
    case 4:
      return phase_input_grad<4>(dyw, c, offset, terms, p, dP);
    case 2:
      return phase_input_grad<2>(dyw, c, offset, terms, p, dP);
    case 1:
      return phase_input_grad<1>(dyw, c, offset, terms, p, dP);
    default:
      return phase_input_grad<0>(dyw, c, offset, terms, p, dP);
  }
}

}  // namespace

void conv2d_depthwise_forward(const float* x, const float* w, const float* b, const Conv2dShape& s, float* y) {
  const Phases p = phases_of(s);
  const int64_t k = s.O / s.C, plane = p.vectors * kV;
  parallel_for(s.N * s.C, conv_grain(k * plane * p.taps), [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> P, yw, row;
    zeroed(P, p.sh * p.sw * p.len);
    zeroed(row, row_len(p));
    yw.resize(static_cast<size_t>(plane));
    for (int64_t i = i0; i < i1; ++i) {  // i = n * C + c
      if (i + 1 < i1) prefetch_floats(x + (i + 1) * s.H * s.W, s.H * s.W);
      split(x + i * s.H * s.W, p, P.data(), row.data());
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
  // Fixed blocks of images (depend on N only): channel c sums the images of each block into lanes
  // per (output channel, tap), then its lanes (horizontal_sum) into partial (blocks, O, taps).
  const int64_t per_block = std::max<int64_t>(1, (s.N + kMaxBlocks - 1) / kMaxBlocks);
  const int64_t blocks = (s.N + per_block - 1) / per_block;
  std::vector<float> partial(static_cast<size_t>(dw ? std::max<int64_t>(blocks, 1) * s.O * p.taps : 0));
  // The input gradient's terms per phase: (k output channels) x (that phase's taps), as indices
  // into a channel's k * taps weights and where they read in its k wide dy planes.
  std::vector<std::vector<int64_t>> term(static_cast<size_t>(phases)), offset(static_cast<size_t>(phases));
  for (int64_t m = 0; m < k; ++m)
    for (int64_t t = 0; t < p.taps; ++t) {
      const size_t ph = static_cast<size_t>(p.phase[static_cast<size_t>(t)]);
      term[ph].push_back(m * p.taps + t);
      offset[ph].push_back(m * p.dy_len + p.front - p.back[static_cast<size_t>(t)]);
    }
  // Items: (block, group of up to kGroup channels); each walks its images in order and, in each
  // image, its channels in order, so that consecutive planes of x, dy and dx are neighbours in
  // memory (one channel through the images would jump C planes after each). Every channel's
  // lanes still add its images in order: the same bits as any other split.
  constexpr int64_t kGroup = 16;
  const int64_t groups = ceil_div(s.C, kGroup), kt = k * p.taps;
  const int64_t work = per_block * std::min(kGroup, s.C) * k * p.vectors * kV * p.taps * 2;
  parallel_for(blocks * groups, conv_grain(work), [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> P, dyw, dP, coef, row, dx_row;  // row: split's (zeros kept); dx_row: merge's
    thread_local std::vector<FloatLanes> lanes;
    zeroed(P, phases * p.len);
    zeroed(row, row_len(p));
    zeroed(dyw, k * p.dy_len);
    dP.resize(static_cast<size_t>(phases * p.len));
    dx_row.resize(static_cast<size_t>(row_len(p)));
    coef.resize(static_cast<size_t>(kGroup * phases * kt));
    lanes.resize(static_cast<size_t>(kGroup * kt));
    for (int64_t i = i0; i < i1; ++i) {  // i = block * groups + group
      const int64_t blk = i / groups, c0 = i % groups * kGroup, c1 = std::min(s.C, c0 + kGroup);
      std::fill(lanes.begin(), lanes.end(), FloatLanes{});
      for (int64_t c = c0; dx && c < c1; ++c)  // each channel's weights, in each phase's term order
        for (int64_t ph = 0; ph < phases; ++ph) {
          const std::vector<int64_t>& tm = term[static_cast<size_t>(ph)];
          for (size_t j = 0; j < tm.size(); ++j)
            coef[static_cast<size_t>(((c - c0) * phases + ph) * kt) + j] = w[c * kt + tm[j]];
        }
      const int64_t n_end = std::min(s.N, (blk + 1) * per_block);
      for (int64_t n = blk * per_block; n < n_end; ++n)
        for (int64_t c = c0; c < c1; ++c) {
          const int64_t next_n = c + 1 < c1 ? n : n + 1, next_c = c + 1 < c1 ? c + 1 : c0;
          if (next_n < n_end) {  // the next planes this item reads
            prefetch_floats(dy + (next_n * s.O + next_c * k) * plane_out, k * plane_out);
            if (dw) prefetch_floats(x + (next_n * s.C + next_c) * plane_in, plane_in);
          }
          for (int64_t m = 0; m < k; ++m) widen(dy + (n * s.O + c * k + m) * plane_out, p, dyw.data() + m * p.dy_len);
          if (dw) {
            split(x + (n * s.C + c) * plane_in, p, P.data(), row.data());
            for (int64_t m = 0; m < k; ++m) {
              const float* d = dyw.data() + m * p.dy_len + p.front;
              FloatLanes* acc = lanes.data() + (c - c0) * kt + m * p.taps;
              if (p.taps == 9)
                plane_weight_grad<9>(P.data(), d, p, acc);
              else
                plane_weight_grad<0>(P.data(), d, p, acc);
            }
          }
          if (!dx) continue;
          for (int64_t ph = 0; ph < phases; ++ph) {
            const std::vector<int64_t>& off = offset[static_cast<size_t>(ph)];
            phase_input_grad(dyw.data(), coef.data() + ((c - c0) * phases + ph) * kt, off.data(),
                             static_cast<int64_t>(off.size()), p, dP.data() + ph * p.len);
          }
          merge(dP.data(), p, dx + (n * s.C + c) * plane_in, dx_row.data());
        }
      if (dw)
        for (int64_t c = c0; c < c1; ++c)
          for (int64_t t = 0; t < kt; ++t)  // (m, tap) = output channel c * k + m's tap
            partial[static_cast<size_t>((blk * s.O + c * k) * p.taps + t)] =
                horizontal_sum(lanes[static_cast<size_t>((c - c0) * kt + t)]);
    }
  });
  if (dw) sum_blocks_in_order(partial.data(), std::max<int64_t>(blocks, 1), s.O * p.taps, dw);  // N = 0: zeros
}

}  // namespace minidl::kernels::cpu
