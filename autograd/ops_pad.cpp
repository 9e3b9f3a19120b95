// autograd/ops_pad.cpp — pad (as torch.nn.functional.pad): constant, reflect, replicate and
// circular padding of the last dims, composed from index_select and cat, so the gradient of a
// reflected / repeated / wrapped element flows back to the element it copies.
#include "minidl/autograd/ops.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/ops.h"

namespace minidl {

namespace {
const char* mode_name(PadMode m) {
  switch (m) {
    case PadMode::Constant:
      return "constant";
    case PadMode::Reflect:
      return "reflect";
    case PadMode::Replicate:
      return "replicate";
    case PadMode::Circular:
      return "circular";
  }
  return "?";
}
Tensor index_range(const std::vector<int64_t>& v) { return from_vector(v, {static_cast<int64_t>(v.size())}); }
}  // namespace

Variable pad(const Variable& x, const std::vector<int64_t>& pads, PadMode mode, double value) {
  if (pads.size() % 2 != 0 || static_cast<int64_t>(pads.size() / 2) > x.dim())
    throw std::invalid_argument("pad: expected (left, right) pairs for at most " + std::to_string(x.dim()) +
                                " dims of " + x.data().desc() + ", got " + std::to_string(pads.size()) + " values");
  Variable y = x;
  for (size_t i = 0; i < pads.size() / 2; ++i) {
    const int64_t d = x.dim() - 1 - static_cast<int64_t>(i), l = pads[2 * i], r = pads[2 * i + 1];
    const int64_t n = y.size(d);
    if (l < 0 || r < 0)
      throw std::invalid_argument("pad: negative padding is not supported, got " + std::to_string(std::min(l, r)));
    if (l == 0 && r == 0) continue;
    const bool fits = mode == PadMode::Reflect    ? (l < n && r < n)
                      : mode == PadMode::Constant ? true
                                                  : (l <= n && r <= n && n > 0);
    if (!fits)
      throw std::invalid_argument(std::string("pad: ") + mode_name(mode) + " padding (" + std::to_string(l) + ", " +
                                  std::to_string(r) + ") of dim " + std::to_string(d) + " needs a larger size than " +
                                  std::to_string(n) + " (input " + x.data().desc() + ")");
    std::vector<Variable> parts;
    auto piece = [&](int64_t count, auto index_of) {
      if (count == 0) return;
      if (mode == PadMode::Constant) {
        Shape s = y.shape();
        s[d] = count;
        Tensor c = zeros(s, y.dtype(), y.device());
        if (value != 0.0) c.fill_(value);
        parts.emplace_back(c);
        return;
      }
      std::vector<int64_t> idx(static_cast<size_t>(count));
      for (int64_t k = 0; k < count; ++k) idx[k] = index_of(k);
      parts.push_back(index_select(y, d, index_range(idx).to(y.device())));
    };
    // index of the k-th padded element, left side (k = 0 outermost) and right side (k = 0 innermost)
    piece(l, [&](int64_t k) -> int64_t {
      if (mode == PadMode::Reflect) return l - k;
      if (mode == PadMode::Replicate) return 0;
      return n - l + k;  // circular
    });
    parts.push_back(y);
    piece(r, [&](int64_t k) -> int64_t {
      if (mode == PadMode::Reflect) return n - 2 - k;
      if (mode == PadMode::Replicate) return n - 1;
      return k;  // circular
    });
    y = cat(parts, d);
  }
  return y;
}

}  // namespace minidl
