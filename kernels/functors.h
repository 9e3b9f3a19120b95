// kernels/functors.h — element-wise math shared by the CPU and CUDA kernels.
// Each functor is __host__ __device__ so the CPU tests exercise exactly the math the GPU runs.
// Forward functors compute y = f(x) (or f(a, b)); backward functors compute dL/dx from
// (x or y, dy). Types are templated so float32 and float64 share one definition.
// clang-format off (one-line functors read as a table)
#pragma once
#include <cmath>

#if defined(__CUDACC__)
#define MINIDL_HD __host__ __device__ __forceinline__
#else
#define MINIDL_HD inline
#endif

namespace minidl::kernels {

// ---- binary ----
struct AddOp {
  template <class T> MINIDL_HD T operator()(T a, T b) const { return a + b; }
};
struct SubOp {
  template <class T> MINIDL_HD T operator()(T a, T b) const { return a - b; }
};
struct MulOp {
  template <class T> MINIDL_HD T operator()(T a, T b) const { return a * b; }
};
struct DivOp {
  template <class T> MINIDL_HD T operator()(T a, T b) const { return a / b; }
};
// maximum/minimum propagate NaN from either side, as torch.maximum/minimum (x != x: x is NaN)
struct MaximumOp {
  template <class T> MINIDL_HD T operator()(T a, T b) const { return a != a || a > b ? a : b; }
};
struct MinimumOp {
  template <class T> MINIDL_HD T operator()(T a, T b) const { return a != a || a < b ? a : b; }
};
struct EqOp {
  template <class T> MINIDL_HD T operator()(T a, T b) const { return a == b ? T(1) : T(0); }
};
struct GtOp {
  template <class T> MINIDL_HD T operator()(T a, T b) const { return a > b ? T(1) : T(0); }
};
struct LtOp {
  template <class T> MINIDL_HD T operator()(T a, T b) const { return a < b ? T(1) : T(0); }
};
// 1 where x is neither NaN nor +-Inf (x - x is NaN exactly then; always 0 for integers), else 0
struct IsFiniteOp {
  template <class T> MINIDL_HD T operator()(T x) const { return x - x == T(0) ? T(1) : T(0); }
};
// where(cond, a, b): a where cond is non-zero, else b (cond in the operands' dtype, as eq gives it)
struct WhereOp {
  template <class T> MINIDL_HD T operator()(T cond, T a, T b) const { return cond != T(0) ? a : b; }
};

// ---- unary forward ----
struct NegOp {
  template <class T> MINIDL_HD T operator()(T x) const { return -x; }
};
struct ExpOp {
  template <class T> MINIDL_HD T operator()(T x) const { return std::exp(x); }
};
struct LogOp {
  template <class T> MINIDL_HD T operator()(T x) const { return std::log(x); }
};
struct SqrtOp {
  template <class T> MINIDL_HD T operator()(T x) const { return std::sqrt(x); }
};
struct RsqrtOp {
  template <class T> MINIDL_HD T operator()(T x) const { return T(1) / std::sqrt(x); }
};
struct AbsOp {
  template <class T> MINIDL_HD T operator()(T x) const { return x < T(0) ? -x : x; }
};
struct TanhOp {
  template <class T> MINIDL_HD T operator()(T x) const { return std::tanh(x); }
};
struct SigmoidOp {
  template <class T> MINIDL_HD T operator()(T x) const {
    // stable for large |x|: never exponentiates a large positive number
    if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
    T e = std::exp(x);
    return e / (T(1) + e);
  }
};
// relu keeps NaN and -0.0 (only x < 0 becomes 0), as torch.relu
struct ReluOp {
  template <class T> MINIDL_HD T operator()(T x) const { return x < T(0) ? T(0) : x; }
};
struct PowScalarOp {
  double p;
  template <class T> MINIDL_HD T operator()(T x) const {
    if (p == 2.0) return x * x;
    return std::pow(x, T(p));
  }
};
struct AddScalarOp {
  double s;
  template <class T> MINIDL_HD T operator()(T x) const { return x + T(s); }
};
struct MulScalarOp {
  double s;
  template <class T> MINIDL_HD T operator()(T x) const { return x * T(s); }
};
struct DivScalarOp {
  double s;
  template <class T> MINIDL_HD T operator()(T x) const { return x / T(s); }
};

// GELU, exact form: x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))
struct GeluErfOp {
  template <class T> MINIDL_HD T operator()(T x) const {
    return T(0.5) * x * (T(1) + std::erf(x * T(0.70710678118654752440)));
  }
};
// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
struct GeluTanhOp {
  template <class T> MINIDL_HD T operator()(T x) const {
    const T k = T(0.79788456080286535588);
    return T(0.5) * x * (T(1) + std::tanh(k * (x + T(0.044715) * x * x * x)));
  }
};

// ---- activations beyond ReLU/GELU (forward; backward functors below take (x, dy)) ----
// SiLU (swish): x * sigmoid(x)
struct SiluOp {
  template <class T> MINIDL_HD T operator()(T x) const { return x * SigmoidOp{}(x); }
};
// LeakyReLU: x if x > 0 else slope * x
struct LeakyReluOp {
  double slope;
  template <class T> MINIDL_HD T operator()(T x) const { return x > T(0) ? x : T(slope) * x; }
};
// ELU: x if x > 0 else alpha (e^x - 1)
struct EluOp {
  double alpha;
  template <class T> MINIDL_HD T operator()(T x) const { return x > T(0) ? x : T(alpha) * std::expm1(x); }
};
// Softplus: log(1 + e^(beta x)) / beta, x itself where beta x > threshold (PyTorch's rule);
// computed as (max(z, 0) + log1p(e^-|z|)) / beta so it never overflows (threshold may be inf).
struct SoftplusOp {
  double beta, threshold;
  template <class T> MINIDL_HD T operator()(T x) const {
    const T z = T(beta) * x;
    if (z > T(threshold)) return x;
    const T az = z < T(0) ? -z : z;
    return ((z > T(0) ? z : T(0)) + std::log1p(std::exp(-az))) / T(beta);
  }
};
// Hardswish: x * clamp(x + 3, 0, 6) / 6
struct HardswishOp {
  template <class T> MINIDL_HD T operator()(T x) const {
    if (x <= T(-3)) return T(0);
    if (x >= T(3)) return x;
    return x * (x + T(3)) / T(6);
  }
};
// smooth L1 of a difference d: 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (beta > 0)
struct SmoothL1Op {
  double beta;
  template <class T> MINIDL_HD T operator()(T d) const {
    const T ad = d < T(0) ? -d : d;
    return ad < T(beta) ? T(0.5) * d * d / T(beta) : ad - T(0.5) * T(beta);
  }
};

// ---- unary backward: dx from (input x, upstream dy) ----
// dy where x > 0 or x is NaN, as torch's threshold_backward (x <= 0 gives 0)
struct ReluBackward {
  template <class T> MINIDL_HD T operator()(T x, T dy) const { return x <= T(0) ? T(0) : dy; }
};
struct GeluErfBackward {
  template <class T> MINIDL_HD T operator()(T x, T dy) const {
    const T cdf = T(0.5) * (T(1) + std::erf(x * T(0.70710678118654752440)));
    const T pdf = T(0.39894228040143267794) * std::exp(T(-0.5) * x * x);
    return dy * (cdf + x * pdf);
  }
};
struct GeluTanhBackward {
  template <class T> MINIDL_HD T operator()(T x, T dy) const {
    const T k = T(0.79788456080286535588);
    const T inner = k * (x + T(0.044715) * x * x * x);
    const T t = std::tanh(inner);
    const T dinner = k * (T(1) + T(3) * T(0.044715) * x * x);
    return dy * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * dinner);
  }
};
// backward from the output y: tanh' = 1 - y^2, sigmoid' = y (1 - y)
struct TanhBackwardFromY {
  template <class T> MINIDL_HD T operator()(T y, T dy) const { return dy * (T(1) - y * y); }
};
struct SigmoidBackwardFromY {
  template <class T> MINIDL_HD T operator()(T y, T dy) const { return dy * y * (T(1) - y); }
};

// activation backward from the input x
struct SiluBackward {
  template <class T> MINIDL_HD T operator()(T x, T dy) const {
    const T s = SigmoidOp{}(x);
    return dy * s * (T(1) + x * (T(1) - s));
  }
};
struct LeakyReluBackward {
  double slope;
  template <class T> MINIDL_HD T operator()(T x, T dy) const { return x > T(0) ? dy : T(slope) * dy; }
};
struct EluBackward {
  double alpha;
  template <class T> MINIDL_HD T operator()(T x, T dy) const { return x > T(0) ? dy : dy * T(alpha) * std::exp(x); }
};
struct SoftplusBackward {  // d/dx = sigmoid(beta x), 1 where beta x > threshold
  double beta, threshold;
  template <class T> MINIDL_HD T operator()(T x, T dy) const {
    const T z = T(beta) * x;
    return z > T(threshold) ? dy : dy * SigmoidOp{}(z);
  }
};
struct HardswishBackward {  // PyTorch's convention at the kinks: (2x + 3) / 6 on [-3, 3], both ends included
  template <class T> MINIDL_HD T operator()(T x, T dy) const {
    if (x < T(-3)) return T(0);
    if (x <= T(3)) return dy * (T(2) * x + T(3)) / T(6);
    return dy;
  }
};
// |x|' = sign(x) (0 at 0, as torch.sign)
struct AbsBackward {
  template <class T> MINIDL_HD T operator()(T x, T dy) const { return x > T(0) ? dy : (x < T(0) ? -dy : T(0)); }
};
struct SmoothL1Backward {
  double beta;
  template <class T> MINIDL_HD T operator()(T d, T dy) const {
    if (d < T(0) ? -d < T(beta) : d < T(beta)) return dy * d / T(beta);
    return d > T(0) ? dy : -dy;
  }
};

// ---- in-place update rules (optimizers, gradient accumulation): new a from (a, b[, c]) ----
struct AddScaledOp {
  double alpha;
  template <class T> MINIDL_HD T operator()(T a, T b) const { return a + T(alpha) * b; }
};
struct AxpbyOp {  // a * beta + b * alpha
  double beta, alpha;
  template <class T> MINIDL_HD T operator()(T a, T b) const { return a * T(beta) + b * T(alpha); }
};
struct LerpOp {
  double w;
  template <class T> MINIDL_HD T operator()(T a, T b) const { return a + T(w) * (b - a); }
};
struct AddcmulOp {
  double alpha;
  template <class T> MINIDL_HD T operator()(T a, T b, T c) const { return a + T(alpha) * b * c; }
};
struct AddcdivOp {
  double alpha;
  template <class T> MINIDL_HD T operator()(T a, T b, T c) const { return a + T(alpha) * b / c; }
};

}  // namespace minidl::kernels
// clang-format on
