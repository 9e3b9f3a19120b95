// tests/dist/test_distributed.cpp — the global API (dist::init from the environment that spawn
// sets, the default group's free functions, init/shutdown rules, backend registry) and the
// metrics built on it (reduce_dict, exact weighted means), with real ranks (shm, the default on
// one host).
#include <cmath>
#include <thread>

#include "minidl/dist/distributed.h"
#include "minidl/dist/distributed_sampler.h"
#include "minidl/dist/metrics.h"
#include "minidl/dist/socket.h"
#include "tests/common/testing.h"
#include "tests/dist/pg_test_util.h"

using namespace std::chrono_literals;
using minidl::DType;
using minidl::Tensor;
using minidl::testing::error_of;
using minidl::testing::require;
using minidl::testing::require_equal;
using ::testing::HasSubstr;
namespace dist = minidl::dist;

namespace {

// spawn(n) ranks that each dist::init() from the environment spawn gives them, run fn, shutdown.
std::vector<std::string> run_initialized_world(int n, const std::function<std::string()>& fn) {
  minidl::testing::EnvGuard env;
  return dist::spawn_with_results(n, [&](int) {
    dist::init({.timeout = 5s});
    std::string result = fn();
    dist::barrier();  // rank 0 hosts the store: nobody leaves while others may still use it
    dist::shutdown();
    return result;
  });
}

}  // namespace

TEST(Distributed, InitReadsTheWorldAndTheFreeFunctionsUseTheDefaultGroup) {
  auto results = run_initialized_world(3, [] {
    require(dist::is_initialized(), "initialised");
    require(dist::default_group().backend_name() == "shm", "auto means shm on one host");
    Tensor t = minidl::from_vector<double>({1.0 * dist::rank(), 2.0}, {2});
    dist::all_reduce(t);
    require_equal(t, minidl::from_vector<double>({3.0, 6.0}, {2}), "all_reduce");
    Tensor m = minidl::full({2}, dist::rank());
    dist::all_reduce(m, dist::ReduceOp::MAX);
    require_equal(m, minidl::full({2}, 2.0), "all_reduce max");
    Tensor b = minidl::full({3}, dist::rank(), DType::Int64);
    dist::broadcast(b, 2);
    require_equal(b, minidl::full({3}, 2.0, DType::Int64), "broadcast");
    auto g = dist::all_gather(minidl::full({1}, dist::rank() * 5.0));
    require(g.size() == 3 && g[2].item() == 10.0, "all_gather");
    Tensor rs = dist::reduce_scatter(minidl::ones({6}));
    require_equal(rs, minidl::full({2}, 3.0), "reduce_scatter");
    auto objs = dist::all_gather_object(std::string(static_cast<size_t>(dist::rank()), 'z'));
    require(objs[2] == "zz", "all_gather_object");
    std::string msg = dist::rank() == 0 ? "hello" : "";
    dist::broadcast_object(msg);
    require(msg == "hello", "broadcast_object");
    std::string twice = error_of([] { dist::init(); });
    require(twice.find("dist::init: already initialised") != std::string::npos, twice);
    return std::to_string(dist::rank()) + "/" + std::to_string(dist::world_size()) + " local " +
           std::to_string(dist::local_rank()) + "/" + std::to_string(dist::local_world_size());
  });
  EXPECT_EQ(results, (std::vector<std::string>{"0/3 local 0/3", "1/3 local 1/3", "2/3 local 2/3"}));
}

TEST(Distributed, CollectivesBeforeInitAreErrorsNamingTheFunction) {
  ASSERT_FALSE(dist::is_initialized());
  Tensor t = minidl::ones({2});
  EXPECT_THROW_MSG(dist::all_reduce(t), std::runtime_error,
                   "dist::all_reduce: the default process group is not initialised");
  EXPECT_THROW_MSG(dist::barrier(), std::runtime_error, "dist::barrier: the default process group is not initialised");
  EXPECT_THROW_MSG(dist::default_group(), std::runtime_error, "dist::default_group");
  EXPECT_THROW_MSG(dist::rank(), std::runtime_error, "dist::rank");
  EXPECT_NO_THROW(dist::shutdown());  // harmless without init, and twice
  EXPECT_NO_THROW(dist::shutdown());
}

TEST(Distributed, NcclIsRegisteredExactlyWhenBuiltWithCuda) {
#if defined(MINIDL_WITH_CUDA)
  // the CUDA build registers "nccl" (dist/cuda/process_group_nccl.cpp)
  EXPECT_TRUE(dist::is_backend_available("nccl"));
  EXPECT_THROW_MSG(dist::init({.backend = "mpi"}), std::runtime_error,
                   "unknown backend 'mpi' (available: auto, gloo, hierarchical, nccl, shm)");
#else
  ASSERT_FALSE(dist::is_backend_available("nccl"));
  EXPECT_THROW_MSG(dist::init({.backend = "nccl"}), std::runtime_error, "NCCL backend is not available in this build");
  EXPECT_THROW_MSG(dist::init({.backend = "mpi"}), std::runtime_error,
                   "unknown backend 'mpi' (available: auto, gloo, hierarchical, shm)");
#endif
  EXPECT_FALSE(dist::is_initialized());
}

TEST(Distributed, ARegisteredBackendIsWhatInitCreates) {
  auto results = run_initialized_world(1, [] { return dist::default_group().backend_name(); });
  EXPECT_EQ(results[0], "shm");  // auto, on one host
  minidl::testing::EnvGuard env;
  auto named = dist::spawn_with_results(2, [](int) {
    // A stand-in for the CUDA code's registration of "nccl": a Gloo group under another name.
    dist::register_backend("nccl", [](dist::TCPStore& store, int rank, int size, dist::ProcessGroupOptions o) {
      return std::unique_ptr<dist::ProcessGroup>(new dist::ProcessGroupGloo(store, rank, size, o));
    });
    dist::init({.backend = "nccl", .timeout = 5s});
    Tensor t = minidl::ones({1});
    dist::all_reduce(t);
    std::string r = std::to_string(t.item());
    dist::barrier();
    dist::shutdown();
    dist::shutdown();  // twice is fine
    return r;
  });
  EXPECT_EQ(named, (std::vector<std::string>{"2.000000", "2.000000"}));
}

TEST(Distributed, InitAgainAfterShutdownFormsANewGroup) {
  auto results = run_initialized_world(2, [] {
    // A new MASTER_PORT, agreed through the old group: a rank re-initialising on the old port
    // could reach the old store before rank 0 has shut it down.
    std::string port = dist::rank() == 0 ? std::to_string(minidl::dist::find_free_port()) : "";
    dist::broadcast_object(port);
    ::setenv("MASTER_PORT", port.c_str(), 1);
    dist::barrier();
    dist::shutdown();
    dist::init({.timeout = 5s});  // fresh store and group
    // values that only a working all_reduce over both ranks produces: 1 + 2 per element
    Tensor t = minidl::full({3}, 1.0 + dist::rank());
    dist::all_reduce(t);
    const auto v = t.to_vector<double>();
    return std::to_string(dist::rank()) + "/" + std::to_string(dist::world_size()) + " " + std::to_string(v[0]) + " " +
           std::to_string(v[1]) + " " + std::to_string(v[2]);
  });
  EXPECT_EQ(results, (std::vector<std::string>{"0/2 3.000000 3.000000 3.000000", "1/2 3.000000 3.000000 3.000000"}));
}

TEST(Distributed, SamplerTakesRankAndWorldFromInit) {
  auto results = run_initialized_world(2, [] {
    dist::DistributedSampler s(9, {.shuffle = false});
    std::string out;
    for (int64_t i : s.indices()) out += std::to_string(i) + " ";
    return out;
  });
  EXPECT_EQ(results[0], "0 2 4 6 8 ");
  EXPECT_EQ(results[1], "1 3 5 7 0 ");
}

// ---- metrics ----

TEST(Metrics, ReduceDictSumsOrAveragesEveryKeyInOneGo) {
  auto results = run_initialized_world(3, [] {
    const double r = dist::rank();
    std::map<std::string, double> d{{"loss", 1.0 + r}, {"acc", 0.5 * r}, {"n", 10.0}};
    auto sum = dist::reduce_dict(d, false, dist::default_group());
    auto avg = dist::reduce_dict(d, true, dist::default_group());
    require(sum.at("loss") == 6.0 && sum.at("acc") == 1.5 && sum.at("n") == 30.0, "sum");
    require(avg.at("loss") == 2.0 && avg.at("acc") == 0.5 && avg.at("n") == 10.0, "average");
    require(dist::reduce_dict({}, true, dist::default_group()).empty(), "empty dict");
    return std::string();
  });
  EXPECT_EQ(results.size(), 3u);
}

TEST(Metrics, ReduceDictWithDifferentKeysNamesThem) {
  auto results = run_initialized_world(2, [] {
    std::map<std::string, double> d{{"loss", 1.0}};
    if (dist::rank() == 1) d["acc"] = 0.5;
    return error_of([&] { dist::reduce_dict(d, true, dist::default_group()); });
  });
  EXPECT_EQ(results[0], "reduce_dict: ranks have different keys: rank 0 has [loss], rank 1 has [acc, loss]");
  EXPECT_EQ(results[1], "reduce_dict: ranks have different keys: rank 1 has [acc, loss], rank 0 has [loss]");
}

TEST(Metrics, WeightedMeansOverUnevenShardsEqualTheSingleProcessMean) {
  // 10 samples; sample i has loss i and is "correct" when i % 3 == 0 (samples 0, 3, 6, 9).
  // Exact shards over 3 ranks hold 4, 3, 3 samples, in batches of 2 (so batch sizes 2, 2 | 2, 1 |
  // 2, 1): only count-weighted sums give the single-process means, loss 4.5 and accuracy 0.4.
  auto results = run_initialized_world(3, [] {
    dist::DistributedSampler s(10, {.shuffle = true, .seed = 9, .exact = true});
    dist::MetricSums sums;
    sums.declare("loss");
    auto idx = s.indices();
    double shard_loss = 0;
    for (size_t k = 0; k < idx.size(); k += 2) {
      double batch_loss = 0, batch_correct = 0;
      size_t n = std::min<size_t>(2, idx.size() - k);
      for (size_t j = 0; j < n; ++j) {
        batch_loss += static_cast<double>(idx[k + j]);
        batch_correct += idx[k + j] % 3 == 0 ? 1.0 : 0.0;
      }
      shard_loss += batch_loss;
      sums.add("loss", batch_loss / static_cast<double>(n), static_cast<double>(n));
      sums.add("correct", batch_correct / static_cast<double>(n), static_cast<double>(n));
    }
    auto mean = sums.all_reduce_mean(dist::default_group());
    const double n = static_cast<double>(idx.size());
    // this shard's mean loss, weighted by its size (4, 3, 3): the mean over all 10 samples
    const double wm = dist::weighted_mean(shard_loss / n, n, dist::default_group());
    // values 0, 10, 20 with counts 1, 2, 3: (0 + 20 + 60) / 6, not the plain mean 10
    const double r = dist::rank();
    const double wm2 = dist::weighted_mean(10.0 * r, r + 1.0, dist::default_group());
    char buf[160];
    std::snprintf(buf, sizeof(buf), "%zu %.12f %.12f %.12f %.12f", idx.size(), mean.at("loss"), mean.at("correct"), wm,
                  wm2);
    return std::string(buf);
  });
  EXPECT_EQ(results[0], "4 4.500000000000 0.400000000000 4.500000000000 13.333333333333");
  EXPECT_EQ(results[1], "3 4.500000000000 0.400000000000 4.500000000000 13.333333333333");
  EXPECT_EQ(results[2], "3 4.500000000000 0.400000000000 4.500000000000 13.333333333333");
}
