// tests/dist/test_process_group_nccl.cpp — ProcessGroupNCCL with world size 1 (all that one GPU
// allows: NCCL refuses two ranks on one device): rendezvous through a TCPStore, every collective
// on CUDA tensors (and CPU tensors staged through the device), async Work handles, the "nccl"
// backend registration. Compiled in CUDA builds only; skipped, saying why, without a device.
#include "minidl/kernels/cuda_api.h"
#include "tests/common/testing.h"

#ifdef MINIDL_WITH_CUDA
#include "minidl/dist/cuda/process_group_nccl.h"
#include "minidl/dist/distributed.h"
#include "minidl/tensor/tensor_all.h"
#include "tests/kernels/cuda_testing.h"

using namespace minidl;

TEST(ProcessGroupNccl, NcclBackendIsRegistered) { EXPECT_TRUE(dist::is_backend_available("nccl")); }

TEST(ProcessGroupNccl, CollectivesWithWorldSizeOne) {
  MINIDL_SKIP_WITHOUT_GPU();
  dist::TCPStore store("127.0.0.1", {.port = 0, .is_server = true, .timeout = std::chrono::seconds(30)});
  dist::ProcessGroupNCCL pg(store, 0, 1, {.timeout = std::chrono::seconds(30), .debug = std::nullopt}, 0);
  Tensor t = from_vector<float>({1, 2, 3}).to(Device::cuda(0));
  auto work = pg.all_reduce_async(t, dist::ReduceOp::SUM);
  work->wait();
  EXPECT_TRUE(work->is_completed());
  minidl::testing::expect_equal(t.cpu(), from_vector<float>({1, 2, 3}), "all_reduce sum");
  pg.all_reduce(t, dist::ReduceOp::AVG);
  pg.broadcast(t, 0);
  minidl::testing::expect_equal(t.cpu(), from_vector<float>({1, 2, 3}), "avg + broadcast");
  const std::vector<Tensor> g = pg.all_gather(t);
  ASSERT_EQ(g.size(), 1u);
  minidl::testing::expect_equal(g[0].cpu(), from_vector<float>({1, 2, 3}), "all_gather");
  minidl::testing::expect_equal(pg.reduce_scatter(t).cpu(), from_vector<float>({1, 2, 3}), "reduce_scatter");
  pg.barrier();
  Tensor host = from_vector<int64_t>({7, 8});
  pg.all_reduce(host);  // a CPU tensor, staged through the device
  minidl::testing::expect_equal(host, from_vector<int64_t>({7, 8}), "staged CPU all_reduce");
  EXPECT_EQ(pg.all_gather_object("hello"), std::vector<std::string>{"hello"});
}

// MINIDL_DIST_DEBUG on: every collective first all-gathers its fingerprint (with one rank it
// always matches; the comparison itself is tested on the CPU in test_collective_fingerprint.cpp), and
// the collectives still give their results; the group is finalized and destroyed at scope end.
TEST(ProcessGroupNccl, DebugModeFingerprintsWithWorldSizeOne) {
  MINIDL_SKIP_WITHOUT_GPU();
  dist::TCPStore store("127.0.0.1", {.port = 0, .is_server = true, .timeout = std::chrono::seconds(30)});
  {
    dist::ProcessGroupNCCL pg(store, 0, 1, {.timeout = std::chrono::seconds(30), .debug = true}, 0);
    Tensor t = from_vector<float>({1, 2, 3}).to(Device::cuda(0));
    pg.all_reduce(t, dist::ReduceOp::SUM);
    pg.broadcast(t, 0);
    const std::vector<Tensor> g = pg.all_gather(t);
    ASSERT_EQ(g.size(), 1u);
    minidl::testing::expect_equal(g[0].cpu(), from_vector<float>({1, 2, 3}), "all_gather in debug mode");
    pg.barrier();
  }
  EXPECT_EQ(kernels::cuda::current_device(), 0);
}
#else
TEST(ProcessGroupNccl, SkippedInACpuOnlyBuild) { GTEST_SKIP() << "built without CUDA: no NCCL process group"; }
#endif
