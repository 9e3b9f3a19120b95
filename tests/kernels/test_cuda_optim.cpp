// tests/kernels/test_cuda_optim.cpp — the fused optimizer updates on the GPU (kernels/cuda/optim.cu)
// against the CPU kernels (kernels/cpu/optim_kernels.h): the same functors, several steps, SGD
// (plain, momentum, Nesterov, weight decay), Adam, AdamW and AMSGrad, float32 and float64.
// Skipped, saying why, without a device.
#include "minidl/kernels/cpu/optim_kernels.h"
#include "minidl/kernels/cuda_ops.h"
#include "minidl/tensor/tensor_all.h"
#include "tests/kernels/cuda_testing.h"

using namespace minidl;
using minidl::testing::on_gpu;

namespace {
template <class T> T* ptr(Tensor& t) { return static_cast<T*>(t.raw_data()); }
kernels::cuda::ElemType et(DType d) { return static_cast<kernels::cuda::ElemType>(d); }
}  // namespace

TEST(CudaOptim, FusedSgdMatchesCpuOverSeveralSteps) {
  MINIDL_SKIP_WITHOUT_GPU();
  for (const kernels::SgdStep base :
       {kernels::SgdStep{.lr = 0.1}, kernels::SgdStep{.lr = 0.05, .momentum = 0.9},
        kernels::SgdStep{.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-2},
        kernels::SgdStep{.lr = 0.05, .momentum = 0.9, .nesterov = true}}) {
    const int64_t n = 1000;
    Tensor p = randn({n}, RandomKey{1, 1}), buf = zeros({n});
    Tensor gp = on_gpu(p), gbuf = on_gpu(buf);
    for (int step = 0; step < 4; ++step) {
      Tensor g = randn({n}, RandomKey{2, uint64_t(step)});
      Tensor gg = on_gpu(g);
      kernels::SgdStep op = base;
      op.first_step = step == 0;
      const bool mom = op.momentum != 0.0;
      kernels::cpu::sgd_step<float>(ptr<float>(p), ptr<float>(g), mom ? ptr<float>(buf) : nullptr, n, op);
      kernels::cuda::set_device(0);
      kernels::cuda::sgd_step(et(DType::Float32), gp.raw_data(), gg.raw_data(), mom ? gbuf.raw_data() : nullptr, n, op);
    }
    minidl::testing::expect_close(gp.cpu(), p, 1e-6, 1e-6, "SGD parameters");
    minidl::testing::expect_close(gbuf.cpu(), buf, 1e-6, 1e-6, "SGD momentum buffer");
  }
}

TEST(CudaOptim, FusedAdamAndAdamWMatchCpuOverSeveralSteps) {
  MINIDL_SKIP_WITHOUT_GPU();
  for (DType dt : {DType::Float32, DType::Float64})
    for (const bool decoupled : {false, true})
      for (const bool ams : {false, true}) {
        const int64_t n = 777;
        Tensor p = randn({n}, RandomKey{3, 1}, dt), m = zeros({n}, dt), v = zeros({n}, dt), vm = zeros({n}, dt);
        Tensor gp = on_gpu(p), gm = on_gpu(m), gv = on_gpu(v), gvm = on_gpu(vm);
        for (int step = 1; step <= 5; ++step) {
          Tensor g = randn({n}, RandomKey{4, uint64_t(step)}, dt);
          Tensor gg = on_gpu(g);
          kernels::AdamStep op{.lr = 1e-2, .weight_decay = 1e-2, .decoupled_weight_decay = decoupled, .amsgrad = ams};
          op.set_step(step);
          if (dt == DType::Float32)
            kernels::cpu::adam_step<float>(ptr<float>(p), ptr<float>(g), ptr<float>(m), ptr<float>(v),
                                           ams ? ptr<float>(vm) : nullptr, n, op);
          else
            kernels::cpu::adam_step<double>(ptr<double>(p), ptr<double>(g), ptr<double>(m), ptr<double>(v),
                                            ams ? ptr<double>(vm) : nullptr, n, op);
          kernels::cuda::set_device(0);
          kernels::cuda::adam_step(et(dt), gp.raw_data(), gg.raw_data(), gm.raw_data(), gv.raw_data(),
                                   ams ? gvm.raw_data() : nullptr, n, op);
        }
        const double tol = dt == DType::Float32 ? 1e-5 : 1e-12;
        minidl::testing::expect_close(gp.cpu(), p, tol, tol, "Adam parameters");
        minidl::testing::expect_close(gm.cpu(), m, tol, tol, "Adam exp_avg");
        minidl::testing::expect_close(gv.cpu(), v, tol, tol, "Adam exp_avg_sq");
      }
}
