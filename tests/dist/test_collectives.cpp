// tests/dist/test_collectives.cpp — every collective of every CPU process group (Gloo, shared
// memory, hierarchical), one suite over (backend, ranks) with real ranks (forked processes):
// float32/float64/int64/uint8 from 0 elements to far beyond the shared-memory segment, checked
// bit for bit against values computed here; bfloat16/float16 reduced in float32 and rounded once;
// uneven all_gather, reduce_scatter, barrier, async ordering, byte strings, non-contiguous views,
// a world of one, bad arguments. What only one
// backend does (timeouts, dead ranks, segments, debug mode) is tested in its own file.
#include <thread>

#include "minidl/dist/process_group_hierarchical.h"
#include "minidl/dist/process_group_shm.h"
#include "tests/common/testing.h"
#include "tests/dist/pg_test_util.h"

using namespace std::chrono_literals;
using minidl::DType;
using minidl::Tensor;
using minidl::dist::ProcessGroup;
using minidl::dist::ReduceOp;
using minidl::testing::error_of;
using minidl::testing::quick_options;
using minidl::testing::require;
using minidl::testing::expected_reduce;
using minidl::testing::rank_tensor;
using minidl::testing::require_equal;
namespace dist = minidl::dist;

namespace {

const std::vector<DType> kDtypes{DType::Float32, DType::Float64, DType::Int64, DType::UInt8};
// 0, 1, 7: smaller than one shared-memory piece (4 KB slots below); 1000, 3001: around it;
// 100003: 12 segments' worth of float32.
const std::vector<int64_t> kSizes{0, 1, 7, 1000, 3001, 100003};

std::string label(const char* op, DType dtype, int64_t n) {
  return std::string(op) + " " + minidl::dtype_name(dtype) + "[" + std::to_string(n) + "]";
}

// Runs fn on every rank of a world of n ranks of `backend`: small shared-memory slots (4 KB) so
// that modest tensors already take many pieces; hierarchical ranks alternate between two hosts
// (ranks 0, 2 on one, 1 on the other), so a host's ranks are not neighbours.
std::vector<std::string> run_backend(const std::string& backend, int n,
                                     const std::function<std::string(ProcessGroup&)>& fn) {
  return minidl::testing::run_world<ProcessGroup>(
      n,
      [&](dist::TCPStore& store, int rank, int size) -> std::unique_ptr<ProcessGroup> {
        if (backend == "gloo") return std::make_unique<dist::ProcessGroupGloo>(store, rank, size, quick_options());
        if (backend == "shm")
          return std::make_unique<dist::ProcessGroupShm>(store, rank, size, quick_options(),
                                                         dist::ShmOptions{.slot_bytes = 4096});
        return std::make_unique<dist::ProcessGroupHierarchical>(
            store, rank, size, quick_options(),
            dist::HierarchicalOptions{.host_id = rank % 2 == 0 ? "host-a" : "host-b", .slot_bytes = 4096});
      },
      fn);
}

const std::vector<std::string> kBackends{"gloo", "shm", "hierarchical"};

}  // namespace

struct WorldParam {
  std::string backend;
  int ranks;
};

class Collectives : public ::testing::TestWithParam<WorldParam> {
 protected:
  std::vector<std::string> run(const std::function<std::string(ProcessGroup&)>& fn) {
    return run_backend(GetParam().backend, GetParam().ranks, fn);
  }
  int world() const { return GetParam().ranks; }
};

INSTANTIATE_TEST_SUITE_P(Backends, Collectives,
                         ::testing::Values(WorldParam{"gloo", 2}, WorldParam{"gloo", 3}, WorldParam{"shm", 2},
                                           WorldParam{"shm", 3}, WorldParam{"hierarchical", 2},
                                           WorldParam{"hierarchical", 3}),
                         [](const auto& info) { return info.param.backend + "_" + std::to_string(info.param.ranks) + "ranks"; });

TEST_P(Collectives, AllReduceSumAvgMaxMinAreExact) {
  EXPECT_NO_THROW(run([world = world()](ProcessGroup& pg) {
    for (DType dtype : kDtypes)
      for (int64_t n : kSizes)
        for (ReduceOp op : {ReduceOp::SUM, ReduceOp::AVG, ReduceOp::MAX, ReduceOp::MIN}) {
          if (op == ReduceOp::AVG && !minidl::is_floating(dtype)) continue;
          Tensor t = rank_tensor(pg.rank(), n, dtype);
          pg.all_reduce(t, op);
          require_equal(t, expected_reduce(world, n, dtype, op),
                        label(dist::reduce_op_name(op), dtype, n) + " on rank " + std::to_string(pg.rank()));
        }
    return std::string();
  }));
}

// bfloat16 and float16 are reduced in float32 and rounded once. Rank 0 holds 1 and every other
// rank u, half a unit in the last place of 1 (bfloat16 2^-8, float16 2^-11). Rounded once, the sum
// 1 + (world - 1) u is 1 for two ranks (a tie, to even) and 1 + 2u = the next number after 1 for
// three; rounded after each addition from rank 0's 1, every 1 + u ties back to 1 and the sum stays
// 1. Six elements, so that a ring reduces some of them starting from each rank.
TEST_P(Collectives, HalfFloatsAreReducedInFloat32AndRoundedOnce) {
  EXPECT_NO_THROW(run([world = world()](ProcessGroup& pg) {
    for (DType dtype : {DType::BFloat16, DType::Float16}) {
      const double u = dtype == DType::BFloat16 ? 1.0 / 256 : 1.0 / 2048;
      const auto mine = [&] { return minidl::full({6}, pg.rank() == 0 ? 1.0 : u, dtype); };
      const double sum = world == 2 ? 1.0 : 1.0 + 2 * u;
      Tensor t = mine();
      pg.all_reduce(t, ReduceOp::SUM);
      require_equal(t, minidl::full({6}, sum, dtype), label("SUM", dtype, 6));
      Tensor avg = mine();
      pg.all_reduce(avg, ReduceOp::AVG);  // (1 + (world - 1) u) / world in float32, rounded once
      const float mean = (1.0f + static_cast<float>((world - 1) * u)) / static_cast<float>(world);
      require_equal(avg, minidl::full({6}, mean, DType::Float32).to(dtype), label("AVG", dtype, 6));
      Tensor max = mine();
      pg.all_reduce(max, ReduceOp::MAX);
      require_equal(max, minidl::full({6}, 1.0, dtype), label("MAX", dtype, 6));
      const Tensor rows = minidl::full({2 * world, 3}, pg.rank() == 0 ? 1.0 : u, dtype);
      require_equal(pg.reduce_scatter(rows, ReduceOp::SUM), minidl::full({2, 3}, sum, dtype),
                    label("reduce_scatter", dtype, 6 * world));
      // small integers: exact in both dtypes and every order, beyond one shared-memory slot
      Tensor big = rank_tensor(pg.rank(), 3001, dtype);
      pg.all_reduce(big, ReduceOp::SUM);
      require_equal(big, expected_reduce(world, 3001, DType::Float32, ReduceOp::SUM).to(dtype),
                    label("SUM", dtype, 3001));
      // moved, not reduced: the bit patterns themselves
      Tensor b = rank_tensor(pg.rank(), 7, dtype);
      pg.broadcast(b, 1);
      require_equal(b, rank_tensor(1, 7, dtype), label("broadcast", dtype, 7));
      const std::vector<Tensor> gathered = pg.all_gather(rank_tensor(pg.rank(), 5, dtype));
      for (int r = 0; r < world; ++r)
        require_equal(gathered[static_cast<size_t>(r)], rank_tensor(r, 5, dtype), label("all_gather", dtype, 5));
    }
    return std::string();
  }));
}

TEST_P(Collectives, BroadcastFromRootOneReachesEveryRank) {
  EXPECT_NO_THROW(run([](ProcessGroup& pg) {
    for (DType dtype : kDtypes)
      for (int64_t n : kSizes) {
        Tensor t = rank_tensor(pg.rank(), n, dtype);
        pg.broadcast(t, 1);
        require_equal(t, rank_tensor(1, n, dtype), label("broadcast", dtype, n));
      }
    Tensor m = rank_tensor(pg.rank(), 12, DType::Float32).view({3, 4});  // shape kept
    pg.broadcast(m, 1);
    require_equal(m, rank_tensor(1, 12, DType::Float32).view({3, 4}), "broadcast float32[3, 4]");
    return std::string();
  }));
}

TEST_P(Collectives, AllGatherOfEqualSizesConcatenatesInRankOrder) {
  EXPECT_NO_THROW(run([world = world()](ProcessGroup& pg) {
    for (DType dtype : kDtypes)
      for (int64_t n : kSizes) {
        std::vector<Tensor> out = pg.all_gather(rank_tensor(pg.rank(), n, dtype));
        require(static_cast<int>(out.size()) == world, "all_gather returns one tensor per rank");
        for (int r = 0; r < world; ++r)
          require_equal(out[static_cast<size_t>(r)], rank_tensor(r, n, dtype),
                        label("all_gather", dtype, n) + " from rank " + std::to_string(r));
      }
    return std::string();
  }));
}

TEST_P(Collectives, AllGatherTakesADifferentNumberOfRowsFromEachRank) {
  EXPECT_NO_THROW(run([world = world()](ProcessGroup& pg) {
    // Rank r sends (s * r, 3) rows (rank 0 sends none): a few rows, then more than a segment.
    for (int64_t scale : {int64_t{2}, int64_t{2000}}) {
      auto rows = [scale](int r) { return scale * static_cast<int64_t>(r); };
      for (DType dtype : kDtypes) {
        Tensor mine = rank_tensor(pg.rank(), rows(pg.rank()) * 3, dtype, 100).view({rows(pg.rank()), 3});
        std::vector<Tensor> out = pg.all_gather(mine);
        for (int r = 0; r < world; ++r)
          require_equal(out[static_cast<size_t>(r)], rank_tensor(r, rows(r) * 3, dtype, 100).view({rows(r), 3}),
                        label("all_gather (uneven)", dtype, rows(r)));
      }
    }
    std::vector<Tensor> one = pg.all_gather(rank_tensor(pg.rank(), pg.rank() + 1, DType::Float64));
    for (int r = 0; r < world; ++r)
      require_equal(one[static_cast<size_t>(r)], rank_tensor(r, r + 1, DType::Float64), "1-D uneven");
    // A 0-d tensor gathers to 0-d tensors.
    std::vector<Tensor> scalars = pg.all_gather(minidl::scalar_tensor(pg.rank() * 10.0, DType::Float32));
    for (int r = 0; r < world; ++r)
      require_equal(scalars[static_cast<size_t>(r)], minidl::scalar_tensor(r * 10.0, DType::Float32), "0-d");
    return std::string();
  }));
}

TEST_P(Collectives, ReduceScatterGivesEachRankItsReducedSlab) {
  EXPECT_NO_THROW(run([world = world()](ProcessGroup& pg) {
    for (DType dtype : kDtypes)
      for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{3334}}) {  // slab rows
        const int64_t total = n * world;
        Tensor input = rank_tensor(pg.rank(), total * 2, dtype).view({total, 2});
        for (ReduceOp op : {ReduceOp::SUM, ReduceOp::MAX}) {
          Tensor out = pg.reduce_scatter(input, op);
          Tensor all = expected_reduce(world, total * 2, dtype, op).view({total, 2});
          require_equal(out, all.narrow(0, pg.rank() * n, n).contiguous(), label("reduce_scatter", dtype, total));
        }
        require_equal(input, rank_tensor(pg.rank(), total * 2, dtype).view({total, 2}), "input left untouched");
      }
    return std::string();
  }));
}

TEST_P(Collectives, BarrierWaitsForTheLastRank) {
  auto results = run([](ProcessGroup& pg) {
    pg.barrier();  // line everybody up first
    if (pg.rank() == 1) std::this_thread::sleep_for(400ms);
    auto start = std::chrono::steady_clock::now();
    pg.barrier();
    auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    return std::to_string(waited.count());
  });
  for (int r = 0; r < world(); ++r)
    if (r != 1) {
      EXPECT_GE(std::stoll(results[static_cast<size_t>(r)]), 300) << "rank " << r << " left the barrier early";
    }
}

TEST_P(Collectives, AsyncCollectivesRunInIssueOrder) {
  EXPECT_NO_THROW(run([world = world()](ProcessGroup& pg) {
    Tensor a = rank_tensor(pg.rank(), 1000, DType::Float32);
    Tensor b = rank_tensor(pg.rank(), 7, DType::Int64);
    auto wa = pg.all_reduce_async(a);
    auto wb = pg.all_reduce_async(b, ReduceOp::MAX);
    wb->wait();  // waiting out of order is fine: they run in issue order
    require(wa->is_completed(), "the first collective finished before the second");
    wa->wait();
    require(wb->is_completed(), "completed after wait");
    require_equal(a, expected_reduce(world, 1000, DType::Float32, ReduceOp::SUM), "async sum");
    require_equal(b, expected_reduce(world, 7, DType::Int64, ReduceOp::MAX), "async max");
    return std::string();
  }));
}

TEST_P(Collectives, ObjectsOfDifferentLengthsAreGatheredAndBroadcast) {
  EXPECT_NO_THROW(run([world = world()](ProcessGroup& pg) {
    auto payload = [](int r) {
      return r == 0 ? std::string()
                    : std::string(static_cast<size_t>(r * 10000 + 3), static_cast<char>('a' + r)) + '\0' + "end";
    };
    std::vector<std::string> all = pg.all_gather_object(payload(pg.rank()));
    require(static_cast<int>(all.size()) == world, "one string per rank");
    for (int r = 0; r < world; ++r)
      require(all[static_cast<size_t>(r)] == payload(r), "string of rank " + std::to_string(r));
    std::string s = pg.rank() == 1 ? std::string("from rank one\n\x01\xff") : std::string(50, 'x');
    pg.broadcast_object(s, 1);
    require(s == std::string("from rank one\n\x01\xff"), "broadcast_object from rank 1: " + s);
    std::string empty = pg.rank() == 0 ? "" : "junk";
    pg.broadcast_object(empty, 0);
    require(empty.empty(), "an empty string broadcasts as empty");
    return std::string();
  }));
}

TEST_P(Collectives, NonContiguousTensorsAreReducedAndBroadcastInPlace) {
  EXPECT_NO_THROW(run([world = world()](ProcessGroup& pg) {
    Tensor base = rank_tensor(pg.rank(), 12, DType::Float64).view({3, 4});
    Tensor t = base.t();  // (4, 3) view, not contiguous
    pg.all_reduce(t);
    require_equal(base, expected_reduce(world, 12, DType::Float64, ReduceOp::SUM).view({3, 4}), "through the view");
    Tensor b = rank_tensor(pg.rank(), 12, DType::Float64).view({3, 4});
    Tensor bt = b.t();
    pg.broadcast(bt, 0);
    require_equal(b, rank_tensor(0, 12, DType::Float64).view({3, 4}), "broadcast through the view");
    return std::string();
  }));
}

TEST_P(Collectives, BadArgumentsFailBeforeAnyCommunication) {
  EXPECT_NO_THROW(run([world = world()](ProcessGroup& pg) {
    Tensor i = minidl::zeros({3}, DType::Int64);
    std::string err = error_of([&] { pg.all_reduce(i, ReduceOp::AVG); });
    require(err.find("AVG needs a floating dtype") != std::string::npos, err);
    Tensor f = minidl::zeros({3});
    err = error_of([&] { pg.broadcast(f, world); });
    require(err.find("root " + std::to_string(world) + " is not a rank of a world of " + std::to_string(world)) !=
                std::string::npos,
            err);
    err = error_of([&] { pg.reduce_scatter(minidl::zeros({7})); });  // 7 rows over 2 or 3 ranks
    require(err.find("divisible by the world size") != std::string::npos, "indivisible input: " + err);
    pg.all_reduce(f);  // nothing was issued: the group still works, in step on every rank
    require_equal(f, minidl::zeros({3}), "the group still works");
    return std::string();
  }));
}

TEST(CollectivesWorldOfOne, IsTheIdentityOnEveryBackend) {
  for (const std::string& backend : kBackends)
    EXPECT_NO_THROW(run_backend(backend, 1, [](ProcessGroup& pg) {
      Tensor t = rank_tensor(0, 7, DType::Float32);
      pg.all_reduce(t, ReduceOp::AVG);
      require_equal(t, rank_tensor(0, 7, DType::Float32), "all_reduce");
      require(pg.all_gather_object("solo") == std::vector<std::string>{"solo"}, "all_gather_object");
      pg.barrier();
      return std::string();
    })) << backend;
}
