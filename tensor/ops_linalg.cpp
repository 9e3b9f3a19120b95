// tensor/ops_linalg.cpp — matrix products: mm (2-d), addmm (a bias plus a 2-d product),
// mm_and_row_sums (a product and its left operand's row sums) and matmul
// (torch.matmul semantics: 1-d vectors, 2-d matrices, batched (..., n, k)·(..., k, m) with
// broadcast batch dims).
// The work is kernels::cpu::gemm (Eigen), or one cuBLAS strided-batched GEMM for CUDA tensors
// (kernels/cuda/blas.cu). A 2-d operand whose rows or columns are stride 1 —
// a contiguous matrix, a row slice, or a transposed view — is passed as a pointer plus a
// leading dimension and a transpose flag, so transposes are never copied.
// bfloat16 operands (autocast's products, autograd/autocast.h) give a float32 result: float32
// sums of the exact products, never rounded back (kernels::cpu::gemm_bf16; on CUDA cuBLAS's
// bfloat16 GEMM with float32 compute); on a CPU without AVX512_BF16 (or MINIDL_CPU_CAPABILITY below
// avx512_bf16) the same product runs through the float32 kernel on the widened operands (said once
// on stderr). float16 operands: the same on CUDA (cuBLAS's float16 GEMM, float32 compute and
// result); refused on the CPU, which has no float16 GEMM (autocast(Float16) widens the rounded
// operands there).
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>

#include "minidl/kernels/cpu/cpu_features.h"
#include "minidl/kernels/cpu/gemm.h"
#include "minidl/kernels/cpu/gemm_bf16.h"
#include "minidl/kernels/cpu/half.h"
#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/cuda_ops.h"
#include "minidl/tensor/ops.h"
#include "minidl/tensor/cuda_dispatch.h"
#include "minidl/tensor/ops_util.h"

namespace minidl {

using detail::check_defined;

namespace {

// How gemm reads a (rows, cols) matrix with strides (s0, s1): as stored, or stored transposed.
struct GemmOperand {
  bool ok = false;
  bool trans = false;
  int64_t ld = 0;
};

GemmOperand gemm_layout(int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
  const int64_t r = std::max<int64_t>(rows, 1), c = std::max<int64_t>(cols, 1);
  if ((s1 == 1 || cols <= 1) && (rows <= 1 || s0 >= c)) return {true, false, rows <= 1 ? c : s0};
  if ((s0 == 1 || rows <= 1) && (cols <= 1 || s1 >= r)) return {true, true, cols <= 1 ? r : s1};
  return {};
}

// The layout of the last two dims of t, making t contiguous first when gemm cannot read it.
GemmOperand matrix_layout(Tensor& t) {
  const int64_t nd = t.dim();
  GemmOperand g = gemm_layout(t.size(nd - 2), t.size(nd - 1), t.stride(nd - 2), t.stride(nd - 1));
  if (!g.ok) {
    t = t.contiguous();
    g = gemm_layout(t.size(nd - 2), t.size(nd - 1), t.stride(nd - 2), t.stride(nd - 1));
  }
  return g;
}

void check_operands(const Tensor& a, const Tensor& b, const char* op) {
  cuda_dispatch::on_cuda({&a, &b}, op);  // both on one device (else the error names them)
  check_defined(a, op);
  check_defined(b, op);
  detail::check_same_dtype(a, b, op);
  if (!a.is_floating_point())
    throw std::invalid_argument(std::string(op) + ": expected a floating dtype (float32 or float64), got " +
                                dtype_name(a.dtype()));
  if (a.dtype() == DType::Float16 && a.device().is_cpu()) throw half_unsupported(op, a.dtype());
}

// The dtype of a product: float32 for 16-bit operands, else the operands'.
DType product_dtype(DType t) { return is_half(t) ? DType::Float32 : t; }

// True when bfloat16 operands must be widened to float32 first: this CPU has no bfloat16 GEMM
// (cuBLAS always has one).
bool widen_bf16(const Tensor& a) {
  if (a.dtype() != DType::BFloat16 || a.device().is_cuda() || kernels::cpu::gemm_bf16_supported()) return false;
  static std::once_flag once;
  std::call_once(once, [] {
    using kernels::cpu::CpuCapability;
    const CpuCapability cap = kernels::cpu::cpu_capability_cap();
    const std::string why = cap < CpuCapability::Avx512Bf16
                                ? std::string("MINIDL_CPU_CAPABILITY=") + kernels::cpu::cpu_capability_name(cap) +
                                      " leaves out the bfloat16 GEMM"
                                : std::string("this CPU has no AVX512_BF16");
    std::fprintf(stderr,
                 "minidl: %s; bfloat16 matrix products run through the float32 kernel on the widened operands\n",
                 why.c_str());
  });
  return true;
}

// Calls f(T{}, O{}): the element type T of the operands and O of the product (bfloat16: uint16_t
// bit patterns and float).
template <class F> void dispatch_product(DType t, const char* op, F&& f) {
  if (t == DType::BFloat16) return f(uint16_t{}, float{});
  dispatch_floating(t, op, [&](auto tag) { f(tag, tag); });
}

// One product C = op(A) op(B) of gemm.h's arguments, float32 / float64 or bfloat16 -> float32.
template <class T>
void gemm_any(int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, bool ta, const T* B, int64_t ldb, bool tb, T* C,
              int64_t ldc) {
  kernels::cpu::gemm(M, N, K, A, lda, ta, B, ldb, tb, C, ldc);
}
void gemm_any(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, bool ta, const uint16_t* B, int64_t ldb,
              bool tb, float* C, int64_t ldc) {
  kernels::cpu::gemm_bf16(M, N, K, A, lda, ta, B, ldb, tb, C, ldc);  // supported: widen_bf16 was asked first
}

// The result of the product a (n, k) · b (k, m): `out` when defined (checked: contiguous, the
// product's shape and dtype, the operands' device, no memory shared with them), else a new tensor.
Tensor product_out(const Tensor& out, const Tensor& a, const Tensor& b, const char* op) {
  const int64_t n = a.size(0), m = b.size(1);
  const DType dtype = product_dtype(a.dtype());
  if (!out.defined()) return Tensor({n, m}, dtype, a.device());
  if (out.shape() != Shape{n, m} || out.dtype() != dtype || out.device() != a.device() || !out.is_contiguous())
    throw std::invalid_argument(std::string(op) + ": out is " + out.desc() + (out.is_contiguous() ? "" : " (strided)") +
                                ", expected a contiguous " + dtype_name(dtype) + shape_str({n, m}) + " on " +
                                a.device().str());
  if (out.numel() > 0 && (out.storage() == a.storage() || out.storage() == b.storage()))
    throw std::invalid_argument(std::string(op) +
                                ": out shares memory with an operand; the product cannot be "
                                "written over its own inputs");
  return out;
}

[[noreturn]] void shape_error(const Tensor& a, const Tensor& b, const char* op, int64_t ka, int64_t kb) {
  throw std::invalid_argument(std::string(op) + ": shapes " + shape_str(a.shape()) + " and " + shape_str(b.shape()) +
                              " cannot be multiplied (" + std::to_string(ka) + " != " + std::to_string(kb) + ")");
}

// out (batch..., n, m) = a (batch..., n, k) · b (batch..., k, m); a and b already expanded to the
// same batch dims (stride 0 where broadcast). out is contiguous.
void batched_gemm(Tensor a, Tensor b, Tensor& out) {
  const int64_t nd = a.dim();
  const int64_t n = a.size(nd - 2), k = a.size(nd - 1), m = b.size(nd - 1);
  const GemmOperand ga = matrix_layout(a), gb = matrix_layout(b);
  const Shape batch_shape(out.shape().begin(), out.shape().end() - 2);
  const int64_t batches = shape_numel(batch_shape);
  if (out.device().is_cuda()) {
    // cuBLAS: one strided-batched call. An operand whose batch dims do not step by one stride
    // (a permuted (B, H, T, D) view in attention) is made contiguous once, never split per matrix.
    int64_t sa = 0, sb = 0;
    GemmOperand la = ga, lb = gb;
    if (!cuda_dispatch::batch_stride(a, batch_shape, sa)) {
      a = a.contiguous();
      la = matrix_layout(a);
      cuda_dispatch::batch_stride(a, batch_shape, sa);
    }
    if (!cuda_dispatch::batch_stride(b, batch_shape, sb)) {
      b = b.contiguous();
      lb = matrix_layout(b);
      cuda_dispatch::batch_stride(b, batch_shape, sb);
    }
    cuda_dispatch::use_device(out);
    kernels::cuda::gemm(cuda_dispatch::elem(a.dtype()), n, m, k, a.raw_data(), la.ld, la.trans, b.raw_data(), lb.ld,
                        lb.trans, out.raw_data(), m, batches, sa, sb, n * m);
    return;
  }
  dispatch_product(a.dtype(), "matmul", [&](auto tag, auto out_tag) {
    using T = decltype(tag);
    using O = decltype(out_tag);
    const T* pa = static_cast<const T*>(a.raw_data());
    const T* pb = static_cast<const T*>(b.raw_data());
    O* po = out.data<O>();
    auto run = [&](int64_t i) {
      int64_t oa = 0, ob = 0;
      for (int64_t d = nd - 3, rem = i; d >= 0; --d) {
        const int64_t idx = rem % batch_shape[d];
        rem /= batch_shape[d];
        oa += idx * a.stride(d);
        ob += idx * b.stride(d);
      }
      gemm_any(n, m, k, pa + oa, ga.ld, ga.trans, pb + ob, gb.ld, gb.trans, po + i * n * m, m);
    };
    // Small products run one per thread; large ones are threaded inside gemm. Either way each
    // output element is computed the same way whatever the thread count.
    const bool small = 2.0 * double(n) * double(m) * double(k) < 4e6;
    if (small) {
      kernels::cpu::parallel_for(batches, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t i = b0; i < b1; ++i) run(i);
      });
    } else {
      for (int64_t i = 0; i < batches; ++i) run(i);
    }
  });
}

// mm's checks: two 2-d matrices of one floating dtype on one device whose inner sizes agree.
void check_mm(const Tensor& a, const Tensor& b, const char* op) {
  check_operands(a, b, op);
  if (a.dim() != 2 || b.dim() != 2)
    throw std::invalid_argument(std::string(op) + ": expected 2-d matrices, got shapes " + shape_str(a.shape()) +
                                " and " + shape_str(b.shape()));
  if (a.size(1) != b.size(0)) shape_error(a, b, op, a.size(1), b.size(0));
}

// The CPU bfloat16 product a (n, k) · b (k, m) -> float32 (n, m): each sum starting from bias (m
// float32 values) when given, stored rounded to bfloat16 with round (kernels::cpu::gemm_bf16).
Tensor bf16_product(const Tensor& a, const Tensor& b, const float* bias, bool round) {
  const int64_t n = a.size(0), k = a.size(1), m = b.size(1);
  Tensor out({n, m}, DType::Float32);
  Tensor ta = a, tb = b;
  const GemmOperand ga = matrix_layout(ta), gb = matrix_layout(tb);
  const auto* pa = static_cast<const uint16_t*>(ta.raw_data());
  const auto* pb = static_cast<const uint16_t*>(tb.raw_data());
  if (bias)
    kernels::cpu::gemm_bf16_bias(n, m, k, pa, ga.ld, ga.trans, pb, gb.ld, gb.trans, bias, out.data<float>(), m, round);
  else
    kernels::cpu::gemm_bf16(n, m, k, pa, ga.ld, ga.trans, pb, gb.ld, gb.trans, out.data<float>(), m, 1.0f, 0.0f, round);
  return out;
}
}  // namespace

Tensor mm(const Tensor& a, const Tensor& b, const Tensor& out_in) {
  check_mm(a, b, "mm");
  Tensor out = product_out(out_in, a, b, "mm");  // (n, m)
  if (widen_bf16(a))  // out is float32 for bfloat16 operands too (product_dtype)
    batched_gemm(a.to(DType::Float32), b.to(DType::Float32), out);
  else
    batched_gemm(a, b, out);
  return out;
}

Tensor mm_round_to(const Tensor& a, const Tensor& b, DType dtype) {
  check_mm(a, b, "mm_round_to");
  if (!is_half(a.dtype()) || !is_half(dtype))
    throw std::invalid_argument("mm_round_to: expected bfloat16 or float16 operands and dtype, got " + a.desc() +
                                " and " + dtype_name(dtype));
  if (a.device().is_cuda() || a.dtype() != DType::BFloat16 || dtype != DType::BFloat16 || widen_bf16(a))
    return round_to(mm(a, b), dtype);
  return bf16_product(a, b, nullptr, /*round=*/true);
}

namespace {
// addmm, its result rounded to `round` (bfloat16 or float16, kept float32) unless that is Float32:
// on the CPU the bfloat16 GEMM rounds as it stores.
Tensor addmm_rounded(const Tensor& bias, const Tensor& a, const Tensor& b, DType round, const char* op) {
  check_operands(a, b, op);
  cuda_dispatch::on_cuda({&bias, &a}, op);
  check_defined(bias, op);
  detail::check_same_dtype(bias, a, op);
  if (round != DType::Float32 && (!is_half(a.dtype()) || !is_half(round)))
    throw std::invalid_argument(std::string(op) + ": expected bfloat16 or float16 operands and dtype, got " + a.desc() +
                                " and " + dtype_name(round));
  check_mm(a, b, op);
  if (bias.dim() != 1 || bias.size(0) != b.size(1))
    throw std::invalid_argument(std::string(op) + ": bias " + shape_str(bias.shape()) +
                                " does not match the product's " + std::to_string(b.size(1)) + " columns (expected (" +
                                std::to_string(b.size(1)) + "))");
  if (a.device().is_cuda()) {  // cuBLAS's product, then the broadcast add (of the widened bias: bfloat16)
    Tensor out = mm(a, b);
    add_(out, bias.to(out.dtype()));
    return round == DType::Float32 ? out : round_to(out, round);
  }
  if (widen_bf16(a)) {
    const Tensor out = addmm(bias.to(DType::Float32), a.to(DType::Float32), b.to(DType::Float32));
    return round == DType::Float32 ? out : round_to(out, round);
  }
  if (a.dtype() == DType::BFloat16) {  // the product's sums start from the widened bias
    const Tensor bias32 = bias.to(DType::Float32).contiguous();
    const Tensor out = bf16_product(a, b, bias32.data<float>(), round == DType::BFloat16);
    return round == DType::Float16 ? round_to(out, round) : out;
  }
  Tensor ta = a, tb = b;
  const GemmOperand ga = matrix_layout(ta), gb = matrix_layout(tb);
  const Tensor bias_c = bias.contiguous();
  const int64_t n = a.size(0), k = a.size(1), m = b.size(1);
  Tensor out({n, m}, a.dtype(), a.device());  // (n, m)
  dispatch_floating(a.dtype(), "addmm", [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::gemm_bias(n, m, k, ta.data<T>(), ga.ld, ga.trans, tb.data<T>(), gb.ld, gb.trans, bias_c.data<T>(),
                            out.data<T>(), m);
  });
  return out;
}
}  // namespace

Tensor addmm(const Tensor& bias, const Tensor& a, const Tensor& b) {
  return addmm_rounded(bias, a, b, DType::Float32, "addmm");
}

Tensor addmm_round_to(const Tensor& bias, const Tensor& a, const Tensor& b, DType dtype) {
  if (dtype == DType::Float32)
    throw std::invalid_argument("addmm_round_to: expected bfloat16 or float16 operands and dtype, got float32");
  return addmm_rounded(bias, a, b, dtype, "addmm_round_to");
}

std::pair<Tensor, Tensor> mm_and_row_sums(const Tensor& a, const Tensor& b, const Tensor& out_in) {
  check_mm(a, b, "mm_and_row_sums");
  Tensor out = product_out(out_in, a, b, "mm_and_row_sums");
  if (a.device().is_cuda()) {  // cuBLAS's product, then the reduction (float32 for bfloat16, as on the CPU)
    mm(a, b, out);
    return {out, sum(a.to(out.dtype()), {1})};
  }
  if (widen_bf16(a)) return mm_and_row_sums(a.to(DType::Float32), b.to(DType::Float32), out);
  if (a.dtype() == DType::BFloat16) {  // op(A)'s rows summed in double in k order
    // op(A) as the transpose of a (k, n) matrix with rows `ld` apart (linear's dy^T): the GEMM sums
    // them while it packs A (kernels::cpu::gemm_bf16_row_sums, which refuses an empty product)
    if (a.stride(0) == 1 && a.stride(1) >= a.size(0)) {
      Tensor tb = b;
      const GemmOperand gb = matrix_layout(tb);
      std::pair<Tensor, Tensor> r{out, Tensor({a.size(0)}, DType::Float32)};
      if (kernels::cpu::gemm_bf16_row_sums(a.size(0), b.size(1), a.size(1), static_cast<const uint16_t*>(a.raw_data()),
                                           a.stride(1), true, static_cast<const uint16_t*>(tb.raw_data()), gb.ld,
                                           gb.trans, r.first.data<float>(), b.size(1), r.second.data<float>()))
        return r;
    }
    // otherwise (an untransposed a, or an empty product) the product, then a contiguous copy's rows
    std::pair<Tensor, Tensor> r{mm(a, b, out), Tensor({a.size(0)}, DType::Float32)};
    const Tensor src = a.contiguous();
    const uint16_t* pa = static_cast<const uint16_t*>(src.raw_data());
    const int64_t n = a.size(0), k = a.size(1);
    float* ps = r.second.data<float>();
    kernels::cpu::parallel_for(n, 256, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        double s = 0.0;
        for (int64_t j = 0; j < k; ++j) s += kernels::cpu::bf16_to_float(pa[i * k + j]);
        ps[i] = static_cast<float>(s);
      }
    });
    return r;
  }
  Tensor ta = a, tb = b;
  const GemmOperand ga = matrix_layout(ta), gb = matrix_layout(tb);
  const int64_t n = a.size(0), k = a.size(1), m = b.size(1);
  Tensor sums({n}, a.dtype(), a.device());  // (n); out: (n, m)
  dispatch_floating(a.dtype(), "mm_and_row_sums", [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::gemm_row_sums(n, m, k, ta.data<T>(), ga.ld, ga.trans, tb.data<T>(), gb.ld, gb.trans, out.data<T>(), m,
                                sums.data<T>());
  });
  return {out, sums};
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_operands(a, b, "matmul");
  if (a.dim() == 0 || b.dim() == 0)
    throw std::invalid_argument("matmul: both arguments need at least 1 dimension, got shapes " + shape_str(a.shape()) +
                                " and " + shape_str(b.shape()));
  const int64_t ka = a.size(-1), kb = b.dim() == 1 ? b.size(0) : b.size(-2);
  if (ka != kb) shape_error(a, b, "matmul", ka, kb);
  // 1-d operands become matrices: a (k) -> (1, k), b (k) -> (k, 1); the dim is dropped after.
  const Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  const Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  if (widen_bf16(a)) return matmul(a.to(DType::Float32), b.to(DType::Float32));
  Tensor out;
  if (a2.dim() == 2 && b2.dim() == 2) {
    out = mm(a2, b2);
  } else if (b2.dim() == 2 && a2.is_contiguous()) {
    // (batch..., n, k) · (k, m): fold the batch into the rows, one big gemm
    Shape os(a2.shape().begin(), a2.shape().end() - 1);
    os.push_back(b2.size(1));
    out = mm(a2.reshape({-1, ka}), b2).view(os);
  } else {
    const Shape ba(a2.shape().begin(), a2.shape().end() - 2), bb(b2.shape().begin(), b2.shape().end() - 2);
    Shape batch = broadcast_shapes(ba, bb, "matmul");
    Shape sa = batch, sb = batch, so = batch;
    sa.insert(sa.end(), a2.shape().end() - 2, a2.shape().end());
    sb.insert(sb.end(), b2.shape().end() - 2, b2.shape().end());
    so.push_back(a2.size(-2));
    so.push_back(b2.size(-1));
    out = Tensor(so, product_dtype(a.dtype()), a.device());  // (batch..., n, m)
    batched_gemm(a2.expand(sa), b2.expand(sb), out);
  }
  if (a.dim() == 1) out = out.squeeze(-2);
  if (b.dim() == 1) out = out.squeeze(-1);
  return out;
}

}  // namespace minidl
