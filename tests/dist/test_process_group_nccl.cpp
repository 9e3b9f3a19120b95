// tests/dist/test_process_group_nccl.cpp — ProcessGroupNCCL with world size 1 (all that one GPU
// allows: NCCL refuses two ranks on one device): rendezvous through a TCPStore, every collective
// on CUDA tensors (and CPU tensors staged through the device), async Work handles — wait() returns
// before the collective has run, a dropped Work keeps its tensors' memory from reuse — zero-element
// collectives, exit without shutdown, and the "nccl" backend registration. Compiled in CUDA builds
// only; skipped, saying why, without a device.
// (The watchdog's timeout and error handling: tests/dist/test_work_watchdog.cpp, on the CPU.)
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

// Zero elements: every collective returns a completed Work at once (no NCCL call) with results of
// the right shapes, after the same argument checks as a non-empty call; the group stays usable.
TEST(ProcessGroupNccl, ZeroElementCollectivesAreCompleteAtOnce) {
  MINIDL_SKIP_WITHOUT_GPU();
  dist::TCPStore store("127.0.0.1", {.port = 0, .is_server = true, .timeout = std::chrono::seconds(30)});
  dist::ProcessGroupNCCL pg(store, 0, 1, {.timeout = std::chrono::seconds(30), .debug = std::nullopt}, 0);
  Tensor empty = zeros({0}, DType::Float32, Device::cuda(0));
  auto work = pg.all_reduce_async(empty);
  EXPECT_TRUE(work->is_completed());
  work->wait();
  EXPECT_EQ(empty.shape(), Shape{0});
  pg.broadcast(empty, 0);
  EXPECT_THROW(pg.broadcast(empty, 1), std::invalid_argument) << "root out of range, even with no elements";
  Tensor ints = zeros({0, 3}, DType::Int64, Device::cuda(0));
  EXPECT_THROW(pg.all_reduce(ints, dist::ReduceOp::AVG), std::invalid_argument) << "AVG of int64, even empty";
  const std::vector<Tensor> g = pg.all_gather(zeros({0, 3}, DType::Float32, Device::cuda(0)));
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].shape(), (Shape{0, 3}));
  EXPECT_TRUE(g[0].device().is_cuda());
  EXPECT_EQ(pg.reduce_scatter(zeros({0}, DType::Float32, Device::cuda(0))).shape(), Shape{0});
  EXPECT_EQ(pg.all_gather_object(""), std::vector<std::string>{""});
  Tensor t = from_vector<float>({1, 2}).to(Device::cuda(0));
  pg.all_reduce(t);
  minidl::testing::expect_equal(t.cpu(), from_vector<float>({1, 2}), "a collective with elements afterwards");
}

// A program that exits without dist::shutdown(), its group held by a static (as dist's default
// group is): at exit the communicator is aborted with a warning, before the CUDA runtime's
// teardown, instead of being finalized during static destruction; the exit is prompt although
// the group's timeout is long. Run in a re-executed child (the "threadsafe" death-test style),
// so it starts with no CUDA context.
namespace {
// The child's group and store, held as dist's default group is: by namespace-scope statics,
// constructed (empty) before main, so their destructors run after the CUDA runtime's teardown. (A
// function-local static constructed after CUDA starts would be destroyed before it, cleanly.)
std::unique_ptr<dist::TCPStore> exit_test_store;
std::unique_ptr<dist::ProcessGroupNCCL> exit_test_group;

// The child's body: a group in statics, one collective, exit() without shutdown.
void exit_without_shutdown() {
  exit_test_store = std::make_unique<dist::TCPStore>(
      "127.0.0.1", dist::TCPStoreOptions{.port = 0, .is_server = true, .timeout = std::chrono::seconds(300)});
  exit_test_group = std::make_unique<dist::ProcessGroupNCCL>(
      *exit_test_store, 0, 1, dist::ProcessGroupOptions{.timeout = std::chrono::seconds(300), .debug = false}, 0);
  Tensor t = from_vector<float>({1, 2, 3}).to(Device::cuda(0));
  exit_test_group->all_reduce(t);
  std::exit(0);
}
}  // namespace

TEST(ProcessGroupNcclDeathTest, ExitWithoutShutdownAbortsTheCommunicatorPromptly) {
  MINIDL_SKIP_WITHOUT_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EXIT(exit_without_shutdown(), ::testing::ExitedWithCode(0),
              "ProcessGroupNCCL \\(rank 0 of 1\\) was not shut down before exit");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(120));
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
// ~1 TFLOP of matmuls queued on the compute stream: what follows on the device waits behind it.
Tensor queue_matmuls() {
  const Tensor a = ones({4096, 4096}, DType::Float32, Device::cuda(0));
  Tensor busy = a;
  for (int i = 0; i < 8; ++i) busy = matmul(busy, a);
  return busy;
}

// wait() orders the compute stream after the collective and returns without waiting on the host:
// the collective is still queued behind the matmuls when it returns; the result is right after.
TEST(ProcessGroupNccl, WaitReturnsBeforeTheCollectiveHasRun) {
  MINIDL_SKIP_WITHOUT_GPU();
  dist::TCPStore store("127.0.0.1", {.port = 0, .is_server = true, .timeout = std::chrono::seconds(30)});
  dist::ProcessGroupNCCL pg(store, 0, 1, {.timeout = std::chrono::seconds(30), .debug = false}, 0);
  Tensor t = from_vector<float>({1, 2, 3}).to(Device::cuda(0));
  pg.barrier();
  const Tensor busy = queue_matmuls();
  auto work = pg.all_reduce_async(t, dist::ReduceOp::SUM);
  work->wait();
  EXPECT_FALSE(work->is_completed()) << "wait() blocked the host until the collective had run";
  mul_(t, 2.0);  // on the compute stream, after the all_reduce
  minidl::testing::expect_equal(t.cpu(), from_vector<float>({2, 4, 6}), "all_reduce then mul_");
  EXPECT_TRUE(work->is_completed());
}

// A Work dropped before wait(), with the only reference to its bucket: the bucket's block is not
// handed to the next tensor of its size while NCCL may still use it, and is once the device is idle.
TEST(ProcessGroupNccl, DroppedWorkKeepsItsBucketFromReuseUntilTheCollectiveHasRun) {
  MINIDL_SKIP_WITHOUT_GPU();
  dist::TCPStore store("127.0.0.1", {.port = 0, .is_server = true, .timeout = std::chrono::seconds(30)});
  dist::ProcessGroupNCCL pg(store, 0, 1, {.timeout = std::chrono::seconds(30), .debug = false}, 0);
  pg.barrier();
  kernels::cuda::empty_cache(0);
  const int64_t n = (int64_t(5) << 20) / 4 + 1;  // 5 MiB + 4 bytes: its own 6 MiB segment
  void* first = nullptr;
  {
    Tensor bucket = zeros({n}, DType::Float32, Device::cuda(0));
    first = bucket.storage()->data();
    const Tensor busy = queue_matmuls();
    (void)pg.all_reduce_async(bucket, dist::ReduceOp::SUM);  // queued behind the matmuls, dropped
  }
  Tensor again({n}, DType::Float32, Device::cuda(0));
  EXPECT_NE(again.storage()->data(), first) << "the bucket's memory was reused while NCCL may still use it";
  kernels::cuda::synchronize(0);
  Tensor later({n}, DType::Float32, Device::cuda(0));
  EXPECT_EQ(later.storage()->data(), first);
}
#else
TEST(ProcessGroupNccl, SkippedInACpuOnlyBuild) { GTEST_SKIP() << "built without CUDA: no NCCL process group"; }
#endif
