// kernels/cuda/blas.cu — GEMM through cuBLAS (one handle per device, bound to its compute stream).
// Row-major C (M, N) = op(A) · op(B) is computed as the column-major product C^T = op(B)^T op(A)^T,
// so no operand is copied or transposed. Batched products use cublas*gemmStridedBatched (stride 0
// broadcasts one operand; K = 0 gives zeros without calling cuBLAS). float32 runs in exact FP32 unless set_allow_tf32(true), which switches
// cuBLAS to TF32 tensor-core math (and cuDNN convolutions, see conv.cu). float64: cublasDgemm*.
// bfloat16 and float16 (autocast's products): cublasGemmStridedBatchedEx with 16-bit operands,
// float32 compute and a float32 C — the contract of the CPU's gemm_bf16 (the exact products summed
// in float32), on the tensor cores.
// Tested by tests/kernels/test_cuda_ops.cpp (mm / matmul / batched matmul against the CPU GEMM)
// and measured by examples/bench_gpu.cpp (TF/s next to cuBLAS called directly).
#include <cublas_v2.h>

#include <array>
#include <atomic>
#include <mutex>

#include "minidl/kernels/cuda/common.cuh"
#include "minidl/kernels/cuda_api.h"

namespace minidl::kernels::cuda {

namespace {

std::atomic<bool> g_allow_tf32{false};

void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": cuBLAS error " + std::to_string(static_cast<int>(s)) + " (" +
                             cublasGetStatusString(s) + ")");
}

cublasHandle_t handle_for_current_device() {
  static std::array<cublasHandle_t, 64> handles{};
  static std::mutex mu;
  const int d = current_device();
  std::lock_guard<std::mutex> lock(mu);
  if (!handles[d]) {
    check_cublas(cublasCreate(&handles[d]), "cublasCreate");
    check_cublas(cublasSetStream(handles[d], current_compute_stream()), "cublasSetStream");
  }
  check_cublas(cublasSetMathMode(handles[d], g_allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH),
               "cublasSetMathMode");
  return handles[d];
}

}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32 = allow; }
bool allow_tf32() { return g_allow_tf32; }

void gemm(ElemType t, int64_t M, int64_t N, int64_t K, const void* A, int64_t lda, bool trans_a, const void* B,
          int64_t ldb, bool trans_b, void* C, int64_t ldc, int64_t batch, int64_t stride_a, int64_t stride_b,
          int64_t stride_c) {
  if (t != ElemType::F32 && t != ElemType::F64 && t != ElemType::BF16 && t != ElemType::F16)
    throw std::invalid_argument("matmul: expected float32, float64, bfloat16 or float16 operands on CUDA");
  if (M == 0 || N == 0 || batch == 0) return;
  if (K == 0) {  // an empty sum: C = 0 (cuBLAS rejects the ld = 0 such operands may carry)
    const size_t es = t == ElemType::F64 ? sizeof(double) : sizeof(float), pitch = size_t(ldc) * es;
    cudaStream_t s = current_compute_stream();
    if (stride_c == M * ldc) {  // batches back to back: one 2-d memset over all their rows
      check_cuda(cudaMemset2DAsync(C, pitch, 0, size_t(N) * es, size_t(M * batch), s), "matmul (K = 0: zero fill)");
    } else {
      for (int64_t i = 0; i < batch; ++i)
        check_cuda(cudaMemset2DAsync(static_cast<char*>(C) + i * stride_c * es, pitch, 0, size_t(N) * es, size_t(M), s),
                   "matmul (K = 0: zero fill)");
    }
    return;
  }
  const int64_t limit = 2147483647LL;
  if (M > limit || N > limit || K > limit || lda > limit || ldb > limit || ldc > limit || batch > limit)
    throw std::invalid_argument("matmul: a dimension exceeds the 32-bit sizes of cuBLAS");
  cublasHandle_t h = handle_for_current_device();
  // column-major view: C^T (N x M, ldc) = op(B)^T (N x K) * op(A)^T (K x M)
  const cublasOperation_t ob = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t oa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = int(N), n = int(M), k = int(K);
  if (t == ElemType::BF16 || t == ElemType::F16) {  // 16-bit operands, float32 C
    const float one = 1.0f, zero = 0.0f;
    const cudaDataType_t in = t == ElemType::BF16 ? CUDA_R_16BF : CUDA_R_16F;
    check_cublas(cublasGemmStridedBatchedEx(h, ob, oa, m, n, k, &one, B, in, int(ldb), stride_b, A, in, int(lda),
                                            stride_a, &zero, C, CUDA_R_32F, int(ldc), stride_c, int(batch),
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 t == ElemType::BF16 ? "matmul (cublasGemmStridedBatchedEx, bfloat16)"
                                     : "matmul (cublasGemmStridedBatchedEx, float16)");
  } else if (t == ElemType::F32) {
    const float one = 1.0f, zero = 0.0f;
    check_cublas(cublasSgemmStridedBatched(h, ob, oa, m, n, k, &one, static_cast<const float*>(B), int(ldb), stride_b,
                                           static_cast<const float*>(A), int(lda), stride_a, &zero,
                                           static_cast<float*>(C), int(ldc), stride_c, int(batch)),
                 "matmul (cublasSgemmStridedBatched)");
  } else {
    const double one = 1.0, zero = 0.0;
    check_cublas(cublasDgemmStridedBatched(h, ob, oa, m, n, k, &one, static_cast<const double*>(B), int(ldb), stride_b,
                                           static_cast<const double*>(A), int(lda), stride_a, &zero,
                                           static_cast<double*>(C), int(ldc), stride_c, int(batch)),
                 "matmul (cublasDgemmStridedBatched)");
  }
  check_launch("matmul (cuBLAS)");
}

}  // namespace minidl::kernels::cuda
