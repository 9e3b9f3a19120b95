// tests/dist/test_store_security.cpp — the TCPStore against hostile local clients: a wrong token
// is refused and dropped while the real clients (and a real spawned world) go on; a client that
// skips the hello is closed; announced frame lengths cost no memory until the bytes arrive, and
// frames over the cap are refused; get/wait say on stderr what they still wait for; dist::init
// names the ranks it waits for; spawn and minidl-run hand their workers one shared token.
#include <unistd.h>

#include <fstream>
#include <functional>
#include <regex>
#include <thread>

#include "minidl/dist/distributed.h"
#include "minidl/dist/socket.h"
#include "minidl/dist/spawn.h"
#include "minidl/dist/store.h"
#include "minidl/dist/store_protocol.h"
#include "minidl/tensor/creation.h"
#include "tests/common/testing.h"
#include "tests/dist/dist_test_util.h"

using namespace std::chrono_literals;
using minidl::dist::TCPStore;
using minidl::dist::TCPStoreOptions;
using ::testing::HasSubstr;
namespace protocol = minidl::dist::protocol;

namespace {

const std::string kHost = "127.0.0.1";

minidl::dist::Socket raw_connect(uint16_t port) {
  return minidl::dist::connect_tcp(kHost, port, minidl::dist::Clock::now() + 5s);
}

// Sends a hello with `token` on a raw connection; returns the reply's status byte.
uint8_t raw_hello(int fd, const std::string& token) {
  protocol::send_frame(fd, protocol::Writer().u8(protocol::kHello).str(token).body());
  std::string reply;
  if (!protocol::recv_frame(fd, reply, minidl::dist::Clock::now() + 5s) || reply.empty()) return 0xff;
  return static_cast<uint8_t>(reply[0]);
}

bool closed_by_server(int fd) {
  char c;
  try {
    return !minidl::dist::recv_all(fd, &c, 1, minidl::dist::Clock::now() + 5s);
  } catch (const std::exception&) {
    return true;
  }
}

// Spawns ranks 0 and 1 of a world of 3 whose rank 2 never starts. Each rank sends its stderr to
// log_dir/err.<rank> and calls dist::init(options(rank)); if init throws, the rank writes
// "init failed: <message>" there, rank 0 then waits rank0_linger, and the rank rethrows (so spawn
// throws, naming whichever rank failed first).
void init_two_of_three(const std::string& log_dir, const std::function<minidl::dist::InitOptions(int rank)>& options,
                       std::chrono::milliseconds rank0_linger = 0ms) {
  minidl::dist::spawn(2, [&](int rank) {
    ::setenv("WORLD_SIZE", "3", 1);
    if (std::freopen((log_dir + "/err." + std::to_string(rank)).c_str(), "w", stderr) == nullptr) std::abort();
    try {
      minidl::dist::init(options(rank));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "init failed: %s\n", e.what());
      if (rank == 0 && rank0_linger > 0ms) std::this_thread::sleep_for(rank0_linger);
      throw;
    }
  });
}

// What a rank of init_two_of_three wrote on its stderr.
std::string rank_log(const std::string& log_dir, int rank) {
  std::ifstream in(log_dir + "/err." + std::to_string(rank));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST(StoreSecurity, AWrongTokenIsRefusedAndDroppedWhileTheOthersGoOn) {
  TCPStore server(kHost, {.is_server = true, .timeout = 5s, .token = "s3cret"});
  TCPStore good(kHost, {.port = server.port(), .timeout = 5s, .token = "s3cret"});
  good.set("k", "v");
  ::testing::internal::CaptureStderr();
  EXPECT_THROW_MSG(
      TCPStore(kHost, {.port = server.port(), .timeout = 5s, .token = "guess"}), std::runtime_error,
      "the store at 127.0.0.1:" + std::to_string(server.port()) + " refused this client: wrong store token");
  EXPECT_THROW_MSG(TCPStore(kHost, {.port = server.port(), .timeout = 5s, .token = ""}), std::runtime_error,
                   "wrong store token");
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(log, HasSubstr("dropping connection from 127.0.0.1:"));
  EXPECT_THAT(log, HasSubstr("wrong store token"));
  EXPECT_EQ(good.get("k"), "v");  // the real client still works
  TCPStore late(kHost, {.port = server.port(), .timeout = 5s, .token = "s3cret"});
  EXPECT_EQ(late.add("n", 2), 2);
  EXPECT_EQ(good.num_keys(), 2);  // nothing the refused clients could have written
}

TEST(StoreSecurity, AClientThatSkipsTheHelloIsClosedWithoutTouchingTheData) {
  TCPStore server(kHost, {.is_server = true, .timeout = 5s, .token = "s3cret"});
  ::testing::internal::CaptureStderr();
  auto raw = raw_connect(server.port());
  std::string body = protocol::Writer().u8(protocol::kSet).str("evil").str("1").body();
  std::string frame = protocol::Writer().u32(static_cast<uint32_t>(body.size())).body() + body;
  minidl::dist::send_all(raw.fd(), frame.data(), frame.size());
  EXPECT_TRUE(closed_by_server(raw.fd()));
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(log, HasSubstr("the first message is not a hello"));
  TCPStore good(kHost, {.port = server.port(), .timeout = 5s, .token = "s3cret"});
  EXPECT_FALSE(good.check({"evil"}));
}

TEST(StoreSecurity, AnnouncedFramesCostNoMemoryUntilTheirBytesArrive) {
  TCPStore server(kHost, {.is_server = true, .timeout = 5s, .token = "t"});
  const int64_t before = minidl::testing::resident_mib();
  // 32 authenticated connections each announce a frame just under the cap and send 1 byte.
  std::vector<minidl::dist::Socket> conns;
  for (int i = 0; i < 32; ++i) {
    conns.push_back(raw_connect(server.port()));
    ASSERT_EQ(raw_hello(conns.back().fd(), "t"), protocol::kOk);
    const std::string announce = protocol::Writer().u32(protocol::kMaxMessageBytes - 1).body() + "x";
    minidl::dist::send_all(conns.back().fd(), announce.data(), announce.size());
  }
  std::this_thread::sleep_for(300ms);  // let every connection thread read its header
  // Buffers filled up front would be 32 x 4 MiB = 128 MiB; growing as bytes arrive, 32 x 64 KiB.
  EXPECT_LT(minidl::testing::resident_mib() - before, 40);
  TCPStore good(kHost, {.port = server.port(), .timeout = 5s, .token = "t"});  // still responsive
  good.set("a", "1");
  EXPECT_EQ(good.get("a"), "1");
}

TEST(StoreSecurity, FramesOverTheCapAreRefusedAtTheirHeader) {
  TCPStore server(kHost, {.is_server = true, .timeout = 5s, .token = "t"});
  ::testing::internal::CaptureStderr();
  auto raw = raw_connect(server.port());
  ASSERT_EQ(raw_hello(raw.fd(), "t"), protocol::kOk);
  const std::string announce = protocol::Writer().u32(protocol::kMaxMessageBytes + 1).body();
  minidl::dist::send_all(raw.fd(), announce.data(), announce.size());
  EXPECT_TRUE(closed_by_server(raw.fd()));
  // Before the token is checked the cap is far smaller.
  auto stranger = raw_connect(server.port());
  const std::string big_hello = protocol::Writer().u32(protocol::kMaxHelloBytes + 1).body();
  minidl::dist::send_all(stranger.fd(), big_hello.data(), big_hello.size());
  EXPECT_TRUE(closed_by_server(stranger.fd()));
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(log, HasSubstr("message of 4194305 bytes exceeds the limit of 4194304 bytes"));
  EXPECT_THAT(log, HasSubstr("message of 4097 bytes exceeds the limit of 4096 bytes"));
  // And a client cannot send one: a clear error before anything goes out.
  TCPStore good(kHost, {.port = server.port(), .timeout = 5s, .token = "t"});
  EXPECT_THROW_MSG(good.set("big", std::string(protocol::kMaxMessageBytes, 'x')), std::runtime_error,
                   "exceeds the limit of 4194304 bytes (the store is for rendezvous data");
}

TEST(StoreSecurity, GetAndWaitSayWhatTheyStillWaitFor) {
  TCPStore server(kHost, {.is_server = true, .timeout = 5s});
  TCPStore client(kHost, {.port = server.port(), .timeout = 700ms, .progress_interval = 200ms});
  ::testing::internal::CaptureStderr();
  EXPECT_THROW_MSG(client.get("late"), std::runtime_error, "TCPStore::get: key 'late' not set within 0.7 s");
  EXPECT_THROW_MSG(client.wait({"x", "y"}), std::runtime_error, "not all set within 0.7 s");
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(log, HasSubstr("[minidl TCPStore] TCPStore::get: key 'late': still waiting after 0."));
  EXPECT_THAT(log, HasSubstr("s (gives up after 0.7 s)"));
  EXPECT_THAT(log, HasSubstr("[minidl TCPStore] TCPStore::wait: keys 'x', 'y': still waiting after 0."));
}

TEST(StoreSecurity, ARealWorldTrainsOnWhileAWrongTokenClientIsDropped) {
  // Two spawned ranks all-reduce before and after an intruder (with a guessed token) tries the
  // world's store; the intruder is refused and the world's sums stay right.
  auto results = minidl::dist::spawn_with_results(2, [](int rank) {
    minidl::dist::init({.timeout = 20s});
    auto sum_of_ranks = [] {
      minidl::Tensor t = minidl::full({3}, static_cast<double>(minidl::dist::rank() + 1), minidl::DType::Float64);
      minidl::dist::all_reduce(t);
      return t.to_vector<double>()[0];
    };
    std::string out = std::to_string(sum_of_ranks());
    if (rank == 1) {
      try {
        const auto& info = minidl::dist::world_info();
        TCPStore intruder(info.master_addr, {.port = info.master_port, .timeout = 5s, .token = "guess"});
        out += " intruder-admitted";
      } catch (const std::runtime_error& e) {
        out += std::string(e.what()).find("wrong store token") != std::string::npos ? " refused" : " other-error";
      }
    }
    minidl::dist::barrier();
    out += " " + std::to_string(sum_of_ranks());
    const char* token = std::getenv("MINIDL_STORE_TOKEN");
    out += " " + std::string(token ? token : "");
    minidl::dist::shutdown();
    return out;
  });
  ASSERT_EQ(results.size(), 2u);
  std::smatch m0, m1;
  const std::regex r0("3\\.0+ 3\\.0+ ([0-9a-f]{32})"), r1("3\\.0+ refused 3\\.0+ ([0-9a-f]{32})");
  ASSERT_TRUE(std::regex_match(results[0], m0, r0)) << results[0];
  ASSERT_TRUE(std::regex_match(results[1], m1, r1)) << results[1];
  EXPECT_EQ(m0[1], m1[1]) << "the ranks were given different tokens";
}

TEST(StoreSecurity, InitNamesTheRanksItWaitsFor) {
  // A world of 3 where rank 2 never starts: ranks 0 and 1 say so periodically, then fail naming it.
  minidl::testing::TempDir dir;
  const std::string log_dir = dir.path();
  // Whichever rank fails first is what spawn reports (rank 1 may see rank 0's store go away), so
  // each rank writes its own error next to its progress lines.
  EXPECT_THROW(
      init_two_of_three(log_dir,
                        [](int) { return minidl::dist::InitOptions{.timeout = 1200ms, .progress_interval = 300ms}; }),
      std::runtime_error);
  const std::string log[2] = {rank_log(log_dir, 0), rank_log(log_dir, 1)};
  EXPECT_THAT(log[0], HasSubstr("dist::init: rank 0 is waiting for rank(s) 2 of 3 to join ("));
  // The rank whose timeout ends first names rank 2; spawn then stops the other one, which may
  // not have printed its own error yet (under load or a sanitizer that is often rank 0). Rank 1
  // may instead lose rank 0's store as rank 0 gives up: then it names rank 2 as the one it was
  // waiting for.
  const std::string failed = "rank(s) 2 of 3 did not join within 1.2 s";
  const std::string lost = "init failed: dist::init: rank 1: lost the store at ";
  const size_t lost_at = log[1].find(lost);
  const bool rank1_named_it_losing_the_store =
      lost_at != std::string::npos &&
      log[1].find(" while waiting for rank(s) 2 of 3 to join (rank 0 serves it", lost_at) != std::string::npos;
  EXPECT_TRUE(log[0].find("init failed: dist::init: rank 0: " + failed) != std::string::npos ||
              log[1].find("init failed: dist::init: rank 1: " + failed) != std::string::npos ||
              rank1_named_it_losing_the_store)
      << "rank 0:\n"
      << log[0] << "rank 1:\n"
      << log[1];
}

TEST(StoreSecurity, ARankThatLosesTheStoreNamesWhomItWaitedFor) {
  // A world of 3 where rank 2 never starts and rank 0 (the store's server) gives up first: rank 1
  // loses the store mid-rendezvous and its error still names rank 2. Rank 0 lingers before it
  // exits, so rank 1's error is the first that spawn sees.
  minidl::testing::TempDir dir;
  const std::string log_dir = dir.path();
  EXPECT_THROW(init_two_of_three(
                   log_dir,
                   [](int rank) {
                     return minidl::dist::InitOptions{.timeout = rank == 0 ? 500ms : 20000ms,
                                                      .progress_interval = 200ms};
                   },
                   /*rank0_linger=*/3s),
               std::runtime_error);
  const std::string log = rank_log(log_dir, 1);
  EXPECT_THAT(log, HasSubstr("init failed: dist::init: rank 1: lost the store at "));
  EXPECT_THAT(log, HasSubstr(" while waiting for rank(s) 2 of 3 to join (rank 0 serves it: did it give up or die?): "));
}

TEST(StoreSecurity, TheLauncherGivesItsWorkersOneFreshToken) {
  minidl::testing::Subprocess p = minidl::testing::start_process(
      {minidl::testing::launcher_path(), "--nproc-per-node", "2", "/bin/sh", "-c", "echo token=$MINIDL_STORE_TOKEN"});
  ASSERT_TRUE(minidl::testing::wait_process(p, 10s));
  EXPECT_EQ(minidl::testing::exit_code(p), 0) << p.err;
  std::smatch m0, m1;
  const std::string out = p.out;
  ASSERT_TRUE(std::regex_search(out, m0, std::regex("\\[rank 0\\] token=([0-9a-f]{32})\n"))) << out;
  ASSERT_TRUE(std::regex_search(out, m1, std::regex("\\[rank 1\\] token=([0-9a-f]{32})\n"))) << out;
  EXPECT_EQ(m0[1], m1[1]);
}
