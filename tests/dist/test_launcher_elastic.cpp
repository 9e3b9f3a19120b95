// tests/dist/test_launcher_elastic.cpp — minidl-run --nnodes MIN:MAX: the membership rules as
// pure functions (tools/elastic_membership.h: who is in the next round, in which order, the MIN
// check, newcomers admitted up to MAX, when a rendezvous closes), then two launchers on this
// machine: node 1's launcher is killed and node 0 goes on alone; a launcher started late is
// admitted by a restart that does not count; losing node 0, the store's host, ends the run.
// Workers are /bin/sh scripts.
#include <csignal>
#include <thread>

#include "minidl/dist/socket.h"
#include "tests/common/testing.h"
#include "tests/dist/dist_test_util.h"
#include "tools/elastic_membership.h"

using namespace std::chrono_literals;
using minidl::launcher::admit_now;
using minidl::launcher::name_nodes;
using minidl::launcher::next_round;
using minidl::launcher::rendezvous_closes;
using minidl::testing::exit_code;
using minidl::testing::launcher_path;
using minidl::testing::start_process;
using minidl::testing::Subprocess;
using minidl::testing::wait_process;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(ElasticMembership, TheFirstRoundTakesEveryoneInIdOrder) {
  const auto r = next_round({}, {2, 0, 1}, 1, 4);
  EXPECT_THAT(r.members, ElementsAre(0, 1, 2));
  EXPECT_THAT(r.joined, ElementsAre(0, 1, 2));
  EXPECT_THAT(r.left, IsEmpty());
  EXPECT_EQ(r.error, "");
}

TEST(ElasticMembership, ALostNodeLeavesAndTheOthersCloseUp) {
  // nodes 0, 1, 2 had node ranks 0, 1, 2; node 1 is gone: node 2 becomes node rank 1
  const auto r = next_round({0, 1, 2}, {2, 0}, 1, 3);
  EXPECT_THAT(r.members, ElementsAre(0, 2));
  EXPECT_THAT(r.left, ElementsAre(1));
  EXPECT_THAT(r.joined, IsEmpty());
  EXPECT_EQ(r.error, "");
}

TEST(ElasticMembership, FewerThanMinEndsTheRunNamingWhoIsLeft) {
  const auto r = next_round({0, 1, 2}, {0, 2}, 3, 4);
  EXPECT_THAT(r.members, ElementsAre(0, 2));
  EXPECT_EQ(r.error, "2 nodes left (nodes 0 and 2), fewer than the minimum 3 (--nnodes 3:4)");
  EXPECT_EQ(next_round({0, 1}, {0}, 2, 2).error, "1 node left (node 0), fewer than the minimum 2 (--nnodes 2:2)");
}

TEST(ElasticMembership, ALateJoinerComesAfterTheMembersItFinds) {
  // the members keep their node ranks; the newcomer (even with a smaller id) goes last
  const auto r = next_round({0, 3}, {0, 1, 3}, 1, 4);
  EXPECT_THAT(r.members, ElementsAre(0, 3, 1));
  EXPECT_THAT(r.joined, ElementsAre(1));
  EXPECT_THAT(r.left, IsEmpty());
}

TEST(ElasticMembership, NewcomersOverMaxWait) {
  const auto r = next_round({0, 1}, {0, 1, 2, 3}, 1, 3);
  EXPECT_THAT(r.members, ElementsAre(0, 1, 2));
  EXPECT_THAT(r.joined, ElementsAre(2));
  EXPECT_THAT(r.waiting, ElementsAre(3));
  // a running round at MAX is not ended for a newcomer; below MAX it is
  EXPECT_FALSE(admit_now(3, 1, 3));
  EXPECT_TRUE(admit_now(2, 1, 3));
  EXPECT_FALSE(admit_now(2, 0, 3));
}

TEST(ElasticMembership, ARendezvousClosesAtMaxAtOnceOrAfterTheLastCallFromMin) {
  EXPECT_TRUE(rendezvous_closes(4, 1, 4, 0ms, 30s));  // MAX: at once
  EXPECT_FALSE(rendezvous_closes(2, 1, 4, 29s, 30s));  // MIN reached 29 s ago: wait
  EXPECT_TRUE(rendezvous_closes(2, 1, 4, 30s, 30s));  // the last call is over
  EXPECT_FALSE(rendezvous_closes(1, 2, 4, 3600s, 30s));  // below MIN: never
  EXPECT_TRUE(rendezvous_closes(2, 2, 2, 0ms, 30s));  // a fixed size N:N closes when all N are there
}

TEST(ElasticMembership, NamesNodes) {
  EXPECT_EQ(name_nodes({0}), "node 0");
  EXPECT_EQ(name_nodes({0, 2}), "nodes 0 and 2");
  EXPECT_EQ(name_nodes({0, 1, 3}), "nodes 0, 1 and 3");
}

namespace {

// A launcher for node `id` of an elastic 1:2 run of 2 workers per node on `port`. Its TMPDIR is a
// directory of this test's, so what a launcher killed here leaves behind is removed with it.
Subprocess elastic_node(const std::string& port, const std::string& id, const std::string& script,
                        const std::string& restarts = "1") {
  static const minidl::testing::TempDir tmp;
  return start_process({launcher_path(), "--nproc-per-node", "2", "--nnodes", "1:2", "--node-rank", id, "--master-port",
                        port, "--max-restarts", restarts, "--rdzv-conf", "last_call_timeout=1", "/bin/sh", "-c",
                        script},
                       {{"TMPDIR", tmp.path()}});
}

}  // namespace

TEST(LauncherElastic, NodeZeroGoesOnAloneWhenNodeOnesLauncherIsKilled) {
  const std::string port = std::to_string(minidl::dist::find_free_port());
  // round 0: 4 workers that wait; round 1 (node 0 alone): they report their world and finish
  const std::string script =
      "echo round $MINIDL_RESTART_COUNT rank $RANK of $WORLD_SIZE group $GROUP_RANK; "
      "if [ $MINIDL_RESTART_COUNT = 0 ]; then sleep 60; fi";
  Subprocess node0 = elastic_node(port, "0", script);
  Subprocess node1 = elastic_node(port, "1", script);
  std::this_thread::sleep_for(3s);  // both joined round 0, a few heartbeats have arrived
  ::kill(node1.pid, SIGKILL);  // node 1's launcher vanishes (its workers get SIGTERM)
  ASSERT_TRUE(wait_process(node0, 40s));
  wait_process(node1, 5s);
  EXPECT_EQ(exit_code(node0), 0) << node0.err;
  EXPECT_THAT(node0.err, HasSubstr("rendezvous round 0: nodes 0 and 1, world size 4"));
  EXPECT_THAT(node0.err, HasSubstr("node 1 lost (heartbeat stopped 5."));
  EXPECT_THAT(node0.err, HasSubstr(" s ago): continuing with 1 node, world size 2 (restart 1/1)"));
  EXPECT_THAT(node0.out, HasSubstr("[rank 0] round 1 rank 0 of 2 group 0\n"));
  EXPECT_THAT(node0.out, HasSubstr("[rank 1] round 1 rank 1 of 2 group 0\n"));
}

TEST(LauncherElastic, ANodeWhoseLauncherIsStoppedLeavesAtOnce) {
  const std::string port = std::to_string(minidl::dist::find_free_port());
  const std::string script =
      "echo round $MINIDL_RESTART_COUNT rank $RANK of $WORLD_SIZE; "
      "if [ $MINIDL_RESTART_COUNT = 0 ]; then sleep 60; fi";
  Subprocess node0 = elastic_node(port, "0", script);
  Subprocess node1 = elastic_node(port, "1", script);
  std::this_thread::sleep_for(2s);
  const auto stopped_at = std::chrono::steady_clock::now();
  ::kill(node1.pid, SIGTERM);  // node 1 is shut down: no need to wait for its heartbeat
  ASSERT_TRUE(wait_process(node1, 10s));
  ASSERT_TRUE(wait_process(node0, 20s));
  EXPECT_EQ(exit_code(node1), 128 + SIGTERM);
  EXPECT_EQ(exit_code(node0), 0) << node0.err;
  EXPECT_THAT(node0.err, HasSubstr("node 1's launcher received SIGTERM; stopping this node's workers"));
  EXPECT_THAT(node0.err, HasSubstr("node 1 left (node 1's launcher received SIGTERM): continuing with 1 node, "
                                   "world size 2 (restart 1/1)"));
  EXPECT_THAT(node0.out, HasSubstr("[rank 1] round 1 rank 1 of 2\n"));
  EXPECT_LT(std::chrono::steady_clock::now() - stopped_at, 5s);  // less than a heartbeat timeout
}

TEST(LauncherElastic, LosingANodeWithNoRestartsLeftEndsTheRun) {
  const std::string port = std::to_string(minidl::dist::find_free_port());
  Subprocess node0 = elastic_node(port, "0", "sleep 60", "0");
  Subprocess node1 = elastic_node(port, "1", "sleep 60", "0");
  std::this_thread::sleep_for(3s);
  ::kill(node1.pid, SIGKILL);
  ASSERT_TRUE(wait_process(node0, 30s));
  wait_process(node1, 5s);
  EXPECT_EQ(exit_code(node0), 1);
  EXPECT_THAT(node0.err, HasSubstr("failed: node 1 lost (heartbeat stopped 5."));
  EXPECT_THAT(node0.err, HasSubstr("; no restarts left (--max-restarts 0 used up)"));
}

TEST(LauncherElastic, ALateLauncherIsAdmittedByARestartThatDoesNotCount) {
  const std::string port = std::to_string(minidl::dist::find_free_port());
  // With 2 nodes the workers finish; alone they wait to be stopped.
  const std::string script =
      "echo round $MINIDL_RESTART_COUNT rank $RANK of $WORLD_SIZE; "
      "if [ $WORLD_SIZE = 2 ]; then sleep 60; fi";
  Subprocess node0 = elastic_node(port, "0", script, "0");  // no restarts: admitting must not need one
  std::this_thread::sleep_for(3s);  // round 0 closed (last call 1 s) with node 0 alone
  Subprocess node1 = elastic_node(port, "1", script, "0");
  ASSERT_TRUE(wait_process(node0, 30s));
  ASSERT_TRUE(wait_process(node1, 30s));
  EXPECT_EQ(exit_code(node0), 0) << node0.err;
  EXPECT_EQ(exit_code(node1), 0) << node1.err;
  EXPECT_THAT(node0.err, HasSubstr("rendezvous round 0: node 0, world size 2"));
  EXPECT_THAT(node0.err, HasSubstr("node 1 waits to join; stopping this node's workers"));
  for (const Subprocess* p : {&node0, &node1})
    EXPECT_THAT(p->err, HasSubstr("node 1 joined: continuing with 2 nodes, world size 4 (a membership change: not "
                                  "counted against --max-restarts)"));
  EXPECT_THAT(node0.out, HasSubstr("[rank 0] round 0 rank 0 of 2\n"));
  EXPECT_THAT(node0.out, HasSubstr("[rank 0] round 1 rank 0 of 4\n"));
  EXPECT_THAT(node1.out, HasSubstr("[rank 3] round 1 rank 3 of 4\n"));
}

TEST(LauncherElastic, BadElasticSizesAreRefused) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"--nnodes", "3:2"}, "--nnodes 3:2: MIN 3 is above MAX 2"},
      {{"--nnodes", "1:2", "--node-rank", "2"}, "--node-rank 2 is not below --nnodes 2"},
      {{"--rdzv-conf", "last_call=3"}, "--rdzv-conf: 'last_call=3' is not join_timeout=SECONDS or last_call_timeout"},
      {{"--rdzv-conf", "last_call_timeout=x"}, "--rdzv-conf last_call_timeout needs an integer, got 'x'"}};
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> argv{launcher_path()};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back("/bin/true");
    Subprocess p = start_process(argv);
    ASSERT_TRUE(wait_process(p, 10s));
    EXPECT_EQ(exit_code(p), 2) << message;
    EXPECT_THAT(p.err, HasSubstr(message));
  }
}

TEST(LauncherElastic, LosingNodeZeroEndsTheRunOnTheOthers) {
  const std::string port = std::to_string(minidl::dist::find_free_port());
  Subprocess node0 = elastic_node(port, "0", "sleep 60");
  Subprocess node1 = elastic_node(port, "1", "sleep 60");
  std::this_thread::sleep_for(3s);
  ::kill(node0.pid, SIGKILL);  // the store's host vanishes
  ASSERT_TRUE(wait_process(node1, 20s));
  wait_process(node0, 5s);
  EXPECT_EQ(exit_code(node1), 1);
  EXPECT_THAT(node1.err, HasSubstr("lost the launchers' store on node 0 (127.0.0.1:" + port + ")"));
  EXPECT_THAT(node1.err, HasSubstr("node 0 hosts the run's store, the run cannot go on without it"));
}
