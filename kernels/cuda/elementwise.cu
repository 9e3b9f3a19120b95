// kernels/cuda/elementwise.cu — element-wise kernels over strided operands (broadcast = stride 0):
// unary / binary / ternary ops through the SAME __host__ __device__ functors as the CPU loops
// (kernels/functors.h), dtype conversion copies (contiguous(), clone(), to(dtype), copy_), fill,
// and the dropout mask from the same Philox stream as the CPU (kernels/philox.h, compared in double).
// Copies to and from bfloat16 / float16 convert through float32 with CUDA's round-to-nearest-even
// intrinsics (the rounding of kernels/cpu/half.h).
// One thread per element (grid-stride); the offsets of a strided operand come from the linear
// index by div/mod over the shape; when every operand is contiguous the index is the offset.
// Tested by tests/kernels/test_cuda_ops.cpp: each op against the CPU on the same inputs
// (contiguous, transposed and broadcast operands; dropout masks compared element by element).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "minidl/kernels/cpu/half.h"
#include "minidl/kernels/cuda/common.cuh"
#include "minidl/kernels/philox.h"

namespace minidl::kernels::cuda {

namespace {

// Offsets (in elements) of element i for each of N operands.
template <int N> struct Offsets { int64_t off[N]; };

template <int N> __device__ __forceinline__ Offsets<N> offsets_of(const StridedIter& it, int64_t i) {
  Offsets<N> o;
  for (int k = 0; k < N; ++k) o.off[k] = strided_offset(it, k, i);
  return o;
}

template <class T, class Op> __global__ void unary_kernel(StridedIter it, T* out, const T* x, Op op) {
  MINIDL_GRID_STRIDE(i, it.numel) {
    const Offsets<2> o = offsets_of<2>(it, i);
    out[o.off[0]] = op(x[o.off[1]]);
  }
}
template <class T, class Op> __global__ void binary_kernel(StridedIter it, T* out, const T* a, const T* b, Op op) {
  MINIDL_GRID_STRIDE(i, it.numel) {
    const Offsets<3> o = offsets_of<3>(it, i);
    out[o.off[0]] = op(a[o.off[1]], b[o.off[2]]);
  }
}
template <class T, class Op>
__global__ void ternary_kernel(StridedIter it, T* out, const T* a, const T* b, const T* c, Op op) {
  MINIDL_GRID_STRIDE(i, it.numel) {
    const Offsets<4> o = offsets_of<4>(it, i);
    out[o.off[0]] = op(a[o.off[1]], b[o.off[2]], c[o.off[3]]);
  }
}
// The 16-bit float elements of a copy, as bit patterns.
struct Bf16Bits {
  uint16_t bits;
};
struct F16Bits {
  uint16_t bits;
};
__device__ __forceinline__ float to_float(Bf16Bits v) {
  __nv_bfloat16_raw r;
  r.x = v.bits;
  return __bfloat162float(__nv_bfloat16(r));
}
__device__ __forceinline__ float to_float(F16Bits v) {
  __half_raw r;
  r.x = v.bits;
  return __half2float(__half(r));
}
// NaN keeps its sign and payload, quieted, as kernels/cpu/half.h does (the intrinsics would
// return one canonical NaN), so both devices give the same bits.
template <class D> __device__ __forceinline__ D from_float(float f) {
  const uint32_t u = __float_as_uint(f);
  if constexpr (std::is_same_v<D, Bf16Bits>) {
    if ((u & 0x7fffffffu) > 0x7f800000u) return D{static_cast<uint16_t>((u >> 16) | 0x0040u)};
    return D{static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(f)).x};
  } else {
    if ((u & 0x7fffffffu) > 0x7f800000u)
      return D{static_cast<uint16_t>(((u >> 16) & 0x8000u) | 0x7e00u | ((u >> 13) & 0x3ffu))};
    return D{static_cast<__half_raw>(__float2half_rn(f)).x};
  }
}
template <class T> inline constexpr bool is_half_bits = std::is_same_v<T, Bf16Bits> || std::is_same_v<T, F16Bits>;

// dst = D(src); a 16-bit float on either side goes through float32.
template <class D, class S> __device__ __forceinline__ D convert(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (is_half_bits<S>) {
    return convert<D>(to_float(v));
  } else if constexpr (is_half_bits<D>) {
    return from_float<D>(static_cast<float>(v));
  } else {
    return static_cast<D>(v);
  }
}

template <class D, class S> __global__ void copy_kernel(StridedIter it, D* dst, const S* src) {
  MINIDL_GRID_STRIDE(i, it.numel) {
    const Offsets<2> o = offsets_of<2>(it, i);
    dst[o.off[0]] = convert<D>(src[o.off[1]]);
  }
}

// Like switch_type<false>, with the 16-bit floats too (as Bf16Bits / F16Bits): copy and fill.
template <class F> void switch_copy_type(ElemType t, F&& f) {
  if (t == ElemType::BF16) return f(Bf16Bits{});
  if (t == ElemType::F16) return f(F16Bits{});
  switch_type<false>(t, "copy", f);
}
template <class T> __global__ void fill_kernel(StridedIter it, T* dst, T v) {
  MINIDL_GRID_STRIDE(i, it.numel) { dst[offsets_of<1>(it, i).off[0]] = v; }
}
template <class T> __global__ void dropout_kernel(T* out, int64_t n, double p, uint64_t seed, uint64_t stream, T keep) {
  MINIDL_GRID_STRIDE(i, n) {
    const double u = static_cast<double>(philox_uniform<T>(seed, stream, static_cast<uint64_t>(i)));
    out[i] = u >= p ? keep : T(0);
  }
}

// Functors whose math is defined for the integer dtypes too (as the CPU's Kinds::Any ops).
template <class Op> inline constexpr bool kIntegerOk = false;
template <> inline constexpr bool kIntegerOk<AddOp> = true;
template <> inline constexpr bool kIntegerOk<SubOp> = true;
template <> inline constexpr bool kIntegerOk<MulOp> = true;
template <> inline constexpr bool kIntegerOk<MaximumOp> = true;
template <> inline constexpr bool kIntegerOk<MinimumOp> = true;
template <> inline constexpr bool kIntegerOk<EqOp> = true;
template <> inline constexpr bool kIntegerOk<GtOp> = true;
template <> inline constexpr bool kIntegerOk<LtOp> = true;
template <> inline constexpr bool kIntegerOk<NegOp> = true;
template <> inline constexpr bool kIntegerOk<AbsOp> = true;
template <> inline constexpr bool kIntegerOk<AddScalarOp> = true;
template <> inline constexpr bool kIntegerOk<MulScalarOp> = true;
template <> inline constexpr bool kIntegerOk<AddScaledOp> = true;
template <> inline constexpr bool kIntegerOk<IsFiniteOp> = true;
template <> inline constexpr bool kIntegerOk<WhereOp> = true;

// Runs f(T{}) for t, instantiating integer types only for functors that allow them.
template <class Op, class F> void switch_for_op(ElemType t, const char* name, F&& f) {
  if constexpr (kIntegerOk<Op>) {
    switch_type<false>(t, name, f);
  } else {
    switch_type<true>(t, name, f);
  }
}

}  // namespace

#define MINIDL_DEFINE_UNARY(Op)                                                                 \
  void elementwise(ElemType t, const StridedIter& it, void* out, const void* x, const Op& op) { \
    if (it.numel == 0) return;                                                                  \
    switch_for_op<Op>(t, #Op, [&](auto tag) {                                                   \
      using T = decltype(tag);                                                                  \
      unary_kernel<T, Op><<<blocks_for(it.numel), kThreads, 0, current_compute_stream()>>>(     \
          it, static_cast<T*>(out), static_cast<const T*>(x), op);                              \
    });                                                                                         \
    check_launch(#Op);                                                                          \
  }
#define MINIDL_DEFINE_BINARY(Op)                                                                               \
  void elementwise(ElemType t, const StridedIter& it, void* out, const void* a, const void* b, const Op& op) { \
    if (it.numel == 0) return;                                                                                 \
    switch_for_op<Op>(t, #Op, [&](auto tag) {                                                                  \
      using T = decltype(tag);                                                                                 \
      binary_kernel<T, Op><<<blocks_for(it.numel), kThreads, 0, current_compute_stream()>>>(                   \
          it, static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), op);                   \
    });                                                                                                        \
    check_launch(#Op);                                                                                         \
  }
#define MINIDL_DEFINE_TERNARY(Op)                                                                                      \
  void elementwise(ElemType t, const StridedIter& it, void* out, const void* a, const void* b, const void* c,          \
                   const Op& op) {                                                                                     \
    if (it.numel == 0) return;                                                                                         \
    switch_for_op<Op>(t, #Op, [&](auto tag) {                                                                          \
      using T = decltype(tag);                                                                                         \
      ternary_kernel<T, Op><<<blocks_for(it.numel), kThreads, 0, current_compute_stream()>>>(                          \
          it, static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), static_cast<const T*>(c), op); \
    });                                                                                                                \
    check_launch(#Op);                                                                                                 \
  }
MINIDL_CUDA_UNARY_OPS(MINIDL_DEFINE_UNARY)
MINIDL_CUDA_BINARY_OPS(MINIDL_DEFINE_BINARY)
MINIDL_CUDA_TERNARY_OPS(MINIDL_DEFINE_TERNARY)

void copy(ElemType dst_type, ElemType src_type, const StridedIter& it, void* dst, const void* src) {
  if (it.numel == 0) return;
  switch_copy_type(dst_type, [&](auto dtag) {
    using D = decltype(dtag);
    switch_copy_type(src_type, [&](auto stag) {
      using S = decltype(stag);
      copy_kernel<D, S><<<blocks_for(it.numel), kThreads, 0, current_compute_stream()>>>(it, static_cast<D*>(dst),
                                                                                         static_cast<const S*>(src));
    });
  });
  check_launch("copy");
}

void fill(ElemType t, const StridedIter& it, void* dst, double value) {
  if (it.numel == 0) return;
  if (t == ElemType::BF16 || t == ElemType::F16) {  // the bit pattern, rounded here as on the CPU
    const float f = static_cast<float>(value);
    const uint16_t bits = t == ElemType::BF16 ? cpu::float_to_bf16(f) : cpu::float_to_fp16(f);
    fill_kernel<uint16_t>
        <<<blocks_for(it.numel), kThreads, 0, current_compute_stream()>>>(it, static_cast<uint16_t*>(dst), bits);
    check_launch("fill_");
    return;
  }
  switch_type<false>(t, "fill_", [&](auto tag) {
    using T = decltype(tag);
    fill_kernel<T><<<blocks_for(it.numel), kThreads, 0, current_compute_stream()>>>(it, static_cast<T*>(dst),
                                                                                    static_cast<T>(value));
  });
  check_launch("fill_");
}

void dropout_mask(ElemType t, void* out, int64_t n, double p, uint64_t seed, uint64_t stream) {
  if (n == 0) return;
  switch_type<true>(t, "dropout_mask", [&](auto tag) {
    using T = decltype(tag);
    const T keep = static_cast<T>(1.0 / (1.0 - p));
    dropout_kernel<T>
        <<<blocks_for(n), kThreads, 0, current_compute_stream()>>>(static_cast<T*>(out), n, p, seed, stream, keep);
  });
  check_launch("dropout_mask");
}

}  // namespace minidl::kernels::cuda
