// kernels/cuda_stub.cpp — the CUDA entry points (kernels/cuda_api.h, kernels/cuda_ops.h) for a build
// without nvcc: no device, and every call that would need one throws "<op>: minidl was built
// without CUDA". Tested by tests/kernels/test_cuda_stub.cpp.
#include <stdexcept>
#include <string>

#include "minidl/kernels/cuda_api.h"
#include "minidl/kernels/cuda_ops.h"

namespace minidl::kernels::cuda {

namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw std::runtime_error(std::string(what) + ": minidl was built without CUDA (nvcc not found at configure time)");
}
}  // namespace

bool compiled_with_cuda() { return false; }
namespace {
bool g_sync = false;  // no kernels to synchronise after; kept so the setting reads back
}  // namespace
bool sync_after_kernels() { return g_sync; }
void set_sync_after_kernels(bool on) { g_sync = on; }
int device_count() { return 0; }
bool initialized_before_fork() { return false; }
std::string device_name(int) { no_cuda("device_name"); }
void require_device(int, const char* op) { no_cuda(op); }
void set_device(int) { no_cuda("set_device"); }
int current_device() { no_cuda("current_device"); }
int select_device_from_env() { no_cuda("select_device_from_env"); }
void* device_malloc(size_t, int) { no_cuda("device_malloc"); }
void device_free(void*, int) {}
void record_stream(void*, int, void*) { no_cuda("record_stream"); }
MemoryStats memory_stats(int) { no_cuda("memory_stats"); }
void reset_peak_memory_stats(int) { no_cuda("reset_peak_memory_stats"); }
void empty_cache(int) { no_cuda("empty_cache"); }
void set_memory_fraction(double, int) { no_cuda("set_memory_fraction"); }
void memcpy(void*, const void*, size_t, int, int) { no_cuda("cuda memcpy"); }
void memcpy_between_devices(void*, int, const void*, int, size_t) { no_cuda("cuda memcpy"); }
void synchronize(int) { no_cuda("synchronize"); }
void* compute_stream(int) { no_cuda("compute_stream"); }
void* communication_stream(int) { no_cuda("communication_stream"); }
void stream_wait_stream(void*, void*) { no_cuda("stream_wait_stream"); }
void* pinned_malloc(size_t, int) { no_cuda("pinned_malloc"); }
void pinned_free(void*, int) {}
MemoryStats pinned_memory_stats(int) { no_cuda("pinned_memory_stats"); }
void axpy(float, const float*, float*, long, int) { no_cuda("cuda axpy"); }

// ---- kernels ----
#define MINIDL_STUB_UNARY(Op) \
  void elementwise(ElemType, const StridedIter&, void*, const void*, const Op&) { no_cuda(#Op); }
#define MINIDL_STUB_BINARY(Op) \
  void elementwise(ElemType, const StridedIter&, void*, const void*, const void*, const Op&) { no_cuda(#Op); }
#define MINIDL_STUB_TERNARY(Op)                                                                             \
  void elementwise(ElemType, const StridedIter&, void*, const void*, const void*, const void*, const Op&) { \
    no_cuda(#Op);                                                                                           \
  }
MINIDL_CUDA_UNARY_OPS(MINIDL_STUB_UNARY)
MINIDL_CUDA_BINARY_OPS(MINIDL_STUB_BINARY)
MINIDL_CUDA_TERNARY_OPS(MINIDL_STUB_TERNARY)

void copy(ElemType, ElemType, const StridedIter&, void*, const void*) { no_cuda("copy"); }
void fill(ElemType, const StridedIter&, void*, double) { no_cuda("fill"); }
void dropout_mask(ElemType, void*, int64_t, double, uint64_t, uint64_t) { no_cuda("dropout_mask"); }
void sum_rows(ElemType, const void*, void*, int64_t, int64_t, double) { no_cuda("sum"); }
void var_rows(ElemType, const void*, void*, int64_t, int64_t, int64_t) { no_cuda("var"); }
void max_rows(ElemType, const void*, void*, int64_t*, int64_t, int64_t) { no_cuda("max"); }
void softmax_forward(ElemType, const void*, void*, int64_t, int64_t, int64_t, bool) { no_cuda("softmax"); }
void softmax_backward(ElemType, const void*, const void*, void*, int64_t, int64_t, int64_t, bool) {
  no_cuda("softmax_backward");
}
void cross_entropy_forward(ElemType, const void*, const int64_t*, int64_t, int64_t, double, void*) {
  no_cuda("cross_entropy");
}
void cross_entropy_backward(ElemType, const void*, const int64_t*, int64_t, int64_t, double, const void*, void*) {
  no_cuda("cross_entropy_backward");
}
void gather_rows(ElemType, const void*, int64_t, int64_t, const int64_t*, int64_t, int64_t, void*) {
  no_cuda("gather_rows");
}
void layer_norm_forward(ElemType, const void*, int64_t, int64_t, const void*, const void*, double, void*, void*,
                        void*) {
  no_cuda("layer_norm");
}
void layer_norm_backward(ElemType, const void*, const void*, int64_t, int64_t, const void*, const void*, const void*,
                         void*, void*, void*) {
  no_cuda("layer_norm_backward");
}
void batch_norm_stats(ElemType, const void*, int64_t, int64_t, int64_t, double, void*, void*) {
  no_cuda("batch_norm_stats");
}
void batch_norm_elemt(ElemType, const void*, int64_t, int64_t, int64_t, const void*, const void*, const void*,
                      const void*, void*) {
  no_cuda("batch_norm_elemt");
}
void batch_norm_backward_reduce(ElemType, const void*, const void*, int64_t, int64_t, int64_t, const void*, const void*,
                                void*, void*, void*, void*) {
  no_cuda("batch_norm_backward_reduce");
}
void batch_norm_backward_elemt(ElemType, const void*, const void*, int64_t, int64_t, int64_t, const void*, const void*,
                               const void*, const void*, const void*, int64_t, void*) {
  no_cuda("batch_norm_backward_elemt");
}
void batch_norm_backward_elemt(ElemType, const void*, const void*, int64_t, int64_t, int64_t, const void*, const void*,
                               const void*, const void*, const void*, const double*, void*) {
  no_cuda("batch_norm_backward_elemt");
}
void batch_norm_gather_stats(const double*, int64_t, int64_t, double, double*, double*, double*, double*) {
  no_cuda("batch_norm_gather_stats");
}
void index_select(ElemType, const void*, const int64_t*, void*, int64_t, int64_t, int64_t, int64_t) {
  no_cuda("index_select");
}
void index_add(ElemType, const void*, const int64_t*, void*, int64_t, int64_t, int64_t, int64_t) {
  no_cuda("index_add");
}
void max_pool2d_forward(ElemType, const void*, int64_t, int64_t, int64_t, void*, int64_t*, int64_t, int64_t,
                        const PoolWindow&) {
  no_cuda("max_pool2d");
}
void max_pool2d_backward(ElemType, const void*, const int64_t*, int64_t, int64_t, int64_t, int64_t, int64_t,
                         const PoolWindow&, void*) {
  no_cuda("max_pool2d_backward");
}
void avg_pool2d_forward(ElemType, const void*, int64_t, int64_t, int64_t, void*, int64_t, int64_t, const PoolWindow&,
                        bool) {
  no_cuda("avg_pool2d");
}
void avg_pool2d_backward(ElemType, const void*, int64_t, int64_t, int64_t, void*, int64_t, int64_t, const PoolWindow&,
                         bool) {
  no_cuda("avg_pool2d_backward");
}
void adaptive_avg_pool2d_forward(ElemType, const void*, int64_t, int64_t, int64_t, void*, int64_t, int64_t) {
  no_cuda("adaptive_avg_pool2d");
}
void adaptive_avg_pool2d_backward(ElemType, const void*, int64_t, int64_t, int64_t, void*, int64_t, int64_t) {
  no_cuda("adaptive_avg_pool2d_backward");
}
void sgd_step(ElemType, void*, const void*, void*, int64_t, const SgdStep&) { no_cuda("sgd_step"); }
void adam_step(ElemType, void*, const void*, void*, void*, void*, int64_t, const AdamStep&) { no_cuda("adam_step"); }
void gemm(ElemType, int64_t, int64_t, int64_t, const void*, int64_t, bool, const void*, int64_t, bool, void*, int64_t,
          int64_t, int64_t, int64_t, int64_t) {
  no_cuda("gemm");
}
void set_allow_tf32(bool) {}
bool allow_tf32() { return false; }
void conv2d_forward(ElemType, const ConvGeometry&, const void*, const void*, const void*, void*) { no_cuda("conv2d"); }
void conv2d_backward(ElemType, const ConvGeometry&, const void*, const void*, const void*, void*, void*, void*) {
  no_cuda("conv2d_backward");
}

}  // namespace minidl::kernels::cuda
