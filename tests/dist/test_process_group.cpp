// tests/dist/test_process_group.cpp — ProcessGroupGloo with real ranks (forked processes on
// 127.0.0.1): every collective with 2 and 3 ranks, float32/float64/int64, 0, 1, 7 and 1000
// elements, checked bit for bit against values computed here; async ordering; byte-string
// collectives; timeouts that name the collective; debug mode naming the rank that differs.
#include <thread>

#include "tests/common/testing.h"
#include "tests/dist/pg_test_util.h"

using namespace std::chrono_literals;
using minidl::DType;
using minidl::Shape;
using minidl::Tensor;
using minidl::dist::ProcessGroupGloo;
using minidl::dist::ReduceOp;
using minidl::testing::error_of;
using minidl::testing::quick_options;
using minidl::testing::require;
using minidl::testing::require_equal;
using minidl::testing::run_gloo_world;
using ::testing::HasSubstr;

namespace {

const std::vector<DType> kDtypes{DType::Float32, DType::Float64, DType::Int64};
const std::vector<int64_t> kSizes{0, 1, 7, 1000};

// Rank r's element i: small integers, exact in every dtype.
double value(int r, int64_t i) { return static_cast<double>((i * 7 + r * 13) % 23 - 11); }

Tensor rank_tensor(int r, int64_t n, DType dtype, int64_t salt = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = value(r, i + salt);
  return minidl::from_vector(v, {n}, dtype);
}

// What every rank should hold after all_reduce(op) over ranks 0..world-1.
Tensor expected_reduce(int world, int64_t n, DType dtype, ReduceOp op) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double acc = value(0, i);
    for (int r = 1; r < world; ++r) {
      double x = value(r, i);
      acc = op == ReduceOp::MAX ? std::max(acc, x) : op == ReduceOp::MIN ? std::min(acc, x) : acc + x;
    }
    if (op == ReduceOp::AVG)  // sum, then divide in the dtype's own arithmetic
      acc = dtype == DType::Float32 ? static_cast<double>(static_cast<float>(acc) / static_cast<float>(world))
                                    : acc / world;
    v[static_cast<size_t>(i)] = acc;
  }
  return minidl::from_vector(v, {n}, dtype);
}

std::string label(const char* op, DType dtype, int64_t n) {
  return std::string(op) + " " + minidl::dtype_name(dtype) + "[" + std::to_string(n) + "]";
}

}  // namespace

class ProcessGroupGlooWorld : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Ranks, ProcessGroupGlooWorld, ::testing::Values(2, 3),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

TEST_P(ProcessGroupGlooWorld, AllReduceSumAvgMaxMinAreExact) {
  const int world = GetParam();
  EXPECT_NO_THROW(run_gloo_world(world, [world](ProcessGroupGloo& pg) {
    for (DType dtype : kDtypes)
      for (int64_t n : kSizes)
        for (ReduceOp op : {ReduceOp::SUM, ReduceOp::AVG, ReduceOp::MAX, ReduceOp::MIN}) {
          if (op == ReduceOp::AVG && dtype == DType::Int64) continue;
          Tensor t = rank_tensor(pg.rank(), n, dtype);
          pg.all_reduce(t, op);
          require_equal(t, expected_reduce(world, n, dtype, op),
                        label(minidl::dist::reduce_op_name(op), dtype, n) + " on rank " + std::to_string(pg.rank()));
        }
    return std::string();
  }));
}

TEST_P(ProcessGroupGlooWorld, BroadcastFromRootOneReachesEveryRank) {
  const int world = GetParam();
  EXPECT_NO_THROW(run_gloo_world(world, [](ProcessGroupGloo& pg) {
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

TEST_P(ProcessGroupGlooWorld, AllGatherOfEqualSizesConcatenatesInRankOrder) {
  const int world = GetParam();
  EXPECT_NO_THROW(run_gloo_world(world, [world](ProcessGroupGloo& pg) {
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

TEST_P(ProcessGroupGlooWorld, AllGatherTakesADifferentNumberOfRowsFromEachRank) {
  const int world = GetParam();
  EXPECT_NO_THROW(run_gloo_world(world, [world](ProcessGroupGloo& pg) {
    // Rank r sends (2r, 3) rows (rank 0 sends none); then (r + 1) scalars' worth of 1-D data.
    auto rows = [](int r) { return 2 * static_cast<int64_t>(r); };
    for (DType dtype : kDtypes) {
      Tensor mine = rank_tensor(pg.rank(), rows(pg.rank()) * 3, dtype, 100).view({rows(pg.rank()), 3});
      std::vector<Tensor> out = pg.all_gather(mine);
      for (int r = 0; r < world; ++r)
        require_equal(out[static_cast<size_t>(r)], rank_tensor(r, rows(r) * 3, dtype, 100).view({rows(r), 3}),
                      label("all_gather (uneven)", dtype, rows(r)));
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

TEST_P(ProcessGroupGlooWorld, ReduceScatterGivesEachRankItsReducedSlab) {
  const int world = GetParam();
  EXPECT_NO_THROW(run_gloo_world(world, [world](ProcessGroupGloo& pg) {
    for (DType dtype : kDtypes)
      for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{334}}) {  // slab rows; 7 * world elements etc.
        const int64_t total = n * world;
        Tensor input = rank_tensor(pg.rank(), total * 2, dtype).view({total, 2});
        for (ReduceOp op : {ReduceOp::SUM, ReduceOp::MAX}) {
          Tensor out = pg.reduce_scatter(input, op);
          Tensor all = expected_reduce(world, total * 2, dtype, op).view({total, 2});
          require_equal(out, all.narrow(0, pg.rank() * n, n).contiguous(), label("reduce_scatter", dtype, total));
        }
        require_equal(input, rank_tensor(pg.rank(), total * 2, dtype).view({total, 2}), "input left untouched");
      }
    // (7, ...) cannot be split over 2 or 3 ranks.
    std::string err = error_of([&] { pg.reduce_scatter(minidl::zeros({7})); });
    require(err.find("divisible by the world size") != std::string::npos, "indivisible input: " + err);
    return std::string();
  }));
}

TEST_P(ProcessGroupGlooWorld, BarrierWaitsForTheLastRank) {
  const int world = GetParam();
  auto results = run_gloo_world(world, [](ProcessGroupGloo& pg) {
    pg.barrier();  // line everybody up first
    if (pg.rank() == 1) std::this_thread::sleep_for(400ms);
    auto start = std::chrono::steady_clock::now();
    pg.barrier();
    auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    return std::to_string(waited.count());
  });
  for (int r = 0; r < world; ++r)
    if (r != 1) {
      EXPECT_GE(std::stoll(results[static_cast<size_t>(r)]), 300) << "rank " << r << " left the barrier early";
    }
}

TEST_P(ProcessGroupGlooWorld, AsyncCollectivesRunInIssueOrder) {
  const int world = GetParam();
  EXPECT_NO_THROW(run_gloo_world(world, [world](ProcessGroupGloo& pg) {
    Tensor a = rank_tensor(pg.rank(), 1000, DType::Float32);
    Tensor b = rank_tensor(pg.rank(), 7, DType::Int64);
    auto wa = pg.all_reduce_async(a);
    auto wb = pg.all_reduce_async(b, ReduceOp::MAX);
    wb->wait();  // waiting out of order is fine: the thread runs them in issue order
    require(wa->is_completed(), "the first collective finished before the second");
    wa->wait();
    require(wb->is_completed(), "completed after wait");
    require_equal(a, expected_reduce(world, 1000, DType::Float32, ReduceOp::SUM), "async sum");
    require_equal(b, expected_reduce(world, 7, DType::Int64, ReduceOp::MAX), "async max");
    require(pg.sequence_number() == 2, "two collectives numbered");
    return std::string();
  }));
}

TEST_P(ProcessGroupGlooWorld, ObjectsOfDifferentLengthsAreGatheredAndBroadcast) {
  const int world = GetParam();
  EXPECT_NO_THROW(run_gloo_world(world, [world](ProcessGroupGloo& pg) {
    auto payload = [](int r) {
      return r == 0 ? std::string()
                    : std::string(static_cast<size_t>(r * 1000 + 3), static_cast<char>('a' + r)) + '\0' + "end";
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

TEST(ProcessGroupGloo, NonContiguousTensorsAreReducedInPlace) {
  EXPECT_NO_THROW(run_gloo_world(2, [](ProcessGroupGloo& pg) {
    Tensor base = rank_tensor(pg.rank(), 12, DType::Float64).view({3, 4});
    Tensor t = base.t();  // (4, 3) view, not contiguous
    pg.all_reduce(t);
    require_equal(base, expected_reduce(2, 12, DType::Float64, ReduceOp::SUM).view({3, 4}), "through the view");
    return std::string();
  }));
}

TEST(ProcessGroupGloo, AWorldOfOneIsTheIdentity) {
  EXPECT_NO_THROW(run_gloo_world(1, [](ProcessGroupGloo& pg) {
    Tensor t = rank_tensor(0, 7, DType::Float32);
    pg.all_reduce(t, ReduceOp::AVG);
    require_equal(t, rank_tensor(0, 7, DType::Float32), "all_reduce");
    require(pg.all_gather_object("solo") == std::vector<std::string>{"solo"}, "all_gather_object");
    pg.barrier();
    return std::string();
  }));
}

TEST(ProcessGroupGloo, BadArgumentsFailBeforeAnyCommunication) {
  EXPECT_NO_THROW(run_gloo_world(2, [](ProcessGroupGloo& pg) {
    Tensor i = minidl::zeros({3}, DType::Int64);
    std::string err = error_of([&] { pg.all_reduce(i, ReduceOp::AVG); });
    require(err.find("AVG needs a floating dtype") != std::string::npos, err);
    Tensor f = minidl::zeros({3});
    err = error_of([&] { pg.broadcast(f, 2); });
    require(err.find("root 2 is not a rank of a world of 2") != std::string::npos, err);
    require(pg.sequence_number() == 0 && !pg.is_broken(), "nothing was issued");
    pg.all_reduce(f);  // the group still works
    return std::string();
  }));
}

TEST(ProcessGroupGloo, ARankThatSkipsACollectiveMakesTheOthersTimeOutNamingIt) {
  // Rank 1 skips collective #2 and stays alive past the timeout; ranks 0 and 2 must fail within
  // it with a message naming the collective, its number and the timeout, and then fail fast.
  auto start = std::chrono::steady_clock::now();
  auto results = run_gloo_world(
      3,
      [](ProcessGroupGloo& pg) -> std::string {
        Tensor t = minidl::ones({4});
        pg.all_reduce(t);  // #1, everybody
        if (pg.rank() == 1) {
          std::this_thread::sleep_for(2500ms);
          return "skipped";
        }
        auto t0 = std::chrono::steady_clock::now();
        std::string err = error_of([&] { pg.all_reduce(t); });  // #2
        auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
        std::string again = error_of([&] { pg.barrier(); });
        return err + "|" + std::to_string(waited.count()) + "|" + again;
      },
      quick_options(1000ms));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 8s);
  EXPECT_EQ(results[1], "skipped");
  for (int r : {0, 2}) {
    const std::string& res = results[static_cast<size_t>(r)];
    EXPECT_THAT(res, HasSubstr("all_reduce #2 (float32[4]) timed out after 1000 ms: a rank did not arrive")) << r;
    long long waited = std::stoll(res.substr(res.find('|') + 1));
    EXPECT_GE(waited, 900) << "rank " << r;
    EXPECT_LT(waited, 2400) << "rank " << r << " waited longer than the timeout allows";
    EXPECT_THAT(res.substr(res.rfind('|')), HasSubstr("barrier: the process group is broken by an earlier failure"));
  }
}

TEST(ProcessGroupGloo, DebugModeNamesTheFirstRankThatCallsADifferentCollective) {
  auto start = std::chrono::steady_clock::now();
  auto results = run_gloo_world(
      3,
      [](ProcessGroupGloo& pg) {
        Tensor t = minidl::ones({4});
        pg.all_reduce(t);  // #1 agrees
        return error_of([&] {
          if (pg.rank() == 2)
            pg.broadcast(t, 0);  // #2 differs on rank 2
          else
            pg.all_reduce(t);
        });
      },
      quick_options(5000ms, true));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 4s) << "debug mode must fail fast, not time out";
  for (const std::string& err : results)
    EXPECT_EQ(err,
              "MINIDL_DIST_DEBUG: collective #2 mismatch: rank 0 called all_reduce float32[4] op=sum, "
              "rank 2 called broadcast float32[4] root=0");
}

TEST(ProcessGroupGloo, DebugModeFromTheEnvironmentComparesShapesAndReduceOps) {
  // #1: the shapes differ (same op); #2 (a fresh group): the same shape, SUM on rank 0 but MAX on
  // rank 1, which Gloo would run without complaint and give each rank a different answer.
  ::setenv("MINIDL_DIST_DEBUG", "1", 1);  // read by the children's groups (options.debug unset)
  auto shapes = run_gloo_world(
      2,
      [](ProcessGroupGloo& pg) {
        Tensor t = minidl::ones({pg.rank() == 0 ? 4 : 5});
        return error_of([&] { pg.all_reduce(t, ReduceOp::SUM); });
      },
      quick_options(5000ms, std::nullopt));
  auto ops = run_gloo_world(
      2,
      [](ProcessGroupGloo& pg) {
        Tensor t = minidl::ones({4});
        pg.all_reduce(t, ReduceOp::MAX);  // #1 agrees
        return error_of([&] { pg.all_reduce(t, pg.rank() == 0 ? ReduceOp::SUM : ReduceOp::MAX); });
      },
      quick_options(5000ms, std::nullopt));
  ::unsetenv("MINIDL_DIST_DEBUG");
  for (const std::string& err : shapes)
    EXPECT_EQ(err,
              "MINIDL_DIST_DEBUG: collective #1 mismatch: rank 0 called all_reduce float32[4] op=sum, "
              "rank 1 called all_reduce float32[5] op=sum");
  for (const std::string& err : ops)
    EXPECT_EQ(err,
              "MINIDL_DIST_DEBUG: collective #2 mismatch: rank 0 called all_reduce float32[4] op=sum, "
              "rank 1 called all_reduce float32[4] op=max");
}

TEST(ProcessGroupGloo, DebugModeNamesARankThatNeverArrives) {
  auto results = run_gloo_world(
      2,
      [](ProcessGroupGloo& pg) -> std::string {
        if (pg.rank() == 1) {
          std::this_thread::sleep_for(1500ms);
          return "";
        }
        Tensor t = minidl::ones({2});
        return error_of([&] { pg.all_reduce(t); });
      },
      quick_options(700ms, true));
  EXPECT_THAT(
      results[0],
      HasSubstr(
          "MINIDL_DIST_DEBUG: collective #1 (all_reduce float32[2] op=sum): rank 1 did not arrive within 700 ms"));
}
