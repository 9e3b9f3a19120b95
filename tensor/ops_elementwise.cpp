// tensor/ops_elementwise.cpp — element-wise ops: broadcasting binary ops, ops with a scalar, unary
// math, activation backward helpers, in-place updates, and sum_to (the inverse of broadcasting).
// Each op checks its inputs, lines the operands up as strided views of one shape (a broadcast
// operand gets stride 0 via expand) and runs a kernels/cpu/elementwise.h loop — or, for CUDA
// tensors, the kernels/cuda/elementwise.cu one — with a functor from kernels/functors.h.
// bfloat16 / float16 operands compute in float32 and round the result back (to nearest, even).
#include <stdexcept>
#include <string>

#include "minidl/kernels/cpu/elementwise.h"
#include "minidl/kernels/cpu/half_span.h"
#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/cpu/vec_math.h"
#include "minidl/kernels/functors.h"
#include "minidl/tensor/ops.h"
#include "minidl/tensor/cuda_dispatch.h"
#include "minidl/tensor/ops_util.h"

namespace minidl {

namespace k = kernels;
using detail::check_defined;
using detail::check_same_dtype;
using kernels::cpu::StridedLoop;

// ---------------------------------------------------------------- broadcasting

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  // right-aligned: sizes must match or one of them be 1
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      throw std::invalid_argument(std::string(op) + ": shapes " + shape_str(a) + " and " + shape_str(b) +
                                  " cannot be broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor sum_to(const Tensor& t, const Shape& shape) {
  check_defined(t, "sum_to");
  if (t.shape() == shape) return t;
  const int64_t lead = t.dim() - static_cast<int64_t>(shape.size());
  if (lead < 0 || broadcast_shapes(shape, t.shape(), "sum_to") != t.shape())
    throw std::invalid_argument("sum_to: cannot sum " + t.desc() + " down to shape " + shape_str(shape));
  Shape dims;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && t.size(d) != 1)) dims.push_back(d);
  if (dims.empty()) return t.reshape(shape);
  return sum(t, dims, /*keepdim=*/true).reshape(shape);
}

namespace {

// Whether t is broadcast (stride 0, size > 1) along some dimension: its elements alias.
bool has_broadcast_dim(const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.stride(d) == 0 && t.size(d) > 1) return true;
  return false;
}

// Throws when an in-place destination has a broadcast dim.
void check_writable(const Tensor& a, const char* op) {
  if (has_broadcast_dim(a))
    throw std::invalid_argument(std::string(op) + ": cannot write in place into an expanded (broadcast) tensor " +
                                a.desc());
}

// b viewed with a's shape (for in-place ops, where `a` keeps its shape).
Tensor expand_to(const Tensor& b, const Tensor& a, const char* op) {
  if (b.shape() == a.shape()) return b;
  if (broadcast_shapes(a.shape(), b.shape(), op) != a.shape())
    throw std::invalid_argument(std::string(op) + ": shape " + shape_str(b.shape()) +
                                " cannot be broadcast to the in-place destination's shape " + shape_str(a.shape()));
  return b.expand(a.shape());
}

// A CPU operand read across its rows (a transposed view: innermost stride neither 1 nor 0, and
// broadcast nowhere) made contiguous first. The tiled transposing copy (kernels/cpu/copy.h) and a
// stride-1 loop cost a fraction of the element loop gathering it one cache line per element.
Tensor rows_in_order(const Tensor& t) {
  const int64_t last = t.dim() - 1;
  if (t.device().is_cuda() || last < 0 || t.size(last) == 1 || t.stride(last) == 1 || has_broadcast_dim(t)) return t;
  return t.contiguous();
}

enum class Kinds { Any, Floating };

template <class F> void dispatch_kind(DType t, const char* op, Kinds kinds, F&& f) {
  if (kinds == Kinds::Floating)
    dispatch_floating(t, op, f);
  else
    dispatch(t, op, f);
}

// Each op below: one set of checks, then the CPU loop (kernels/cpu/elementwise.h) or the CUDA
// one (kernels/cuda/elementwise.cu) with the same functor, over the same strided operands.

// out (broadcast shape) = f(a, b)
template <class Op> Tensor binary_op(const Tensor& a, const Tensor& b, const char* op, Op f, Kinds kinds = Kinds::Any) {
  const bool cuda = cuda_dispatch::on_cuda({&a, &b}, op);
  check_defined(a, op);
  check_defined(b, op);
  check_same_dtype(a, b, op);
  if (is_half(a.dtype())) return binary_op(a.to(DType::Float32), b.to(DType::Float32), op, f, kinds).to(a.dtype());
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out(shape, a.dtype(), a.device());
  const Tensor ea = a.shape() == shape ? rows_in_order(a) : a.expand(shape);
  const Tensor eb = b.shape() == shape ? rows_in_order(b) : b.expand(shape);
  dispatch_kind(a.dtype(), op, kinds, [&](auto tag) {
    using T = decltype(tag);
    if (cuda) return cuda_dispatch::binary(out, ea, eb, f, op);
    const StridedLoop<3> loop(shape, {&out.strides(), &ea.strides(), &eb.strides()});
    k::cpu::binary_kernel(loop, out.data<T>(), ea.data<T>(), eb.data<T>(), f);
  });
  return out;
}

// out (x's shape, contiguous) = f(x)
template <class Op> Tensor unary_op(const Tensor& x_in, const char* op, Op f, Kinds kinds = Kinds::Floating) {
  const bool cuda = cuda_dispatch::on_cuda({&x_in}, op);
  check_defined(x_in, op);
  if (is_half(x_in.dtype())) return unary_op(x_in.to(DType::Float32), op, f, kinds).to(x_in.dtype());
  const Tensor x = rows_in_order(x_in);
  Tensor out(x.shape(), x.dtype(), x.device());
  dispatch_kind(x.dtype(), op, kinds, [&](auto tag) {
    using T = decltype(tag);
    if (cuda) return cuda_dispatch::unary(out, x, f, op);
    const StridedLoop<2> loop(x.shape(), {&out.strides(), &x.strides()});
    k::cpu::unary_kernel(loop, out.data<T>(), x.data<T>(), f);
  });
  return out;
}

// The checks both ternary forms make: a, b and c defined, with one dtype.
void check_ternary_operands(const Tensor& a, const Tensor& b, const Tensor& c, const char* op) {
  check_defined(a, op);
  check_defined(b, op);
  check_defined(c, op);
  check_same_dtype(a, b, op);
  check_same_dtype(a, c, op);
}

// out (broadcast shape) = f(a, b, c)
template <class Op> Tensor ternary_op(const Tensor& a, const Tensor& b, const Tensor& c, const char* op, Op f) {
  const bool cuda = cuda_dispatch::on_cuda({&a, &b, &c}, op);
  check_ternary_operands(a, b, c, op);
  if (is_half(a.dtype()))
    return ternary_op(a.to(DType::Float32), b.to(DType::Float32), c.to(DType::Float32), op, f).to(a.dtype());
  const Shape shape = broadcast_shapes(broadcast_shapes(a.shape(), b.shape(), op), c.shape(), op);
  Tensor out(shape, a.dtype(), a.device());
  const Tensor ea = a.expand(shape), eb = b.expand(shape), ec = c.expand(shape);
  dispatch(a.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if (cuda) return cuda_dispatch::ternary(out, ea, eb, ec, f, op);
    const StridedLoop<4> loop(shape, {&out.strides(), &ea.strides(), &eb.strides(), &ec.strides()});
    k::cpu::ternary_kernel(loop, out.data<T>(), ea.data<T>(), eb.data<T>(), ec.data<T>(), f);
  });
  return out;
}

// a = f(a)
template <class Op> Tensor& unary_inplace(Tensor& a, const char* op, Op f, Kinds kinds) {
  const bool cuda = cuda_dispatch::on_cuda({&a}, op);
  check_defined(a, op);
  check_writable(a, op);
  if (is_half(a.dtype())) {
    Tensor w = a.to(DType::Float32);
    a.copy_(unary_inplace(w, op, f, kinds));
    return a;
  }
  dispatch_kind(a.dtype(), op, kinds, [&](auto tag) {
    using T = decltype(tag);
    if (cuda) return cuda_dispatch::unary(a, a, f, op);
    const StridedLoop<2> loop(a.shape(), {&a.strides(), &a.strides()});
    k::cpu::unary_kernel(loop, a.data<T>(), a.data<T>(), f);
  });
  return a;
}

// a = f(a, b), b broadcast to a's shape
template <class Op> Tensor& binary_inplace(Tensor& a, const Tensor& b, const char* op, Op f, Kinds kinds) {
  const bool cuda = cuda_dispatch::on_cuda({&a, &b}, op);
  check_defined(a, op);
  check_defined(b, op);
  check_same_dtype(a, b, op);
  check_writable(a, op);
  const Tensor eb = expand_to(b, a, op);
  if (is_half(a.dtype())) {
    Tensor w = a.to(DType::Float32);
    a.copy_(binary_inplace(w, eb.to(DType::Float32), op, f, kinds));
    return a;
  }
  dispatch_kind(a.dtype(), op, kinds, [&](auto tag) {
    using T = decltype(tag);
    if (cuda) return cuda_dispatch::binary(a, a, eb, f, op);
    const StridedLoop<3> loop(a.shape(), {&a.strides(), &a.strides(), &eb.strides()});
    k::cpu::binary_kernel(loop, a.data<T>(), a.data<T>(), eb.data<T>(), f);
  });
  return a;
}

// a = f(a, b, c), b and c broadcast to a's shape
template <class Op> Tensor& ternary_inplace(Tensor& a, const Tensor& b, const Tensor& c, const char* op, Op f) {
  const bool cuda = cuda_dispatch::on_cuda({&a, &b, &c}, op);
  check_ternary_operands(a, b, c, op);
  check_writable(a, op);
  const Tensor eb = expand_to(b, a, op);
  const Tensor ec = expand_to(c, a, op);
  if (is_half(a.dtype())) {
    Tensor w = a.to(DType::Float32);
    a.copy_(ternary_inplace(w, eb.to(DType::Float32), ec.to(DType::Float32), op, f));
    return a;
  }
  dispatch_floating(a.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if (cuda) return cuda_dispatch::ternary(a, a, eb, ec, f, op);
    const StridedLoop<4> loop(a.shape(), {&a.strides(), &a.strides(), &eb.strides(), &ec.strides()});
    k::cpu::ternary_kernel(loop, a.data<T>(), a.data<T>(), eb.data<T>(), ec.data<T>(), f);
  });
  return a;
}

}  // namespace

// ---------------------------------------------------------------- binary

Tensor add(const Tensor& a, const Tensor& b) { return binary_op(a, b, "add", k::AddOp{}); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary_op(a, b, "sub", k::SubOp{}); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary_op(a, b, "mul", k::MulOp{}); }
Tensor div(const Tensor& a, const Tensor& b) { return binary_op(a, b, "div", k::DivOp{}, Kinds::Floating); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary_op(a, b, "maximum", k::MaximumOp{}); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary_op(a, b, "minimum", k::MinimumOp{}); }
Tensor eq(const Tensor& a, const Tensor& b) { return binary_op(a, b, "eq", k::EqOp{}); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary_op(a, b, "gt", k::GtOp{}); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary_op(a, b, "lt", k::LtOp{}); }
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  return ternary_op(cond, a, b, "where", k::WhereOp{});
}
Tensor isfinite(const Tensor& x) { return unary_op(x, "isfinite", k::IsFiniteOp{}, Kinds::Any); }

Tensor add(const Tensor& a, double s) { return unary_op(a, "add", k::AddScalarOp{s}, Kinds::Any); }
Tensor mul(const Tensor& a, double s) { return unary_op(a, "mul", k::MulScalarOp{s}, Kinds::Any); }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double s) { return add(a, s); }
Tensor operator-(const Tensor& a, double s) { return add(a, -s); }
Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
Tensor operator/(const Tensor& a, double s) { return unary_op(a, "div", k::DivScalarOp{s}, Kinds::Floating); }
Tensor operator*(double s, const Tensor& a) { return mul(a, s); }
Tensor operator-(const Tensor& a) { return neg(a); }

// ---------------------------------------------------------------- unary

Tensor neg(const Tensor& x) { return unary_op(x, "neg", k::NegOp{}, Kinds::Any); }
Tensor exp(const Tensor& x) { return unary_op(x, "exp", k::ExpOp{}); }
Tensor log(const Tensor& x) { return unary_op(x, "log", k::LogOp{}); }
Tensor sqrt(const Tensor& x) { return unary_op(x, "sqrt", k::SqrtOp{}); }
Tensor rsqrt(const Tensor& x) { return unary_op(x, "rsqrt", k::RsqrtOp{}); }
Tensor abs(const Tensor& x) { return unary_op(x, "abs", k::AbsOp{}, Kinds::Any); }
Tensor tanh(const Tensor& x) { return unary_op(x, "tanh", k::TanhOp{}); }
Tensor sigmoid(const Tensor& x) { return unary_op(x, "sigmoid", k::SigmoidOp{}); }
Tensor relu(const Tensor& x) { return unary_op(x, "relu", k::ReluOp{}); }
// Contiguous float32 on the CPU: the erf-form GELU runs the vectorised loops of
// kernels/cpu/vec_math.h (same math as GeluErfOp / GeluErfBackward, compared with them in
// tests/tensor/test_cpu_fast_paths.cpp); everything else goes through the shared functors.
namespace {
bool gelu_fast_path(const Tensor& x) { return x.device().is_cpu() && x.dtype() == DType::Float32 && x.is_contiguous(); }
}  // namespace

Tensor gelu(const Tensor& x, bool tanh_approximation) {
  if (!tanh_approximation && gelu_fast_path(x)) {
    Tensor out(x.shape(), x.dtype());
    const float* xp = x.data<float>();
    float* yp = out.data<float>();
    k::cpu::parallel_for(x.numel(), k::cpu::kElementwiseChunk,
                         [&](int64_t b, int64_t e) { k::cpu::gelu_erf_span(xp + b, yp + b, e - b); });
    return out;
  }
  return tanh_approximation ? unary_op(x, "gelu", k::GeluTanhOp{}) : unary_op(x, "gelu", k::GeluErfOp{});
}
Tensor pow(const Tensor& x, double p) { return unary_op(x, "pow", k::PowScalarOp{p}); }

// dx from (x or y, dy); shapes broadcast like any binary op (normally they are equal)
Tensor relu_backward(const Tensor& x, const Tensor& dy) {
  return binary_op(x, dy, "relu_backward", k::ReluBackward{}, Kinds::Floating);
}
Tensor gelu_backward(const Tensor& x, const Tensor& dy, bool tanh_approximation) {
  if (!tanh_approximation && gelu_fast_path(x) && gelu_fast_path(dy) && x.shape() == dy.shape()) {
    Tensor dx(x.shape(), x.dtype());
    const float* xp = x.data<float>();
    const float* gp = dy.data<float>();
    float* dp = dx.data<float>();
    k::cpu::parallel_for(x.numel(), k::cpu::kElementwiseChunk,
                         [&](int64_t b, int64_t e) { k::cpu::gelu_erf_backward_span(xp + b, gp + b, dp + b, e - b); });
    return dx;
  }
  return tanh_approximation ? binary_op(x, dy, "gelu_backward", k::GeluTanhBackward{}, Kinds::Floating)
                            : binary_op(x, dy, "gelu_backward", k::GeluErfBackward{}, Kinds::Floating);
}
Tensor tanh_backward(const Tensor& y, const Tensor& dy) {
  return binary_op(y, dy, "tanh_backward", k::TanhBackwardFromY{}, Kinds::Floating);
}
Tensor sigmoid_backward(const Tensor& y, const Tensor& dy) {
  return binary_op(y, dy, "sigmoid_backward", k::SigmoidBackwardFromY{}, Kinds::Floating);
}

// ---------------------------------------------------------------- in place

Tensor& add_(Tensor& a, const Tensor& b, double alpha) {
  if (alpha == 1.0) return binary_inplace(a, b, "add_", k::AddOp{}, Kinds::Any);
  return binary_inplace(a, b, "add_", k::AddScaledOp{alpha}, Kinds::Any);
}
Tensor& mul_(Tensor& a, double s) { return unary_inplace(a, "mul_", k::MulScalarOp{s}, Kinds::Any); }
Tensor& mul_(Tensor& a, const Tensor& b) { return binary_inplace(a, b, "mul_", k::MulOp{}, Kinds::Any); }
Tensor& axpby_(Tensor& a, double beta, const Tensor& b, double alpha) {
  return binary_inplace(a, b, "axpby_", k::AxpbyOp{beta, alpha}, Kinds::Floating);
}
Tensor& lerp_(Tensor& a, const Tensor& b, double weight) {
  return binary_inplace(a, b, "lerp_", k::LerpOp{weight}, Kinds::Floating);
}
Tensor& addcmul_(Tensor& a, const Tensor& b, const Tensor& c, double alpha) {
  return ternary_inplace(a, b, c, "addcmul_", k::AddcmulOp{alpha});
}
Tensor& addcdiv_(Tensor& a, const Tensor& b, const Tensor& c, double alpha) {
  return ternary_inplace(a, b, c, "addcdiv_", k::AddcdivOp{alpha});
}

// ---------------------------------------------------------------- more activations, loss pieces

Tensor silu(const Tensor& x) { return unary_op(x, "silu", k::SiluOp{}); }
Tensor leaky_relu(const Tensor& x, double slope) { return unary_op(x, "leaky_relu", k::LeakyReluOp{slope}); }
Tensor elu(const Tensor& x, double alpha) { return unary_op(x, "elu", k::EluOp{alpha}); }
Tensor softplus(const Tensor& x, double beta, double threshold) {
  return unary_op(x, "softplus", k::SoftplusOp{beta, threshold});
}
Tensor hardswish(const Tensor& x) { return unary_op(x, "hardswish", k::HardswishOp{}); }
Tensor smooth_l1(const Tensor& d, double beta) { return unary_op(d, "smooth_l1", k::SmoothL1Op{beta}); }

Tensor silu_backward(const Tensor& x, const Tensor& dy) {
  return binary_op(x, dy, "silu_backward", k::SiluBackward{}, Kinds::Floating);
}
Tensor leaky_relu_backward(const Tensor& x, const Tensor& dy, double slope) {
  return binary_op(x, dy, "leaky_relu_backward", k::LeakyReluBackward{slope}, Kinds::Floating);
}
Tensor elu_backward(const Tensor& x, const Tensor& dy, double alpha) {
  return binary_op(x, dy, "elu_backward", k::EluBackward{alpha}, Kinds::Floating);
}
Tensor softplus_backward(const Tensor& x, const Tensor& dy, double beta, double threshold) {
  return binary_op(x, dy, "softplus_backward", k::SoftplusBackward{beta, threshold}, Kinds::Floating);
}
Tensor hardswish_backward(const Tensor& x, const Tensor& dy) {
  return binary_op(x, dy, "hardswish_backward", k::HardswishBackward{}, Kinds::Floating);
}
Tensor abs_backward(const Tensor& x, const Tensor& dy) {
  return binary_op(x, dy, "abs_backward", k::AbsBackward{}, Kinds::Floating);
}
Tensor smooth_l1_backward(const Tensor& d, const Tensor& dy, double beta) {
  return binary_op(d, dy, "smooth_l1_backward", k::SmoothL1Backward{beta}, Kinds::Floating);
}

Tensor round_to(const Tensor& x, DType dtype) {
  check_defined(x, "round_to");
  if (x.dtype() != DType::Float32 || !is_half(dtype))
    throw std::invalid_argument("round_to: expected a float32 tensor and bfloat16 or float16, got " + x.desc() +
                                " and " + dtype_name(dtype));
  if (dtype != DType::BFloat16 || x.device().is_cuda()) return x.to(dtype).to(DType::Float32);
  const Tensor src = x.contiguous();
  Tensor y(src.shape(), DType::Float32);
  const float* in = src.data<float>();
  float* out = y.data<float>();
  kernels::cpu::parallel_for(src.numel(), 1 << 16,
                             [&](int64_t b, int64_t e) { kernels::cpu::round_to_bf16_span(in + b, out + b, e - b); });
  return y;
}

}  // namespace minidl
