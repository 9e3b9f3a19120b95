// kernels/cpu/conv2d_direct.cpp — the direct weight gradient of a 3x3 stride-1 convolution with
// few input channels (see conv2d_direct.h). Layout inside: each image zero-padded into xp (C,
// Ho + 2, Wv + 2) with Wv = W_out rounded up to 16, so every output row is 16-lane vectors; a row
// that is not whole vectors ends with one that overlaps the vector before, its overlapping lanes
// of dy masked to zero.
#include "minidl/kernels/cpu/conv2d_direct.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/cpu/vec_math.h"

namespace minidl::kernels::cpu {

namespace {

constexpr int64_t kW = kLanes<float>;  // output columns per vector (vec_math.h's FloatLanes)
constexpr int64_t kMaxBlocks = 16;  // weight gradient: at most this many partial sums over blocks of images

struct Padded {
  int64_t Ho, Wo;  // output size
  int64_t Hp, Wq;  // xp (C, Hp, Wq): Hp = Ho + 2, Wq = Wo rounded up to kW, + 2
};

// Where the vector of output columns [v0, v0 + 16) of a row of Wo starts: at v0, except the last
// one of a row that is not a whole number of vectors, which ends at the row's end instead
// (overlapping the one before) when Wo >= 16; with Wo < 16 the one vector starts at 0.
inline int64_t vector_start(int64_t v0, int64_t Wo) { return Wo >= kW ? std::min(v0, Wo - kW) : 0; }

Padded padded(int64_t H, int64_t W, int64_t pad_h, int64_t pad_w) {
  const int64_t Ho = H + 2 * pad_h - 2, Wo = W + 2 * pad_w - 2;
  return {Ho, Wo, Ho + 2, (Wo + kW - 1) / kW * kW + 2};
}

// x (C, H, W) -> xp (C, Hp, Wq), x at (pad_h, pad_w), zero elsewhere
void pad_image(const float* x, int64_t C, int64_t H, int64_t W, int64_t pad_h, int64_t pad_w, const Padded& p,
               std::vector<float>& xp) {
  xp.assign(static_cast<size_t>(C * p.Hp * p.Wq), 0.0f);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t r = 0; r < H; ++r)
      std::memcpy(xp.data() + (c * p.Hp + r + pad_h) * p.Wq + pad_w, x + (c * H + r) * W,
                  static_cast<size_t>(W) * sizeof(float));
}

}  // namespace

void conv3x3_direct_weight_grad(const float* x, const float* dy, int64_t N, int64_t C, int64_t H, int64_t W, int64_t O,
                                int64_t pad_h, int64_t pad_w, float* dw, float* db) {
  const Padded p = padded(H, W, pad_h, pad_w);
  const int64_t w_numel = O * C * 9;
  if (w_numel <= 0) return;
  if (N <= 0 || p.Ho <= 0 || p.Wo <= 0) {
    std::fill(dw, dw + w_numel, 0.0f);
    if (db) std::fill(db, db + O, 0.0f);
    return;
  }
  // Fixed blocks of images (depend on N only): block k sums its images into 16 lanes per weight.
  const int64_t per_block = (N + kMaxBlocks - 1) / kMaxBlocks, blocks = (N + per_block - 1) / per_block;
  std::vector<float> partial(static_cast<size_t>(blocks * w_numel * kW), 0.0f);  // (blocks, O, C, 9, 16)
  std::vector<double> partial_db(static_cast<size_t>(db ? blocks * O * kW : 0), 0.0);  // (blocks, O, 16)
  parallel_for(blocks, 1, [&](int64_t k0, int64_t k1) {
    thread_local std::vector<float> xp_buffer;
    for (int64_t k = k0; k < k1; ++k)
      for (int64_t n = k * per_block; n < std::min(N, (k + 1) * per_block); ++n) {
        pad_image(x + n * C * H * W, C, H, W, pad_h, pad_w, p, xp_buffer);
        const float* xp = xp_buffer.data();
        for (int64_t o = 0; o < O; ++o)
          for (int64_t c = 0; c < C; ++c) {
            float* lanes = partial.data() + ((k * O + o) * C + c) * 9 * kW;
            FloatLanes a[9];
            for (int i = 0; i < 9; ++i) a[i] = load_lanes(lanes + i * kW);
            const bool with_db = db && c == 0;  // the bias gradient from the same loads of dy
            FloatLanes b_acc = {};  // this image's plane, per lane in float; added to the block's lanes in double
            for (int64_t oh = 0; oh < p.Ho; ++oh) {
              const float* dy_row = dy + ((n * O + o) * p.Ho + oh) * p.Wo;
              for (int64_t v0 = 0; v0 < p.Wo; v0 += kW) {
                const int64_t v = vector_start(v0, p.Wo);
                FloatLanes d = {};  // zero past the edge, and in the lanes an earlier vector of the row covered
                if (p.Wo >= kW) {
                  d = load_lanes(dy_row + v);
                  if (v < v0) d = lane_index<float>() >= static_cast<int>(v0 - v) ? d : FloatLanes{};
                } else {
                  d = load_first_lanes(dy_row, p.Wo);
                }
                if (with_db) b_acc += d;
                for (int kh = 0; kh < 3; ++kh)
                  for (int kw = 0; kw < 3; ++kw) {
                    const FloatLanes in = load_lanes(xp + (c * p.Hp + oh + kh) * p.Wq + v + kw);
                    a[3 * kh + kw] += d * in;
                  }
              }
            }
            for (int i = 0; i < 9; ++i) store_lanes(lanes + i * kW, a[i]);
            if (with_db)
              for (int64_t l = 0; l < kW; ++l) partial_db[static_cast<size_t>((k * O + o) * kW + l)] += b_acc[l];
          }
      }
  });
  // dw = the blocks in order, each block's 16 lanes in order
  for (int64_t i = 0; i < w_numel; ++i) {
    float acc = 0.0f;
    for (int64_t k = 0; k < blocks; ++k)
      for (int64_t l = 0; l < kW; ++l) acc += partial[static_cast<size_t>((k * w_numel + i) * kW + l)];
    dw[i] = acc;
  }
  if (db)
    for (int64_t o = 0; o < O; ++o) {
      double acc = 0;
      for (int64_t k = 0; k < blocks; ++k)
        for (int64_t l = 0; l < kW; ++l) acc += partial_db[static_cast<size_t>((k * O + o) * kW + l)];
      db[o] = static_cast<float>(acc);
    }
}

}  // namespace minidl::kernels::cpu
