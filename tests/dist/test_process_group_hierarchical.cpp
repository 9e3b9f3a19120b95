// tests/dist/test_process_group_hierarchical.cpp — ProcessGroupHierarchical with real ranks
// (forked processes) that play several hosts through HierarchicalOptions::host_id: every
// collective against values computed here, ranks of a host that are not neighbours, the
// summation order, DDP through it against one process, a rank of another host that exits,
// and the backend "auto" picks.
#include <unistd.h>

#include <cmath>
#include <thread>

#include "minidl/dist/ddp.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/process_group_hierarchical.h"
#include "minidl/nn/nn_all.h"
#include "minidl/optim/optim_all.h"
#include "tests/common/testing.h"
#include "tests/dist/pg_test_util.h"

using namespace std::chrono_literals;
using minidl::DType;
using minidl::Tensor;
using minidl::dist::HierarchicalOptions;
using minidl::dist::ProcessGroupHierarchical;
using minidl::dist::ReduceOp;
using minidl::testing::error_of;
using minidl::testing::quick_options;
using minidl::testing::require;
using minidl::testing::expected_reduce;
using minidl::testing::rank_tensor;
using minidl::testing::require_equal;
using ::testing::HasSubstr;
namespace dist = minidl::dist;

namespace {

// hosts[r]: the host rank r plays ("a", "b", ...).
std::vector<std::string> run_world(const std::vector<std::string>& hosts,
                                   const std::function<std::string(ProcessGroupHierarchical&)>& fn,
                                   dist::ProcessGroupOptions options = quick_options(), bool final_rendezvous = true) {
  return minidl::testing::run_world<ProcessGroupHierarchical>(
      static_cast<int>(hosts.size()),
      [&](dist::TCPStore& store, int rank, int size) {
        // 4 KB slots: tensors of a few thousand floats already take several pieces inside a host.
        return std::make_unique<ProcessGroupHierarchical>(
            store, rank, size, options,
            HierarchicalOptions{.host_id = "host-" + hosts[static_cast<size_t>(rank)], .slot_bytes = 4096});
      },
      fn, final_rendezvous);
}

const std::vector<std::string> kTwoHostsOfTwo{"a", "a", "b", "b"};
const std::vector<std::string> kInterleaved{"a", "b", "a", "b", "c"};  // hosts a: 0, 2; b: 1, 3; c: 4

}  // namespace

TEST(ProcessGroupHierarchical, NumbersHostsByTheirLowestRankAndLeadsEachWithIt) {
  auto results = run_world(kInterleaved, [](ProcessGroupHierarchical& pg) {
    std::string s = std::to_string(pg.num_hosts()) + " hosts; mine " + std::to_string(pg.host()) + ":";
    for (int r : pg.ranks_of_host(pg.host())) s.append(" ").append(std::to_string(r));
    return s;
  });
  EXPECT_EQ(results[0], "3 hosts; mine 0: 0 2");
  EXPECT_EQ(results[1], "3 hosts; mine 1: 1 3");
  EXPECT_EQ(results[2], "3 hosts; mine 0: 0 2");
  EXPECT_EQ(results[3], "3 hosts; mine 1: 1 3");
  EXPECT_EQ(results[4], "3 hosts; mine 2: 4");
}

TEST(ProcessGroupHierarchical, AllReduceSumAvgMaxMinAreExactOnEveryPlacement) {
  for (const auto& hosts : {kTwoHostsOfTwo, kInterleaved}) {
    const int world = static_cast<int>(hosts.size());
    EXPECT_NO_THROW(run_world(hosts, [world](ProcessGroupHierarchical& pg) {
      for (DType dtype : {DType::Float32, DType::Float64, DType::Int64, DType::UInt8})
        for (int64_t n : {0, 1, 1000, 5003})
          for (ReduceOp op : {ReduceOp::SUM, ReduceOp::AVG, ReduceOp::MAX, ReduceOp::MIN}) {
            if (op == ReduceOp::AVG && !minidl::is_floating(dtype)) continue;
            Tensor t = rank_tensor(pg.rank(), n, dtype);
            pg.all_reduce(t, op);
            require_equal(t, expected_reduce(world, n, dtype, op),
                          std::string(dist::reduce_op_name(op)) + " " + minidl::dtype_name(dtype) + "[" +
                              std::to_string(n) + "] on rank " + std::to_string(pg.rank()));
          }
      return std::string();
    })) << hosts.size() << " ranks";
  }
}

TEST(ProcessGroupHierarchical, SumsHostByHostThenAcrossHostsWithTheSameBitsOnEveryRank) {
  // Host a holds 3 and 1e8, host b -1e8 and 3. In float32 (spacing 8 near 1e8) host by host gives
  // (3 + 1e8) + (-1e8 + 3) = 1e8 + -1e8 = 0; a flat rank-order sum would give
  // ((3 + 1e8) + -1e8) + 3 = 3.
  auto results = run_world(kTwoHostsOfTwo, [](ProcessGroupHierarchical& pg) {
    const double mine[] = {3.0, 1e8, -1e8, 3.0};
    Tensor t = minidl::full({2}, mine[pg.rank()]);
    pg.all_reduce(t);
    require_equal(t, minidl::zeros({2}), "(3 + 1e8) + (-1e8 + 3) in float32");
    return std::string();
  });
  for (const auto& r : results) EXPECT_EQ(r, "");
}

TEST(ProcessGroupHierarchical, BroadcastFromEveryRootReachesEveryRank) {
  EXPECT_NO_THROW(run_world(kInterleaved, [](ProcessGroupHierarchical& pg) {
    for (int root = 0; root < pg.size(); ++root)
      for (int64_t n : {0, 3, 3001}) {
        Tensor t = rank_tensor(pg.rank(), n, DType::Float32);
        pg.broadcast(t, root);
        require_equal(t, rank_tensor(root, n, DType::Float32),
                      "broadcast from " + std::to_string(root) + " on rank " + std::to_string(pg.rank()));
      }
    return std::string();
  }));
}

TEST(ProcessGroupHierarchical, AllGatherTakesADifferentNumberOfRowsFromEachRankInRankOrder) {
  EXPECT_NO_THROW(run_world(kInterleaved, [](ProcessGroupHierarchical& pg) {
    // rank r sends r rows of 3 (rank 0 none): rows[r] must be rank r's, whichever host it is on.
    Tensor mine = minidl::full({pg.rank(), 3}, 10.0 * pg.rank() + 1, DType::Int64);
    std::vector<Tensor> rows = pg.all_gather(mine);
    require(static_cast<int>(rows.size()) == pg.size(), "one entry per rank");
    for (int r = 0; r < pg.size(); ++r)
      require_equal(rows[static_cast<size_t>(r)].contiguous(), minidl::full({r, 3}, 10.0 * r + 1, DType::Int64),
                    "rows of rank " + std::to_string(r) + " on rank " + std::to_string(pg.rank()));
    Tensor scalar = minidl::full({}, pg.rank() + 0.5);
    std::vector<Tensor> scalars = pg.all_gather(scalar);
    for (int r = 0; r < pg.size(); ++r)
      require_equal(scalars[static_cast<size_t>(r)], minidl::full({}, r + 0.5), "scalar of rank " + std::to_string(r));
    const std::vector<std::string> names = pg.all_gather_object(std::string(static_cast<size_t>(pg.rank()), 'x'));
    for (int r = 0; r < pg.size(); ++r)
      require(names[static_cast<size_t>(r)] == std::string(static_cast<size_t>(r), 'x'), "object of rank " + std::to_string(r));
    return std::string();
  }));
}

TEST(ProcessGroupHierarchical, ReduceScatterGivesEachRankItsReducedSlabAndBarrierReturns) {
  EXPECT_NO_THROW(run_world(kTwoHostsOfTwo, [](ProcessGroupHierarchical& pg) {
    const int64_t n = 5;
    Tensor input = rank_tensor(pg.rank(), 4 * n, DType::Float32);
    Tensor out = pg.reduce_scatter(input);
    require_equal(out, expected_reduce(4, 4 * n, DType::Float32, ReduceOp::SUM).narrow(0, pg.rank() * n, n).contiguous(),
                  "slab of rank " + std::to_string(pg.rank()));
    pg.barrier();
    return std::string();
  }));
}

TEST(ProcessGroupHierarchical, DDPOnTwoHostsOfTwoRanksMatchesOneProcess) {
  using namespace minidl;
  auto train = [](nn::Module& model, dist::DistributedDataParallel* ddp, int rank, int world) {
    optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
    for (uint64_t s = 0; s < 4; ++s) {
      const int64_t B = 16, local = B / world;
      Tensor x = rand({B, 1, 28, 28}, RandomKey{77, s}).narrow(0, rank * local, local).contiguous();
      Tensor y = randint(0, 10, {B}, RandomKey{78, s}).narrow(0, rank * local, local).contiguous();
      opt.zero_grad();
      Variable out = ddp ? ddp->forward(Variable(x)) : model.forward(Variable(x));
      cross_entropy(out, y).backward();
      if (ddp) {
        ddp->step(opt);
      } else {
        opt.step();
      }
    }
  };
  EXPECT_NO_THROW(run_world(kTwoHostsOfTwo, [&](ProcessGroupHierarchical& pg) {
    manual_seed(0);
    auto reference = nn::make_model("mlp");
    train(*reference, nullptr, 0, 1);
    manual_seed(0);
    auto model = nn::make_model("mlp");
    dist::DistributedDataParallel ddp(*model, {.group = &pg});
    train(*model, &ddp, pg.rank(), pg.size());
    const TensorMap want = reference->state_dict(), got = model->state_dict();
    for (const auto& [name, t] : want) {
      const auto a = got.at(name).to_vector<double>(), b = t.to_vector<double>();
      for (size_t i = 0; i < a.size(); ++i)
        require(std::fabs(a[i] - b[i]) <= 1e-6 + 1e-5 * std::fabs(b[i]), name + " differs from one process");
    }
    return std::string();
  }));
}

TEST(ProcessGroupHierarchical, ARankOfAnotherHostThatExitsFailsEveryRankWithinTheTimeout) {
  // Rank 3 (host b, not a leader) leaves while every rank runs all-reduces: its host's leader
  // fails inside host b, and the ranks of host a through the leaders' Gloo call. With a 4 s
  // timeout every rank must fail well within it, naming the collective, and then fail fast.
  const auto start = std::chrono::steady_clock::now();
  auto results = run_world(
      kTwoHostsOfTwo,
      [](ProcessGroupHierarchical& pg) -> std::string {
        if (pg.rank() == 3)
          std::thread([] {
            std::this_thread::sleep_for(200ms);
            ::_exit(0);
          }).detach();
        Tensor t = minidl::ones({1 << 16});
        const auto t0 = std::chrono::steady_clock::now();
        std::string err;
        while (err.empty() && std::chrono::steady_clock::now() - t0 < 10s) err = error_of([&] { pg.all_reduce(t); });
        const std::string again = error_of([&] { pg.barrier(); });
        return err + "|" + again;
      },
      quick_options(4000ms), /*final_rendezvous=*/false);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 9s);
  EXPECT_EQ(results[3], "");
  for (int r : {0, 1, 2}) {
    const std::string& res = results[static_cast<size_t>(r)];
    EXPECT_THAT(res, HasSubstr("ProcessGroupHierarchical: all_reduce #")) << r;
    EXPECT_THAT(res, HasSubstr("(float32[65536]) failed: ")) << r;
    EXPECT_THAT(res.substr(res.find('|')), HasSubstr("barrier: the process group is broken by an earlier failure")) << r;
  }
  EXPECT_THAT(results[2], HasSubstr("rank 1 (pid ")) << "host b's leader names its local rank 1";
  EXPECT_THAT(results[2], HasSubstr("inside this host, ranks 0, 1 are world ranks 2, 3")) << "and translates it";
}

TEST(ProcessGroupHierarchical, AutoPicksShmOnOneHostGlooForOneRankPerHostElseHierarchical) {
  EXPECT_EQ(dist::auto_backend({"a", "a", "a"}), "shm");
  EXPECT_EQ(dist::auto_backend({"a"}), "shm");
  EXPECT_EQ(dist::auto_backend({"a", "b", "c"}), "gloo");
  EXPECT_EQ(dist::auto_backend({"a", "b", "a"}), "hierarchical");
  EXPECT_TRUE(dist::is_backend_available("hierarchical"));
}

TEST(ProcessGroupHierarchical, InitBuildsItByName) {
  minidl::testing::EnvGuard env;
  auto results = dist::spawn_with_results(2, [&](int) {
    dist::init({.backend = "hierarchical", .timeout = 10s});
    std::string name = dist::default_group().backend_name();
    Tensor t = minidl::full({5}, dist::rank() + 1.0);
    dist::all_reduce(t);
    require_equal(t, minidl::full({5}, 3.0), "all_reduce through dist::");
    dist::shutdown();
    return name;
  });
  EXPECT_EQ(results[0], "hierarchical");
  EXPECT_EQ(results[1], "hierarchical");
}
