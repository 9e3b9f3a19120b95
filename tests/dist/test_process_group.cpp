// tests/dist/test_process_group.cpp — what only ProcessGroupGloo does, with real ranks (forked
// processes on 127.0.0.1): timeouts that name the collective, and debug mode naming the rank
// that differs. Every collective of every CPU group: tests/dist/test_collectives.cpp.
#include <thread>

#include "tests/common/testing.h"
#include "tests/dist/pg_test_util.h"

using namespace std::chrono_literals;
using minidl::Tensor;
using minidl::dist::ProcessGroupGloo;
using minidl::dist::ReduceOp;
using minidl::testing::error_of;
using minidl::testing::quick_options;
using minidl::testing::run_gloo_world;
using ::testing::HasSubstr;

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
