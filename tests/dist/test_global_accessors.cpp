// tests/dist/test_global_accessors.cpp — the global API's accessors that the trainer does not
// use: dist::world_info() (the environment init() read), dist::default_store() (a key exchange on
// the rendezvous store) and TCPStore::set_timeout (a get on a missing key gives up after it).
#include <chrono>

#include "minidl/dist/distributed.h"
#include "tests/common/testing.h"
#include "tests/dist/pg_test_util.h"

using namespace std::chrono_literals;
namespace dist = minidl::dist;
using minidl::testing::require;

TEST(DistAccessors, WorldInfoAndDefaultStoreOfAnInitialisedWorld) {
  minidl::testing::EnvGuard env;
  auto results = dist::spawn_with_results(2, [](int) {
    dist::init({.timeout = 5s});
    const dist::WorldInfo w = dist::world_info();  // a copy: shutdown() resets the state
    require(w.world_size == 2 && w.rank == dist::rank() && w.local_world_size == 2, "world_info");
    require(w.source == "env", "spawn passes the world through the environment: " + w.source);
    dist::TCPStore& store = dist::default_store();
    store.set("from_" + std::to_string(dist::rank()), std::to_string(10 + dist::rank()));
    std::string peer = store.get("from_" + std::to_string(1 - dist::rank()));  // waits for the peer
    dist::barrier();
    dist::shutdown();
    return std::to_string(w.rank) + ":" + peer;
  });
  EXPECT_EQ(results, (std::vector<std::string>{"0:11", "1:10"}));
}

TEST(DistAccessors, AccessorsBeforeInitAreErrorsNamingTheFunction) {
  EXPECT_THROW_MSG(dist::default_store(), std::runtime_error,
                   "dist::default_store: the default process group is not initialised");
  EXPECT_THROW_MSG(dist::world_info(), std::runtime_error,
                   "dist::world_info: the default process group is not initialised");
}

TEST(DistAccessors, SetTimeoutBoundsAGetOnAMissingKey) {
  dist::TCPStore server("127.0.0.1", {.is_server = true, .timeout = 30s});
  server.set_timeout(200ms);
  EXPECT_EQ(server.timeout(), 200ms);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_ANY_THROW(server.get("never_set"));
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(waited, 150ms);
  EXPECT_LT(waited, 10s);  // not the 30 s it was created with
}
