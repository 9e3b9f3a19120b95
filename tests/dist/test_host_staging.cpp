// tests/dist/test_host_staging.cpp — CUDA tensors through the Gloo backend (dist/host_staging.h):
// every collective on cuda:0 with two ranks sharing the one GPU, and DDP + SyncBatchNorm on that
// GPU against one CPU process. The CUDA tests skip without a device; whether one is usable is
// asked in a forked child, and their ranks are spawned from a fresh process (the test program
// re-executed), since a process that has started CUDA — an earlier GPU test in the same program —
// cannot fork ranks that use it.
#include <cmath>
#include <sstream>

#include "minidl/dist/ddp.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/host_staging.h"
#include "minidl/dist/spawn.h"
#include "minidl/dist/sync_batchnorm.h"
#include "minidl/kernels/cuda_api.h"
#include "minidl/nn/nn_all.h"
#include "minidl/optim/optim_all.h"
#include "tests/common/testing.h"
#include "tests/kernels/cuda_testing.h"

using namespace minidl;
using minidl::testing::in_fresh_process;  // where no CUDA call has been made

namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

void require_close(const Tensor& a, const Tensor& b, double rtol, double atol, const std::string& what) {
  const auto va = a.cpu().to_vector<double>(), vb = b.cpu().to_vector<double>();
  require(va.size() == vb.size(), what + ": sizes differ");
  for (size_t i = 0; i < va.size(); ++i)
    if (std::fabs(va[i] - vb[i]) > atol + rtol * std::fabs(vb[i])) {
      std::ostringstream os;
      os << what << ": element " << i << " is " << va[i] << ", expected " << vb[i];
      throw std::runtime_error(os.str());
    }
}

}  // namespace

TEST(HostStaging, TheGlooBackendIsWrappedAndPassesCpuTensorsThrough) {
  dist::spawn(2, [](int) {
    dist::init({.backend = "gloo", .timeout = std::chrono::seconds(30)});
    auto* staged = dynamic_cast<dist::HostStagedProcessGroup*>(&dist::default_group());
    require(staged != nullptr, "the gloo default group is a HostStagedProcessGroup");
    require(staged->backend_name() == "gloo", "it names the wrapped backend");
    Tensor t = full({3}, 1.0 + dist::rank());
    dist::all_reduce(t);
    require_close(t, full({3}, 3.0), 0, 0, "all_reduce of CPU tensors");
    Tensor undefined;
    std::string msg;
    try {
      staged->reduce_scatter_async(ones({4}), undefined);
    } catch (const std::invalid_argument& e) {
      msg = e.what();
    }
    require(msg.find("reduce_scatter: out is undefined") != std::string::npos, "undefined out: " + msg);
    dist::barrier();
    dist::shutdown();
  });
}

TEST(HostStaging, EveryCollectiveOnOneGpuWithTwoRanks) {
  MINIDL_SKIP_WITHOUT_GPU_IN_CHILD();
  in_fresh_process([] {
    dist::spawn(2, [](int) {
      kernels::cuda::set_device(0);
      dist::init({.backend = "gloo", .timeout = std::chrono::seconds(60)});
      const Device gpu = Device::cuda(0);
      const double r = dist::rank();
      Tensor t = full({5}, 1.0 + r, DType::Float32, gpu);
      dist::all_reduce(t);
      require(t.device().is_cuda(), "all_reduce keeps the tensor on the GPU");
      require_close(t, full({5}, 3.0), 0, 0, "all_reduce sum");
      Tensor m = full({2}, r, DType::Float64, gpu);
      dist::all_reduce(m, dist::ReduceOp::MAX);
      require_close(m, full({2}, 1.0, DType::Float64), 0, 0, "all_reduce max");
      Tensor b = full({3}, 7.0 * r, DType::Int64, gpu);
      dist::broadcast(b, 1);
      require_close(b, full({3}, 7.0, DType::Int64), 0, 0, "broadcast from rank 1");
      auto g = dist::all_gather(full({2}, 10.0 * r, DType::Float32, gpu));
      require(g.size() == 2 && g[1].device().is_cuda(), "all_gather returns GPU tensors");
      require_close(g[0], zeros({2}), 0, 0, "all_gather[0]");
      require_close(g[1], full({2}, 10.0), 0, 0, "all_gather[1]");
      Tensor rs = dist::reduce_scatter(arange(0.0, 4.0, 1.0, DType::Float32).to(gpu));  // (0 1 2 3) on both ranks
      require(rs.device().is_cuda(), "reduce_scatter output on the GPU");
      require_close(rs, from_vector<float>({2.0f * (2 * dist::rank()), 2.0f * (2 * dist::rank() + 1)}, {2}), 0, 0,
                    "reduce_scatter");
      dist::barrier();
      dist::shutdown();
    });
  });
}

// 5 SGD-momentum steps of the CNN with SyncBatchNorm: two ranks on cuda:0 (DDP over Gloo, each
// rank half of each global batch of 12) against one CPU process on the whole batch.
TEST(HostStaging, DdpWithSyncBatchNormOnOneGpuMatchesOneCpuProcess) {
  MINIDL_SKIP_WITHOUT_GPU_IN_CHILD();
  in_fresh_process([] {
    dist::spawn(2, [](int) {
      kernels::cuda::set_device(0);
      dist::init({.backend = "gloo", .timeout = std::chrono::seconds(60)});
      const int64_t B = 12, local = B / 2;
      const Device gpu = Device::cuda(0);
      auto batch = [](int s) {
        return std::pair{rand({B, 1, 28, 28}, RandomKey{77, static_cast<uint64_t>(s)}),
                         randint(0, 10, {B}, RandomKey{78, static_cast<uint64_t>(s)})};
      };
      manual_seed(0);
      auto reference = nn::make_model("cnn");
      {
        optim::SGD opt(reference->parameters(), {.lr = 0.05, .momentum = 0.9});
        for (int s = 0; s < 5; ++s) {
          auto [x, y] = batch(s);
          opt.zero_grad();
          cross_entropy(reference->forward(Variable(x)), y).backward();
          opt.step();
        }
      }
      manual_seed(0);
      auto model = nn::make_model("cnn");
      require(dist::convert_sync_batchnorm(*model) == 2, "two BatchNorms converted");
      model->to(gpu);
      dist::DistributedDataParallel ddp(*model);
      optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
      for (int s = 0; s < 5; ++s) {
        auto [x, y] = batch(s);
        Tensor xs = x.narrow(0, dist::rank() * local, local).contiguous().to(gpu);
        Tensor ys = y.narrow(0, dist::rank() * local, local).contiguous().to(gpu);
        opt.zero_grad();
        cross_entropy(ddp.forward(Variable(xs)), ys).backward();
        ddp.step(opt);
      }
      for (const auto& [name, t] : reference->state_dict())
        require_close(model->state_dict().at(name), t, 1e-4, 1e-5, name);
      dist::barrier();
      dist::shutdown();
    });
  });
}
