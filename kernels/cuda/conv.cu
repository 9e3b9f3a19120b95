// kernels/cuda/conv.cu — conv2d forward, backward-data and backward-filter through cuDNN (NCHW,
// stride / padding / dilation / groups), bias forward and backward with cudnnAddTensor /
// cudnnConvolutionBackwardBias. For each shape the algorithms are chosen ONCE (cuDNN's v7
// heuristics, first DETERMINISTIC algorithm — by cuDNN's documented list, not the heuristics'
// determinism field — whose workspace fits, kernels/cuda/algo_pick.h; a slower deterministic one
// with a warning when none is offered) and cached, so results reproduce run to run; each
// direction's workspace is what cuDNN reports for the algorithm chosen, and its math type the one
// that algorithm was ranked with. float32 uses FMA math (no TF32) unless set_allow_tf32(true).
// Workspaces come from the caching allocator. Tested by tests/kernels/test_cuda_nn.cpp (forward and backward against the
// CPU's im2col + GEMM, with stride, padding, dilation and groups).
#include <cudnn.h>

#include <array>
#include <cstdio>
#include <map>
#include <mutex>
#include <tuple>

#include "minidl/kernels/cuda/algo_pick.h"
#include "minidl/kernels/cuda/common.cuh"
#include "minidl/kernels/cuda_api.h"

namespace minidl::kernels::cuda {

namespace {

void check_cudnn(cudnnStatus_t s, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": " + cudnnGetErrorString(s));
}

cudnnHandle_t cudnn_handle() {
  static std::array<cudnnHandle_t, 64> handles{};
  static std::mutex mu;
  const int d = current_device();
  std::lock_guard<std::mutex> lock(mu);
  if (!handles[d]) check_cudnn(cudnnCreate(&handles[d]), "cudnnCreate");
  check_cudnn(cudnnSetStream(handles[d], current_compute_stream()), "cudnnSetStream");
  return handles[d];
}

// Descriptors of one convolution shape, with its chosen algorithms. Each direction has its own
// convolution descriptor, whose math type is the one its chosen algorithm was ranked with.
struct ConvPlan {
  cudnnTensorDescriptor_t x, y, b;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv_fwd, conv_data, conv_filter;
  cudnnConvolutionFwdAlgo_t fwd;
  cudnnConvolutionBwdDataAlgo_t bwd_data;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter;
  size_t ws_fwd = 0, ws_data = 0, ws_filter = 0;
};

constexpr size_t kMaxWorkspace = size_t(1) << 30;  // 1 GiB

using PlanKey = std::tuple<int, int, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                           int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;

std::string shape_of(const ConvGeometry& g) {
  return "input (" + std::to_string(g.N) + ", " + std::to_string(g.C) + ", " + std::to_string(g.H) + ", " +
         std::to_string(g.W) + "), " + std::to_string(g.O) + " filters " + std::to_string(g.kH) + "x" +
         std::to_string(g.kW) + ", groups " + std::to_string(g.groups);
}

cudnnConvolutionDescriptor_t make_conv_desc(const ConvGeometry& g, cudnnDataType_t dt, cudnnMathType_t math) {
  cudnnConvolutionDescriptor_t c;
  check_cudnn(cudnnCreateConvolutionDescriptor(&c), "cudnnCreateConvolutionDescriptor");
  check_cudnn(cudnnSetConvolution2dDescriptor(c, int(g.pad_h), int(g.pad_w), int(g.stride_h), int(g.stride_w),
                                              int(g.dil_h), int(g.dil_w), CUDNN_CROSS_CORRELATION, dt),
              "conv2d convolution descriptor");
  check_cudnn(cudnnSetConvolutionGroupCount(c, int(g.groups)), "cudnnSetConvolutionGroupCount");
  check_cudnn(cudnnSetConvolutionMathType(c, math), "cudnnSetConvolutionMathType");
  return c;
}

static_assert(CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 == kBwdDataAlgo0 &&
                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 == kBwdFilterAlgo0 &&
                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3 == kBwdFilterAlgo3,
              "algo_pick.h's non-deterministic algorithm values differ from cuDNN's");

// The index of the algorithm to use in cuDNN's ranking (algo_pick.h), or -1.
template <class Perf> int pick(ConvDirection d, const Perf* perfs, int n, bool tf32) {
  AlgoCandidate c[16];
  n = n < 16 ? n : 16;
  for (int i = 0; i < n; ++i)
    c[i] = {static_cast<int>(perfs[i].algo), perfs[i].status == CUDNN_STATUS_SUCCESS,
            perfs[i].mathType == CUDNN_FMA_MATH || perfs[i].mathType == CUDNN_DEFAULT_MATH, perfs[i].memory};
  return pick_algorithm(d, c, n, kMaxWorkspace, tf32);
}

// One direction of a plan: cuDNN's ranking of its algorithms (rank), the first that qualifies
// (pick; when none does, `fallback`, slower and deterministic, with a warning), that algorithm's
// math type on the direction's descriptor `conv`, then the workspace size cuDNN reports for
// exactly that algorithm and math type (workspace_size, into ws). cuDNN's v7 functions of the
// three directions take the same arguments, (handle, a, b, conv, c, ...), of different types:
// forward (x, w, y), backward-data (w, dy, dx), backward-filter (x, dy, dw).
template <int kCount, class Perf, class A, class B, class C, class Algo>
Algo choose_algorithm(ConvDirection dir, const char* direction, Algo fallback, const char* fallback_name,
                      cudnnStatus_t (*rank)(cudnnHandle_t, A, B, cudnnConvolutionDescriptor_t, C, int, int*, Perf*),
                      cudnnStatus_t (*workspace_size)(cudnnHandle_t, A, B, cudnnConvolutionDescriptor_t, C, Algo,
                                                      size_t*),
                      cudnnHandle_t h, A a, B b, cudnnConvolutionDescriptor_t conv, C c, const ConvGeometry& g,
                      bool tf32, size_t& ws) {
  Perf perf[kCount];
  int found = 0;
  check_cudnn(rank(h, a, b, conv, c, kCount, &found, perf),
              (std::string("cuDNN's ") + direction + " algorithm ranking").c_str());
  const int i = pick(dir, perf, found, tf32);
  if (i < 0)
    std::fprintf(stderr,
                 "minidl: warning: conv2d: cuDNN offers no deterministic %s algorithm for %s; using the slower "
                 "deterministic %s\n",
                 direction, shape_of(g).c_str(), fallback_name);
  const Algo algo = i >= 0 ? perf[i].algo : fallback;
  check_cudnn(cudnnSetConvolutionMathType(conv, i >= 0 ? perf[i].mathType : CUDNN_FMA_MATH),
              (std::string("cudnnSetConvolutionMathType (") + direction + ")").c_str());
  check_cudnn(workspace_size(h, a, b, conv, c, algo, &ws),
              ("conv2d " + std::string(direction) + " workspace (" + shape_of(g) + ")").c_str());
  return algo;
}

ConvPlan& plan_for(ElemType t, const ConvGeometry& g) {
  static std::map<PlanKey, ConvPlan> plans;
  static std::mutex mu;
  const bool tf32 = allow_tf32() && t == ElemType::F32;
  const PlanKey key{current_device(), int(t),     tf32,       g.N,     g.C,     g.H,     g.W,    g.O, g.kH, g.kW,
                    g.groups,         g.stride_h, g.stride_w, g.pad_h, g.pad_w, g.dil_h, g.dil_w};
  std::lock_guard<std::mutex> lock(mu);
  auto it = plans.find(key);
  if (it != plans.end()) return it->second;
  const cudnnDataType_t dt = t == ElemType::F32 ? CUDNN_DATA_FLOAT : CUDNN_DATA_DOUBLE;
  const cudnnMathType_t search_math = tf32 ? CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION : CUDNN_FMA_MATH;
  ConvPlan p{};
  check_cudnn(cudnnCreateTensorDescriptor(&p.x), "cudnnCreateTensorDescriptor");
  check_cudnn(cudnnCreateTensorDescriptor(&p.y), "cudnnCreateTensorDescriptor");
  check_cudnn(cudnnCreateTensorDescriptor(&p.b), "cudnnCreateTensorDescriptor");
  check_cudnn(cudnnCreateFilterDescriptor(&p.w), "cudnnCreateFilterDescriptor");
  check_cudnn(cudnnSetTensor4dDescriptor(p.x, CUDNN_TENSOR_NCHW, dt, int(g.N), int(g.C), int(g.H), int(g.W)),
              "conv2d input descriptor");
  check_cudnn(
      cudnnSetFilter4dDescriptor(p.w, dt, CUDNN_TENSOR_NCHW, int(g.O), int(g.C / g.groups), int(g.kH), int(g.kW)),
      "conv2d weight descriptor");
  p.conv_fwd = make_conv_desc(g, dt, search_math);
  p.conv_data = make_conv_desc(g, dt, search_math);
  p.conv_filter = make_conv_desc(g, dt, search_math);
  int n = 0, c = 0, h = 0, w = 0;
  check_cudnn(cudnnGetConvolution2dForwardOutputDim(p.conv_fwd, p.x, p.w, &n, &c, &h, &w), "conv2d output size");
  if (n != g.N || c != g.O || h != g.H_out || w != g.W_out)
    throw std::logic_error("conv2d: cuDNN's output size differs from minidl's");
  check_cudnn(cudnnSetTensor4dDescriptor(p.y, CUDNN_TENSOR_NCHW, dt, n, c, h, w), "conv2d output descriptor");
  check_cudnn(cudnnSetTensor4dDescriptor(p.b, CUDNN_TENSOR_NCHW, dt, 1, int(g.O), 1, 1), "conv2d bias descriptor");
  cudnnHandle_t hd = cudnn_handle();
  p.fwd = choose_algorithm<CUDNN_CONVOLUTION_FWD_ALGO_COUNT>(
      ConvDirection::Forward, "forward", CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
      "CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM", cudnnGetConvolutionForwardAlgorithm_v7,
      cudnnGetConvolutionForwardWorkspaceSize, hd, p.x, p.w, p.conv_fwd, p.y, g, tf32, p.ws_fwd);
  p.bwd_data = choose_algorithm<CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT>(
      ConvDirection::BackwardData, "backward-data", CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
      "CUDNN_CONVOLUTION_BWD_DATA_ALGO_1", cudnnGetConvolutionBackwardDataAlgorithm_v7,
      cudnnGetConvolutionBackwardDataWorkspaceSize, hd, p.w, p.y, p.conv_data, p.x, g, tf32, p.ws_data);
  p.bwd_filter = choose_algorithm<CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT>(
      ConvDirection::BackwardFilter, "backward-filter", CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
      "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1", cudnnGetConvolutionBackwardFilterAlgorithm_v7,
      cudnnGetConvolutionBackwardFilterWorkspaceSize, hd, p.x, p.y, p.conv_filter, p.w, g, tf32, p.ws_filter);
  return plans.emplace(key, p).first->second;
}

// A workspace from the caching allocator, released when the scope ends (stream-ordered reuse).
struct Workspace {
  void* ptr = nullptr;
  int device = 0;
  explicit Workspace(size_t n) : device(current_device()) { ptr = n ? device_malloc(n, device) : nullptr; }
  ~Workspace() { device_free(ptr, device); }
};

void check_type(ElemType t, const char* op) {
  if (t != ElemType::F32 && t != ElemType::F64)
    throw std::invalid_argument(std::string(op) + ": expected a floating dtype (float32 or float64) on CUDA");
}

// cuDNN's tensor descriptors hold at most 2^31 - 1 elements each (its API reference,
// cudnnSetTensorNdDescriptor: "limited to 2 Giga-elements").
void check_cudnn_sizes(const ConvGeometry& g, const char* op) {
  constexpr int64_t kMost = 2147483647;
  auto check = [&](const char* what, int64_t n, int64_t c, int64_t h, int64_t w) {
    if (n * c * h * w <= kMost) return;
    throw std::invalid_argument(std::string(op) + ": " + what + " (" + std::to_string(n) + ", " + std::to_string(c) +
                                ", " + std::to_string(h) + ", " + std::to_string(w) + ") has " +
                                std::to_string(n * c * h * w) + " elements; cuDNN takes at most " +
                                std::to_string(kMost) + " per tensor: split the batch");
  };
  check("input", g.N, g.C, g.H, g.W);
  check("output", g.N, g.O, g.H_out, g.W_out);
}

// cuDNN's alpha and beta: pointers to a float for float32 data, to a double for float64.
const void* scalar_one(ElemType t) {
  static constexpr float one_f = 1.0f;
  static constexpr double one_d = 1.0;
  return t == ElemType::F32 ? static_cast<const void*>(&one_f) : &one_d;
}
const void* scalar_zero(ElemType t) {
  static constexpr float zero_f = 0.0f;
  static constexpr double zero_d = 0.0;
  return t == ElemType::F32 ? static_cast<const void*>(&zero_f) : &zero_d;
}

}  // namespace

void conv2d_forward(ElemType t, const ConvGeometry& g, const void* x, const void* w, const void* b, void* y) {
  check_type(t, "conv2d");
  if (g.N == 0 || g.O == 0) return;
  check_cudnn_sizes(g, "conv2d");
  ConvPlan& p = plan_for(t, g);
  cudnnHandle_t h = cudnn_handle();
  const void* one = scalar_one(t);
  const void* zero = scalar_zero(t);
  Workspace ws(p.ws_fwd);
  check_cudnn(cudnnConvolutionForward(h, one, p.x, x, p.w, w, p.conv_fwd, p.fwd, ws.ptr, p.ws_fwd, zero, p.y, y),
              "conv2d (cudnnConvolutionForward)");
  if (b) check_cudnn(cudnnAddTensor(h, one, p.b, b, one, p.y, y), "conv2d bias (cudnnAddTensor)");
  check_launch("conv2d (cuDNN)");
}

// dx == nullptr (the input needs no gradient, e.g. a first layer's) skips the backward-data call.
void conv2d_backward(ElemType t, const ConvGeometry& g, const void* x, const void* w, const void* dy, void* dx,
                     void* dw, void* db) {
  check_type(t, "conv2d_backward");
  check_cudnn_sizes(g, "conv2d_backward");
  ConvPlan& p = plan_for(t, g);
  cudnnHandle_t h = cudnn_handle();
  const void* one = scalar_one(t);
  const void* zero = scalar_zero(t);
  if (dx) {
    Workspace ws(p.ws_data);
    check_cudnn(cudnnConvolutionBackwardData(h, one, p.w, w, p.y, dy, p.conv_data, p.bwd_data, ws.ptr, p.ws_data, zero,
                                             p.x, dx),
                "conv2d_backward (cudnnConvolutionBackwardData)");
  }
  {
    Workspace ws(p.ws_filter);
    check_cudnn(cudnnConvolutionBackwardFilter(h, one, p.x, x, p.y, dy, p.conv_filter, p.bwd_filter, ws.ptr,
                                               p.ws_filter, zero, p.w, dw),
                "conv2d_backward (cudnnConvolutionBackwardFilter)");
  }
  if (db)
    check_cudnn(cudnnConvolutionBackwardBias(h, one, p.y, dy, zero, p.b, db),
                "conv2d_backward (cudnnConvolutionBackwardBias)");
  check_launch("conv2d_backward (cuDNN)");
}

}  // namespace minidl::kernels::cuda
