// kernels/cuda_ops.h — the CUDA kernels of every tensor op, as plain C++ declarations on raw
// device pointers, sizes and strides (no Tensor: kernels/ sits below tensor/). Each op family's
// file in tensor/ calls them after its checks (tensor/cuda_dispatch.h); a build without nvcc
// links kernels/cuda_stub.cpp, where each throws "<op>: minidl was built without CUDA". Every
// kernel runs on the current device's compute stream (kernels::cuda::set_device first) and is
// asynchronous unless it says otherwise.
//
// Element-wise ops take the SAME functor objects as the CPU loops (kernels/functors.h,
// kernels/optim_functors.h): one overload per functor type is declared from the X-macro lists
// below and defined once in kernels/cuda/elementwise.cu. The per-op CUDA files, one per family:
//   elementwise.cu (unary/binary/ternary, copy/cast, fill, dropout)   reduce.cu (sum/mean/var/max)
//   softmax.cu (softmax, log_softmax, cross entropy, gather_rows)    norm.cu (layer norm, batch norm)
//   index.cu (index_select, index_add = embedding backward)          pool.cu (max/avg/adaptive avg)
//   optim.cu (fused SGD / Adam / AdamW)                              blas.cu (cuBLAS GEMM)
//   conv.cu (cuDNN conv2d forward / backward data / backward filter)
// Tested by tests/kernels/test_cuda_ops.cpp and test_cuda_nn.cpp: each op on the GPU against the
// CPU implementation on the same inputs (skipped without a device).
#pragma once
#include <cstddef>
#include <cstdint>

#include "minidl/kernels/functors.h"
#include "minidl/kernels/optim_functors.h"

namespace minidl::kernels::cuda {

// Element types, in the order of minidl::DType (cuda_dispatch::elem converts with static_cast).
// BF16 / F16 are bit patterns: copy and fill convert them (through float32); other kernels reject them.
enum class ElemType : uint8_t { F32, F64, I64, U8, BF16, F16 };

// An element-wise loop over up to 4 strided operands sharing one shape (operand 0 is the output).
// Strides are in elements; a broadcast operand has stride 0. `contiguous` means every operand is
// row-major contiguous, so element i sits at offset i of each (the fast path).
inline constexpr int kMaxDims = 8;
struct StridedIter {
  int ndim = 0;
  int64_t numel = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[4][kMaxDims] = {};
  bool contiguous = false;
};

// Offset (in elements) of loop element i in operand k: i itself on the contiguous path, else i
// unravelled over the (merged) shape, last dim fastest. Host and device share this code, so the
// CPU tests check the exact addressing the kernels use (tests/kernels/test_cuda_host.cpp).
MINIDL_HD int64_t strided_offset(const StridedIter& it, int k, int64_t i) {
  if (it.contiguous) return i;
  int64_t off = 0;
  for (int d = it.ndim - 1; d >= 0; --d) {
    off += (i % it.shape[d]) * it.strides[k][d];
    i /= it.shape[d];
  }
  return off;
}

// ---- element-wise (elementwise.cu); `out` may alias `a` (in-place ops) ----
#define MINIDL_CUDA_UNARY_OPS(X)                                                                                 \
  X(NegOp)                                                                                                       \
  X(ExpOp) X(LogOp) X(SqrtOp) X(RsqrtOp) X(AbsOp) X(TanhOp) X(SigmoidOp) X(ReluOp) X(PowScalarOp) X(AddScalarOp) \
      X(MulScalarOp) X(DivScalarOp) X(GeluErfOp) X(GeluTanhOp) X(SiluOp) X(LeakyReluOp) X(EluOp) X(SoftplusOp)   \
          X(HardswishOp) X(SmoothL1Op) X(IsFiniteOp)
#define MINIDL_CUDA_BINARY_OPS(X)                                                                                     \
  X(AddOp)                                                                                                            \
  X(SubOp) X(MulOp) X(DivOp) X(MaximumOp) X(MinimumOp) X(EqOp) X(GtOp) X(LtOp) X(ReluBackward) X(GeluErfBackward)     \
      X(GeluTanhBackward) X(TanhBackwardFromY) X(SigmoidBackwardFromY) X(AddScaledOp) X(AxpbyOp) X(LerpOp)            \
          X(SiluBackward) X(LeakyReluBackward) X(EluBackward) X(SoftplusBackward) X(HardswishBackward) X(AbsBackward) \
              X(SmoothL1Backward)
#define MINIDL_CUDA_TERNARY_OPS(X) X(AddcmulOp) X(AddcdivOp) X(WhereOp)

#define MINIDL_DECLARE_UNARY(Op) \
  void elementwise(ElemType t, const StridedIter& it, void* out, const void* x, const Op& op);
#define MINIDL_DECLARE_BINARY(Op) \
  void elementwise(ElemType t, const StridedIter& it, void* out, const void* a, const void* b, const Op& op);
#define MINIDL_DECLARE_TERNARY(Op)                                                                            \
  void elementwise(ElemType t, const StridedIter& it, void* out, const void* a, const void* b, const void* c, \
                   const Op& op);
MINIDL_CUDA_UNARY_OPS(MINIDL_DECLARE_UNARY)
MINIDL_CUDA_BINARY_OPS(MINIDL_DECLARE_BINARY)
MINIDL_CUDA_TERNARY_OPS(MINIDL_DECLARE_TERNARY)
#undef MINIDL_DECLARE_UNARY
#undef MINIDL_DECLARE_BINARY
#undef MINIDL_DECLARE_TERNARY

// dst (operand 0) = convert(src (operand 1)); any pair of element types.
void copy(ElemType dst_type, ElemType src_type, const StridedIter& it, void* dst, const void* src);
void fill(ElemType t, const StridedIter& it, void* dst, double value);  // operand 0 only
// out (n) = philox_uniform<T>(seed, stream, i) >= p ? 1/(1-p) : 0, compared in double as on the CPU.
void dropout_mask(ElemType t, void* out, int64_t n, double p, uint64_t seed, uint64_t stream);

// ---- reductions over the rows of a contiguous (rows, len) matrix (reduce.cu); len > 0 ----
// Deterministic: fixed per-thread strided partial sums, then a fixed-shape CUB block reduction.
// Floating sums accumulate in double, integer sums in int64 (as on the CPU).
void sum_rows(ElemType t, const void* x, void* out, int64_t rows, int64_t len, double divisor);
void var_rows(ElemType t, const void* x, void* out, int64_t rows, int64_t len, int64_t correction);
// First maximum of each row (NaN wins, as on the CPU): values (rows), indices (rows).
void max_rows(ElemType t, const void* x, void* values, int64_t* indices, int64_t rows, int64_t len);

// ---- softmax family (softmax.cu); x seen as contiguous (outer, len, inner) ----
void softmax_forward(ElemType t, const void* x, void* y, int64_t outer, int64_t len, int64_t inner, bool log);
void softmax_backward(ElemType t, const void* y, const void* dy, void* dx, int64_t outer, int64_t len, int64_t inner,
                      bool log);
// logits (N, C) contiguous, target (N) int64 on the device, checked there: a value outside
// [0, C) makes that row NaN and is raised as std::invalid_argument at the next synchronisation.
// loss: one element of type t (the mean over rows; rows summed in a fixed order). grad_loss: one
// element of type t on the device (read there, so the backward needs no host round trip).
void cross_entropy_forward(ElemType t, const void* logits, const int64_t* target, int64_t N, int64_t C, double eps,
                           void* loss);
void cross_entropy_backward(ElemType t, const void* logits, const int64_t* target, int64_t N, int64_t C, double eps,
                            const void* grad_loss, void* dlogits);
// out[i] = x[i * s0 + target[i * ts] * s1] for i < n (targets checked by the caller).
void gather_rows(ElemType t, const void* x, int64_t s0, int64_t s1, const int64_t* target, int64_t ts, int64_t n,
                 void* out);

// ---- normalisation (norm.cu); same math and precision (double) as kernels/cpu/norm.h and layer_norm.h ----
// Per-channel / affine pointers have type t; weight and bias may be nullptr.
void layer_norm_forward(ElemType t, const void* x, int64_t rows, int64_t M, const void* weight, const void* bias,
                        double eps, void* y, void* mean, void* invstd);
// dweight / dbias (M) may be nullptr (no affine weight).
void layer_norm_backward(ElemType t, const void* dy, const void* x, int64_t rows, int64_t M, const void* mean,
                         const void* invstd, const void* weight, void* dx, void* dweight, void* dbias);
void batch_norm_stats(ElemType t, const void* x, int64_t N, int64_t C, int64_t S, double eps, void* mean, void* invstd);
void batch_norm_elemt(ElemType t, const void* x, int64_t N, int64_t C, int64_t S, const void* mean, const void* invstd,
                      const void* weight, const void* bias, void* y);
// grad_weight / grad_bias may be nullptr (no affine weight).
void batch_norm_backward_reduce(ElemType t, const void* dy, const void* x, int64_t N, int64_t C, int64_t S,
                                const void* mean, const void* invstd, void* sum_dy, void* sum_dy_xmu, void* grad_weight,
                                void* grad_bias);
void batch_norm_backward_elemt(ElemType t, const void* dy, const void* x, int64_t N, int64_t C, int64_t S,
                               const void* mean, const void* invstd, const void* weight, const void* sum_dy,
                               const void* sum_dy_xmu, int64_t count, void* dx);
// The same with the count read on the device: count points to one double (SyncBatchNorm's total).
void batch_norm_backward_elemt(ElemType t, const void* dy, const void* x, int64_t N, int64_t C, int64_t S,
                               const void* mean, const void* invstd, const void* weight, const void* sum_dy,
                               const void* sum_dy_xmu, const double* count, void* dx);
// SyncBatchNorm's merge of every rank's (mean, invstd, count) rows (R, 2C + 1), all in double:
// kernels/cpu/norm.h's batch_norm_gather_stats; total: one double.
void batch_norm_gather_stats(const double* rows, int64_t R, int64_t C, double eps, double* mean, double* invstd,
                             double* unbiased_var, double* total);

// ---- indexing (index.cu); x (outer, n, inner), index (k) ----
void index_select(ElemType t, const void* x, const int64_t* index, void* out, int64_t outer, int64_t n, int64_t k,
                  int64_t inner);
// out (outer, n, inner) = 0, then out[o, index[j], :] += src[o, j, :] for j = 0..k-1 IN ORDER (the
// CPU's order, so the sums are bit-identical; no atomics). index_host: the k indices on the host.
void index_add(ElemType t, const void* src, const int64_t* index_host, void* out, int64_t outer, int64_t n, int64_t k,
               int64_t inner);

// ---- pooling (pool.cu); planes of (H, W) ----
struct PoolWindow {
  int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
};
void max_pool2d_forward(ElemType t, const void* x, int64_t planes, int64_t H, int64_t W, void* y, int64_t* indices,
                        int64_t H_out, int64_t W_out, const PoolWindow& win);
// dx (planes, H, W) is written whole: each element gets the gradients of the outputs (dy and
// indices (planes, H_out, W_out), from max_pool2d_forward with the same window) whose window covers
// it and whose argmax it is, added in output order.
void max_pool2d_backward(ElemType t, const void* dy, const int64_t* indices, int64_t planes, int64_t H_out,
                         int64_t W_out, int64_t H, int64_t W, const PoolWindow& win, void* dx);
void avg_pool2d_forward(ElemType t, const void* x, int64_t planes, int64_t H, int64_t W, void* y, int64_t H_out,
                        int64_t W_out, const PoolWindow& win, bool count_include_pad);
void avg_pool2d_backward(ElemType t, const void* dy, int64_t planes, int64_t H_out, int64_t W_out, void* dx, int64_t H,
                         int64_t W, const PoolWindow& win, bool count_include_pad);
void adaptive_avg_pool2d_forward(ElemType t, const void* x, int64_t planes, int64_t H, int64_t W, void* y,
                                 int64_t out_h, int64_t out_w);
void adaptive_avg_pool2d_backward(ElemType t, const void* dy, int64_t planes, int64_t out_h, int64_t out_w, void* dx,
                                  int64_t H, int64_t W);

// ---- fused optimizer updates (optim.cu), one thread per element, kernels/optim_functors.h math ----
void sgd_step(ElemType t, void* param, const void* grad, void* momentum_buffer, int64_t n, const SgdStep& op);
void adam_step(ElemType t, void* param, const void* grad, void* exp_avg, void* exp_avg_sq, void* max_exp_avg_sq,
               int64_t n, const AdamStep& op);

// ---- GEMM through cuBLAS (blas.cu); the same contract as kernels::cpu::gemm (row-major):
// C (M, N) = op(A) (M, K) · op(B) (K, N), repeated `batch` times with element strides
// stride_a / stride_b / stride_c between the matrices (stride 0 broadcasts one operand).
// t = BF16 or F16: A and B hold 16-bit floats, C is float32 (float32 accumulation, as cpu::gemm_bf16).
void gemm(ElemType t, int64_t M, int64_t N, int64_t K, const void* A, int64_t lda, bool trans_a, const void* B,
          int64_t ldb, bool trans_b, void* C, int64_t ldc, int64_t batch = 1, int64_t stride_a = 0,
          int64_t stride_b = 0, int64_t stride_c = 0);
// TF32 tensor cores for float32 GEMM and convolutions: off by default (exact float32 math).
void set_allow_tf32(bool allow);
bool allow_tf32();

// ---- conv2d through cuDNN (conv.cu); NCHW, algorithms chosen once per shape and cached
// (deterministic algorithms only, so results reproduce run to run) ----
struct ConvGeometry {
  int64_t N, C, H, W, O, kH, kW, groups, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, H_out, W_out;
};
void conv2d_forward(ElemType t, const ConvGeometry& g, const void* x, const void* w, const void* b, void* y);
// dx may be nullptr (the input needs no gradient: no backward-data call); db may be nullptr (no bias).
void conv2d_backward(ElemType t, const ConvGeometry& g, const void* x, const void* w, const void* dy, void* dx,
                     void* dw, void* db);

}  // namespace minidl::kernels::cuda
