// autograd/ops_interpolate.cpp — interpolate (as torch.nn.functional.interpolate) of x (N, C, H, W)
// in modes nearest and bilinear, one spatial axis after the other. For an axis of size in -> out,
// PyTorch's rules (aten/src/ATen/native/UpSample.h), in x's precision (float for float32):
//   scale     = align_corners ? (in - 1) / (out - 1) (0 when out = 1)
//             : 1 / scale_factor when one was given (and not recompute_scale_factor), else in / out
//   nearest   src(i) = min(floor(i * scale), in - 1)   (out = in: i; out = 2 in: i / 2)
//   bilinear  r = align_corners ? i * scale : max(scale * (i + 0.5) - 0.5, 0)
//             i0 = min(floor(r), in - 1), i1 = i0 + (i0 < in - 1), lambda = clamp(r - i0, 0, 1)
//             out[i] = (1 - lambda) x[i0] + lambda x[i1]
// Each axis is index_select (and for bilinear two of them, weighted and added), so the gradient
// flows back through index_select's index_add and needs no kernel of its own. Bilinear applies
// the two axes separably, which equals PyTorch's four-neighbour sum up to rounding.
#include <cmath>
#include <string>

#include "minidl/autograd/ops.h"
#include "minidl/tensor/creation.h"

namespace minidl {

namespace {

// One spatial axis: its output size and the scale factor the coordinate rule may use.
struct Axis {
  int64_t in = 0, out = 0;
  std::optional<double> scale;
};

// The source indices (and, for bilinear, the weight of the second neighbour) of one axis.
struct AxisMap {
  std::vector<int64_t> i0, i1;
  std::vector<double> lambda1;
  bool identity = true;  // out[i] = x[i] for every i: the axis needs no work
};

template <class Op> Op compute_scale(const Axis& a, bool align_corners) {
  if (align_corners) return a.out > 1 ? static_cast<Op>(a.in - 1) / static_cast<Op>(a.out - 1) : Op(0);
  if (a.scale && *a.scale > 0) return static_cast<Op>(1.0 / *a.scale);
  return static_cast<Op>(a.in) / static_cast<Op>(a.out);
}

// Op: float for float32 inputs, double for float64 (PyTorch's opmath type).
template <class Op> AxisMap nearest_map(const Axis& a) {
  AxisMap m;
  const Op scale = compute_scale<Op>(a, false);
  for (int64_t i = 0; i < a.out; ++i) {
    int64_t src = i;
    if (a.out == 2 * a.in)
      src = i >> 1;
    else if (a.out != a.in)
      src = std::min(static_cast<int64_t>(std::floor(static_cast<Op>(i) * scale)), a.in - 1);
    m.i0.push_back(src);
    m.identity = m.identity && a.out == a.in && src == i;
  }
  return m;
}

template <class Op> AxisMap linear_map(const Axis& a, bool align_corners) {
  AxisMap m;
  const Op scale = compute_scale<Op>(a, align_corners);
  for (int64_t i = 0; i < a.out; ++i) {
    Op r = align_corners ? scale * static_cast<Op>(i) : scale * (static_cast<Op>(i) + Op(0.5)) - Op(0.5);
    if (r < Op(0)) r = Op(0);
    const int64_t i0 = std::min(static_cast<int64_t>(std::floor(r)), a.in - 1);
    const Op lambda = std::min(std::max(r - static_cast<Op>(i0), Op(0)), Op(1));
    m.i0.push_back(i0);
    m.i1.push_back(i0 + (i0 < a.in - 1 ? 1 : 0));
    m.lambda1.push_back(static_cast<double>(lambda));
    m.identity = m.identity && a.out == a.in && i0 == i && lambda == Op(0);
  }
  return m;
}

Tensor index_tensor(const std::vector<int64_t>& v, Device device) {
  return from_vector(v, {static_cast<int64_t>(v.size())}).to(device);
}

// x resampled along dim d (2 or 3) by m.
Variable apply_axis(const Variable& x, int64_t d, const AxisMap& m) {
  if (m.identity) return x;
  Variable y0 = index_select(x, d, index_tensor(m.i0, x.device()));
  if (m.lambda1.empty()) return y0;
  const int64_t out = static_cast<int64_t>(m.i0.size());
  std::vector<double> l0(m.lambda1.size());
  for (size_t i = 0; i < l0.size(); ++i) l0[i] = 1.0 - m.lambda1[i];
  const Shape wshape = d == 2 ? Shape{out, 1} : Shape{out};  // broadcasts over (N, C, H_out, W_out)
  auto weights = [&](const std::vector<double>& w) {
    return Variable(from_vector(w, wshape, x.dtype()).to(x.device()));
  };
  Variable y1 = index_select(x, d, index_tensor(m.i1, x.device()));
  return add(mul(y0, weights(l0)), mul(y1, weights(m.lambda1)));
}

std::string sizes_str(const InterpolateOptions& o) {
  std::string s;
  for (int64_t v : o.size) s += (s.empty() ? "" : ", ") + std::to_string(v);
  for (double v : o.scale_factor) s += (s.empty() ? "" : ", ") + std::to_string(v);
  return "(" + s + ")";
}

// The two axes (H, W) of x for these options, checked.
std::pair<Axis, Axis> output_axes(const Variable& x, const InterpolateOptions& o) {
  const bool has_size = !o.size.empty(), has_scale = !o.scale_factor.empty();
  if (has_size == has_scale)
    throw std::invalid_argument(std::string("interpolate: give exactly one of size and scale_factor, got ") +
                                (has_size ? "both" : "neither"));
  if (o.size.size() > 2 || o.scale_factor.size() > 2)
    throw std::invalid_argument("interpolate: size and scale_factor take one value or two (h, w), got " + sizes_str(o));
  Axis a[2];
  for (int k = 0; k < 2; ++k) {
    a[k].in = x.size(2 + k);
    if (has_size) {
      a[k].out = o.size[o.size.size() == 2 ? k : 0];
    } else {
      const double f = o.scale_factor[o.scale_factor.size() == 2 ? k : 0];
      if (!(f > 0)) throw std::invalid_argument("interpolate: scale_factor must be positive, got " + sizes_str(o));
      a[k].out = static_cast<int64_t>(std::floor(static_cast<double>(a[k].in) * f));
      if (!o.recompute_scale_factor) a[k].scale = f;
    }
    if (a[k].out <= 0)
      throw std::invalid_argument("interpolate: output size must be positive, got " + std::to_string(a[k].out) +
                                  " for input " + x.data().desc() + " and " + (has_size ? "size " : "scale_factor ") +
                                  sizes_str(o));
  }
  return {a[0], a[1]};
}

template <class Op> Variable interpolate_as(const Variable& x, const InterpolateOptions& o) {
  const auto [h, w] = output_axes(x, o);
  if (o.mode == InterpolateMode::Nearest)
    return apply_axis(apply_axis(x, 2, nearest_map<Op>(h)), 3, nearest_map<Op>(w));
  const bool ac = o.align_corners.value_or(false);
  return apply_axis(apply_axis(x, 3, linear_map<Op>(w, ac)), 2, linear_map<Op>(h, ac));
}

}  // namespace

Variable interpolate(const Variable& x, const InterpolateOptions& o) {
  if (x.dim() != 4 || (x.dtype() != DType::Float32 && x.dtype() != DType::Float64))
    throw std::invalid_argument("interpolate: expected a float32 or float64 input (N, C, H, W), got " +
                                x.data().desc());
  if (o.mode == InterpolateMode::Nearest && o.align_corners.has_value())
    throw std::invalid_argument("interpolate: align_corners can only be set with mode bilinear, not nearest");
  if (x.dtype() == DType::Float32) return interpolate_as<float>(x, o);
  return interpolate_as<double>(x, o);
}

}  // namespace minidl
