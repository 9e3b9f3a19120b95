// tests/dist/test_trace.cpp — tracing a data-parallel step (autograd/trace.h, dist/trace_file.h):
// on two Gloo ranks, one all-reduce span per DDP bucket, each on a track of its own, launched
// during backward, run on the communication thread; the wait and the optimizer step; one file
// with both ranks.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "minidl/autograd/trace.h"
#include "minidl/dist/ddp.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/spawn.h"
#include "minidl/dist/trace_file.h"
#include "minidl/nn/nn_all.h"
#include "minidl/optim/optim_all.h"
#include "tests/common/testing.h"
#include "tests/dist/dist_test_util.h"

using namespace minidl;
namespace trace = minidl::autograd::trace;

namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// One traced DDP step of an MLP with ~100-byte buckets (5: one per parameter, but the last two) on this rank.
size_t traced_step() {
  manual_seed(0);
  nn::MLP model;
  dist::DistributedDataParallel ddp(model, {.bucket_cap_mb = 1e-4, .first_bucket_cap_mb = 1e-4});
  optim::SGD opt(model.parameters(), {.lr = 0.1});
  const Tensor x = rand({4, 1, 28, 28}, RandomKey{9, static_cast<uint64_t>(dist::rank())});
  const Tensor y = randint(0, 10, {4}, RandomKey{10, static_cast<uint64_t>(dist::rank())});
  trace::clear();
  trace::enable(true);
  opt.zero_grad();
  cross_entropy(ddp(Variable(x)), y).backward();
  ddp.step(opt);
  trace::enable(false);
  return ddp.num_buckets();
}

}  // namespace

TEST(DDPTrace, OneAllReduceSpanPerBucketOnItsOwnTrackLaunchedDuringBackward) {
  dist::spawn(2, [](int) {
    dist::init({.backend = "gloo", .timeout = std::chrono::seconds(30)});
    const size_t buckets = traced_step();
    require(buckets == 5, "5 buckets, got " + std::to_string(buckets));
    const auto all = trace::events();
    std::map<int, std::string> names;
    for (const auto& t : trace::tracks()) names[t.tid] = t.name;
    int main_tid = -1;
    for (const auto& [tid, name] : names)
      if (name == "main") main_tid = tid;
    require(main_tid >= 0, "a main track");

    int64_t first_backward = -1, last_backward_end = 0;
    std::vector<trace::Event> bucket_spans, comm_spans, launches;
    int waits = 0, optimizer = 0;
    for (const auto& e : all) {
      const std::string cat = e.cat;
      if (cat == trace::kBackward) {
        if (first_backward < 0 || e.ts_ns < first_backward) first_backward = e.ts_ns;
        last_backward_end = std::max(last_backward_end, e.ts_ns + e.dur_ns);
      }
      if (cat == trace::kAllReduce && e.ph == 'X') bucket_spans.push_back(e);
      if (cat == trace::kAllReduce && e.ph == 'i') launches.push_back(e);
      if (cat == trace::kComm && e.name.find("DDP bucket") != std::string::npos) comm_spans.push_back(e);
      if (cat == trace::kWait && e.name == "DDP wait") ++waits;
      if (cat == trace::kOptimizer) ++optimizer;
    }
    require(bucket_spans.size() == buckets, "one all-reduce span per bucket, got " + std::to_string(bucket_spans.size()));
    require(comm_spans.size() == buckets, "one communication-thread span per bucket");
    require(launches.size() == buckets, "one launch instant per bucket");
    std::set<int> bucket_tracks;
    for (const auto& b : bucket_spans) {
      bucket_tracks.insert(b.tid);
      require(b.tid != main_tid, b.name + " is not on the main track");
      require(names[b.tid] + " all-reduce" == b.name, b.name + " is on its own track, got " + names[b.tid]);
      require(b.ts_ns >= first_backward, b.name + " starts after backward began");
      require(b.ts_ns <= last_backward_end, b.name + " is launched before backward ends");
      require(b.dur_ns > 0, b.name + " has a positive duration");
    }
    require(bucket_tracks.size() == buckets, "a track per bucket");
    const int comm_tid = comm_spans.front().tid;
    for (const auto& c : comm_spans) {
      require(c.tid == comm_tid && c.tid != main_tid, "collectives run on one communication thread");
      require(names[c.tid] == "communication", "the communication thread is named");
    }
    for (const auto& l : launches) require(l.tid == main_tid, "buckets are launched from the main thread");
    require(waits == static_cast<int>(buckets), "DDP waits once per bucket, got " + std::to_string(waits));
    require(optimizer == 1, "one optimizer step");
    dist::shutdown();
  });
}

TEST(DDPTrace, WriteTraceGathersBothRanksIntoOneFileOnRankZero) {
  minidl::testing::TempDir dir;
  const std::string path = dir.path() + "/trace.json";
  dist::spawn(2, [&](int) {
    dist::init({.backend = "gloo", .timeout = std::chrono::seconds(30)});
    traced_step();
    dist::write_trace(path);
    require(trace::events().empty(), "write_trace clears this rank's events");
    dist::shutdown();
  });
  std::ifstream f(path);
  ASSERT_TRUE(f) << path;
  std::stringstream text;
  text << f.rdbuf();
  const nlohmann::json doc = nlohmann::json::parse(text.str());
  std::map<int, std::set<std::string>> cats;
  std::map<int, std::string> process;
  for (const auto& e : doc.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "process_name") process[e.at("pid")] = e.at("args").at("name");
    if (e.at("ph") == "X") cats[e.at("pid")].insert(e.at("cat").get<std::string>());
  }
  EXPECT_EQ(process, (std::map<int, std::string>{{0, "rank 0"}, {1, "rank 1"}}));
  const std::set<std::string> expected{"forward", "backward", "allreduce", "comm", "wait", "optimizer"};
  for (int r : {0, 1}) EXPECT_EQ(cats[r], expected) << "rank " << r;
}
