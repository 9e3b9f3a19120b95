// tensor/cuda_dispatch.cpp — on_cuda's device check, and the CUDA kernels' addressing of strided
// tensors: element-wise loops (make_iter) and strided-batched GEMM (batch_stride). See
// tensor/cuda_dispatch.h.
#include "minidl/tensor/cuda_dispatch.h"

#include <stdexcept>
#include <string>

#include "minidl/kernels/cuda_api.h"
#include "minidl/kernels/strided.h"

namespace minidl::cuda_dispatch {

namespace kc = kernels::cuda;

// ---------------------------------------------------------------- devices

namespace {
bool check_devices(const Tensor* const* ts, size_t n, const char* op) {
  const Tensor* first = nullptr;
  bool cuda = false;
  for (size_t i = 0; i < n; ++i) {
    const Tensor* t = ts[i];
    if (!t->defined()) continue;
    if (!first)
      first = t;
    else if (t->device() != first->device())
      throw std::invalid_argument(std::string(op) + ": expected all tensors on the same device, got " +
                                  first->device().str() + " and " + t->device().str());
    cuda |= t->device().is_cuda();
  }
  return cuda;
}
}  // namespace

bool on_cuda(std::initializer_list<const Tensor*> ts, const char* op) {
  return check_devices(ts.begin(), ts.size(), op);
}

bool on_cuda(const std::vector<Tensor>& ts, const char* op) {
  std::vector<const Tensor*> p;
  for (const Tensor& t : ts) p.push_back(&t);
  return check_devices(p.data(), p.size(), op);
}

void use_device(const Tensor& t) { kc::set_device(t.device().index); }

bool batch_stride(const Tensor& t, const Shape& batch_shape, int64_t& step) {
  step = 0;
  int64_t expect = -1;
  for (int64_t d = static_cast<int64_t>(batch_shape.size()) - 1; d >= 0; --d) {
    if (batch_shape[d] == 1) continue;
    if (expect < 0) {
      step = t.stride(d);
      expect = step * batch_shape[d];
    } else if (t.stride(d) == expect) {
      expect *= batch_shape[d];
    } else if (!(t.stride(d) == 0 && step == 0)) {
      return false;
    }
  }
  return true;
}

kc::StridedIter make_iter(const Shape& shape, const std::vector<const Shape*>& strides, const char* op) {
  const int n = static_cast<int>(strides.size());
  Shape dims;
  std::vector<Shape> steps(strides.size());
  kernels::coalesce_dims(shape, n, strides.data(), dims, steps);  // as the CPU's StridedLoop
  if (dims.size() > static_cast<size_t>(kc::kMaxDims))
    throw std::invalid_argument(std::string(op) + ": more than " + std::to_string(kc::kMaxDims) +
                                " non-mergeable dims are not supported on CUDA (shape " + shape_str(shape) + ")");
  kc::StridedIter it;
  it.numel = shape_numel(shape);
  it.ndim = static_cast<int>(dims.size());
  for (int d = 0; d < it.ndim; ++d) {
    it.shape[d] = dims[d];
    for (int k = 0; k < n; ++k) it.strides[k][d] = steps[k][d];
  }
  // The fast path (offset = index) needs EVERY operand dense: at most one merged dim, stride 1 in
  // each; a strided output or input (a column of a matrix, a broadcast scalar) keeps the div/mod path.
  it.contiguous = it.ndim <= 1;
  for (int k = 0; k < n && it.ndim == 1; ++k) it.contiguous = it.contiguous && it.strides[k][0] == 1;
  return it;
}

}  // namespace minidl::cuda_dispatch
