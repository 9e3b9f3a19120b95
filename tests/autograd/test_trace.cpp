// tests/autograd/test_trace.cpp — the timeline tracer (autograd/trace.h): nothing recorded when
// off; each op's forward and backward as spans in order when on; collectives handed to another
// thread; the JSON writer.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <thread>

#include "minidl/autograd/ops.h"
#include "minidl/autograd/profiler.h"
#include "minidl/autograd/trace.h"
#include "minidl/tensor/tensor_all.h"

using namespace minidl;
namespace trace = minidl::autograd::trace;

namespace {

// loss = sum(relu(x @ w)): three ops forward (Matmul, Relu, Sum), three nodes backward.
void small_step() {
  Variable x(rand({4, 3}, RandomKey{1, 0}), true);
  Variable w(rand({3, 2}, RandomKey{1, 1}), true);
  Variable loss = sum(relu(matmul(x, w)));
  loss.backward();
}

std::vector<trace::Event> with_cat(const std::vector<trace::Event>& all, const std::string& cat) {
  std::vector<trace::Event> out;
  for (const auto& e : all)
    if (e.cat == cat) out.push_back(e);
  return out;
}

// Clears the tracer before and after each test: it is process-wide.
class Trace : public ::testing::Test {
 protected:
  void SetUp() override {
    trace::enable(false);
    trace::clear();
  }
  void TearDown() override {
    trace::enable(false);
    trace::clear();
  }
};

}  // namespace

TEST_F(Trace, OffRecordsNothing) {
  small_step();
  { const trace::Span s("not recorded", trace::kOptimizer); }
  trace::Collective::launch("all_reduce #1").run([] {});
  EXPECT_TRUE(trace::events().empty());
}

TEST_F(Trace, OnRecordsEachOpsForwardAndBackwardInOrder) {
  trace::enable(true);
  small_step();
  trace::enable(false);
  const auto all = trace::events();
  const auto fwd = with_cat(all, trace::kForward), bwd = with_cat(all, trace::kBackward);
  std::vector<std::string> fwd_names, bwd_names;
  for (const auto& e : fwd) fwd_names.push_back(e.name);
  for (const auto& e : bwd)
    if (e.name != "AccumulateGrad") bwd_names.push_back(e.name);
  EXPECT_EQ(fwd_names, (std::vector<std::string>{"Matmul", "Relu", "Sum"}));
  EXPECT_EQ(bwd_names, (std::vector<std::string>{"SumBackward", "ReluBackward", "MatmulBackward"}));
  EXPECT_EQ(std::count_if(bwd.begin(), bwd.end(), [](const auto& e) { return e.name == "AccumulateGrad"; }), 2)
      << "one per leaf (x and w)";
  for (const auto& e : fwd) EXPECT_GT(e.dur_ns, 0) << e.name;
  for (const auto& e : bwd) EXPECT_GT(e.dur_ns, 0) << e.name;
  // one track, one after the other: every span starts where or after the previous one ended
  std::vector<trace::Event> main = fwd;
  main.insert(main.end(), bwd.begin(), bwd.end());
  for (size_t i = 1; i < main.size(); ++i) {
    EXPECT_EQ(main[i].tid, main[0].tid);
    EXPECT_GE(main[i].ts_ns, main[i - 1].ts_ns + main[i - 1].dur_ns) << main[i - 1].name << " then " << main[i].name;
  }
}

TEST_F(Trace, AForwardOpStartsAfterTheSpanBeforeIt) {
  trace::enable(true);
  { const trace::Span s("next batch", trace::kData); }
  Variable x(rand({4, 3}, RandomKey{2, 0}), true);
  Variable y = relu(x);
  trace::enable(false);
  const auto all = trace::events();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].name, "next batch");
  EXPECT_EQ(all[1].name, "Relu");
  EXPECT_GE(all[1].ts_ns, all[0].ts_ns + all[0].dur_ns);
}

TEST_F(Trace, ProfilerScopeFeedsTheTableAndTheTrace) {
  autograd::profiler::reset();
  autograd::profiler::enable(true);
  trace::enable(true);
  { const autograd::profiler::Scope s("optimizer step", trace::kOptimizer); }
  trace::enable(false);
  autograd::profiler::enable(false);
  const auto records = autograd::profiler::records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].name, "optimizer step");
  EXPECT_EQ(records[0].forward_calls, 1);
  const auto all = trace::events();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_STREQ(all[0].cat, trace::kOptimizer);
  autograd::profiler::reset();
}

TEST_F(Trace, ALabelledCollectiveRunsOnItsThreadAndSpansLaunchToCompletionOnItsTrack) {
  trace::enable(true);
  trace::Collective c;
  const int64_t before = trace::now_ns();
  {
    const trace::CollectiveLabel label("DDP bucket", 3);
    c = trace::Collective::launch("all_reduce #7 (float32[10])");
  }
  const trace::Collective unlabelled = trace::Collective::launch("broadcast #8");
  std::thread comm([&] {
    c.run([] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); });
    trace::Collective u = unlabelled;
    u.run([] {});
  });
  comm.join();
  trace::enable(false);
  const auto all = trace::events();
  const auto comm_spans = with_cat(all, trace::kComm), reduce = with_cat(all, trace::kAllReduce);
  ASSERT_EQ(comm_spans.size(), 2u);
  EXPECT_EQ(comm_spans[0].name, "DDP bucket 3: all_reduce #7 (float32[10])");
  EXPECT_EQ(comm_spans[1].name, "broadcast #8");
  ASSERT_EQ(reduce.size(), 2u);  // the launch instant and the bucket's span
  const auto launch = std::find_if(reduce.begin(), reduce.end(), [](const auto& e) { return e.ph == 'i'; });
  const auto bucket = std::find_if(reduce.begin(), reduce.end(), [](const auto& e) { return e.ph == 'X'; });
  ASSERT_NE(launch, reduce.end());
  ASSERT_NE(bucket, reduce.end());
  EXPECT_EQ(launch->name, "launch DDP bucket 3");
  EXPECT_EQ(bucket->name, "DDP bucket 3 all-reduce");
  EXPECT_EQ(bucket->tid, trace::track("DDP bucket 3"));
  EXPECT_NE(bucket->tid, comm_spans[0].tid);
  EXPECT_NE(launch->tid, comm_spans[0].tid);  // launched on this thread, run on the other
  EXPECT_GE(bucket->ts_ns, before);
  EXPECT_EQ(bucket->ts_ns, launch->ts_ns);
  EXPECT_GE(bucket->ts_ns + bucket->dur_ns, comm_spans[0].ts_ns + comm_spans[0].dur_ns);  // ends when the run ends
  EXPECT_GE(comm_spans[0].dur_ns, 2'000'000);
  const auto tracks = trace::tracks();
  const auto named = [&](int tid) {
    for (const auto& t : tracks)
      if (t.tid == tid) return t.name;
    return std::string("?");
  };
  EXPECT_EQ(named(comm_spans[0].tid), "communication");
  EXPECT_EQ(named(launch->tid), "main");
  EXPECT_EQ(named(bucket->tid), "DDP bucket 3");
}

TEST(TraceJson, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(trace::escape_json("plain"), "plain");
  EXPECT_EQ(trace::escape_json("a\"b\\c\nd\te\x01"), "a\\\"b\\\\c\\nd\\te\\u0001");
}

TEST_F(Trace, TheDocumentIsValidJsonWithEscapedNames) {
  trace::enable(true);
  trace::span("say \"hi\"\\\n", trace::kStep, 1'000'000, 3'500'250);
  trace::instant("launch", trace::kAllReduce, 2'000'000);
  trace::enable(false);
  const nlohmann::json doc = nlohmann::json::parse(trace::document({trace::events_json(1, "rank \"1\"")}));
  const auto& ev = doc.at("traceEvents");
  bool span = false, instant = false, process = false, thread = false;
  for (const auto& e : ev) {
    EXPECT_EQ(e.at("pid"), 1);
    if (e.at("ph") == "X") {
      span = true;
      EXPECT_EQ(e.at("name"), "say \"hi\"\\\n");
      EXPECT_EQ(e.at("cat"), "step");
      EXPECT_DOUBLE_EQ(e.at("ts").get<double>(), 1000.0);  // microseconds
      EXPECT_DOUBLE_EQ(e.at("dur").get<double>(), 2500.25);
    } else if (e.at("ph") == "i") {
      instant = true;
      EXPECT_DOUBLE_EQ(e.at("ts").get<double>(), 2000.0);
    } else if (e.at("name") == "process_name") {
      process = true;
      EXPECT_EQ(e.at("args").at("name"), "rank \"1\"");
    } else if (e.at("name") == "thread_name" && e.at("args").at("name") == "main") {
      thread = true;
    }
  }
  EXPECT_TRUE(span && instant && process && thread);
}
