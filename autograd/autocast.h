// autograd/autocast.h — mixed precision in the forward pass, as torch.autocast:
//
//   {
//     minidl::autocast guard(DType::BFloat16);  // this thread, until the end of the scope
//     loss = cross_entropy(model.forward(x), y);
//   }
//   loss.backward();  // float32 gradients into the float32 parameters
//
// Inside the guard the matrix products — linear, matmul (and so attention's q k^T and weights v),
// conv2d, packed_self_attention — take their float32 operands rounded to the low dtype (bfloat16
// or float16, round to nearest even): linear, matmul and conv2d cast them inside their own node
// (AutocastCast below), packed_self_attention through a differentiable `round_to`: float32
// accumulation, float32 output. Under bfloat16, linear and matmul multiply the bfloat16 bit
// patterns themselves (kernels::cpu::gemm_bf16 on the CPU, cuBLAS's bfloat16 GEMM with float32
// compute on CUDA, through tensor mm / addmm / matmul), and so do they under float16 on CUDA
// (cuBLAS's float16 GEMM); their backward rounds dy to the low dtype once and multiplies it the
// same way, as PyTorch's backward of its autocast products runs in the low dtype; each gradient is
// rounded to its operand's dtype (and widened again for a float32 operand). conv2d multiplies bfloat16
// operands too where that pays (kernels/cpu/conv2d_bf16.h: AMX, one group, not a few-channel 3x3
// layer), and otherwise, like float16 on the CPU, the rounded operands widened back to float32 with
// the float32 kernels; packed_self_attention under bfloat16 runs its bfloat16-product kernel where
// the CPU has AVX512_BF16 (kernels/cpu/attention_bf16.cpp: the weights P and the score gradients
// rounded for its products too), else the float32 kernel on the rounded qkv. Everything else (softmax,
// norms, losses, reductions, element-wise ops) stays float32, and so do the parameters and the
// optimizer's state (master weights): the cast happens in the forward, and its backward casts the
// gradient back to float32. The state is thread-local; guards nest, each restoring the state it
// found; autocast(DType::Float32) (or enabled = false) turns autocast off inside its scope.
#pragma once
#include "minidl/autograd/variable.h"
#include "minidl/tensor/dtype.h"

namespace minidl {

class autocast {
 public:
  // dtype: BFloat16 or Float16 (autocast on), or Float32 (off); anything else throws.
  explicit autocast(DType dtype, bool enabled = true);
  ~autocast();
  autocast(const autocast&) = delete;
  autocast& operator=(const autocast&) = delete;

 private:
  bool prev_enabled_;
  DType prev_dtype_;
};

bool is_autocast_enabled();  // on this thread
DType autocast_dtype();  // the low dtype of the innermost enabled guard; Float32 when off

// A matrix product's operand under autocast: a float32 x rounded to autocast_dtype() and kept
// float32 (round_to: the pair of casts to it and back, as one differentiable op); x itself when
// autocast is off, x is undefined or not float32.
Variable autocast_operand(const Variable& x);

// A product's operand under autocast, cast inside the product's own node (so that no cast node of
// its own holds a 16-bit copy of the gradient between them): `input` is the Variable the node
// takes (x itself where the product casts it; otherwise autocast_operand(x), or x unchanged),
// `data` the tensor the product reads (x's data cast to the low dtype where `cast`, else input's
// data). gradient() turns the product's float32 gradient for `data` into input's: where cast,
// rounded to the low dtype and kept float32 (the bits a cast node's backward would give — the
// gradient rounded, then widened — in one pass); otherwise converted to data's dtype.
struct AutocastCast {
  Variable input;
  Tensor data;
  bool cast = false;

  static Tensor gradient(const Tensor& g, DType data_dtype, bool cast);
};

// Whether a product with a 16-bit kernel (linear, matmul) multiplies a float32 x in the low dtype
// under the current autocast: bfloat16 on either device, float16 on CUDA only (cuBLAS); false
// when autocast is off.
bool autocast_gemm_takes_low(const Variable& x);

// The operand of a product with a 16-bit kernel (linear, matmul): under autocast(BFloat16) a
// float32 x (CPU or CUDA) cast to bfloat16, under autocast(Float16) a float32 CUDA x cast to
// float16 (the product's result is float32); otherwise autocast_operand(x) (float16 on the CPU,
// which has no float16 GEMM).
AutocastCast autocast_gemm_cast(const Variable& x);

// A float32 x cast to autocast_dtype(), for an op that keeps its operands in the low dtype and
// multiplies or widens them itself (conv2d); x itself when autocast is off, x is undefined or not
// float32.
AutocastCast autocast_low_cast(const Variable& x);

}  // namespace minidl
