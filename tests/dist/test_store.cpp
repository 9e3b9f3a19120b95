// tests/dist/test_store.cpp — TCPStore: set/get/add/wait/check/delete from threads and forked
// processes, timeouts that name the key, connect retries (also after a connection closed before
// its hello was answered), and a server that survives malformed and oversized messages; and
// find_free_port, which the store's tests and the launcher use: a port outside the kernel's
// ephemeral range. Everything on 127.0.0.1.
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <set>
#include <thread>

#include "minidl/dist/socket.h"
#include "minidl/dist/store.h"
#include "minidl/dist/store_protocol.h"
#include "tests/common/testing.h"

using namespace std::chrono_literals;
using minidl::dist::TCPStore;
using minidl::dist::TCPStoreOptions;

namespace {

const std::string kHost = "127.0.0.1";

TCPStore make_client(const TCPStore& server, std::chrono::milliseconds timeout = 5s) {
  return TCPStore(kHost, {.port = server.port(), .timeout = timeout});
}

// A raw connection to the server, past the hello (no token), for sending bytes that do not
// follow the protocol.
minidl::dist::Socket raw_connect(uint16_t port) {
  auto s = minidl::dist::connect_tcp(kHost, port, minidl::dist::Clock::now() + 5s);
  using namespace minidl::dist::protocol;
  send_frame(s.fd(), Writer().u8(kHello).str("").body());
  std::string reply;
  if (!recv_frame(s.fd(), reply, minidl::dist::Clock::now() + 5s) || reply != std::string(1, kOk))
    throw std::runtime_error("raw_connect: the hello was not accepted");
  return s;
}

// True when the server closes the raw connection within 5 s.
bool closed_by_server(int fd) {
  char c;
  try {
    return !minidl::dist::recv_all(fd, &c, 1, minidl::dist::Clock::now() + 5s);
  } catch (const std::exception&) {
    return true;  // reset by peer also counts as closed
  }
}

}  // namespace

TEST(TCPStore, SetThenGetReturnsTheBytes) {
  TCPStore server(kHost, {.is_server = true, .timeout = 5s});
  std::string binary("a\0b\xff", 4);
  std::string big(1 << 20, 'x');
  server.set("k", binary);
  server.set("big", big);
  TCPStore client = make_client(server);
  EXPECT_EQ(client.get("k"), binary);
  EXPECT_EQ(client.get("big"), big);
  client.set("k", "overwritten");
  EXPECT_EQ(server.get("k"), "overwritten");
}

TEST(TCPStore, GetWaitsUntilAnotherClientSetsTheKey) {
  TCPStore server(kHost, {.is_server = true, .timeout = 5s});
  std::thread setter([&] {
    TCPStore client = make_client(server);
    std::this_thread::sleep_for(100ms);
    client.set("late", "here");
  });
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(server.get("late"), "here");
  EXPECT_GE(std::chrono::steady_clock::now() - start, 90ms);
  setter.join();
}

TEST(TCPStore, GetTimeoutNamesTheKeyAndTheTimeout) {
  TCPStore server(kHost, {.is_server = true, .timeout = 200ms});
  auto start = std::chrono::steady_clock::now();
  EXPECT_THROW_MSG(server.get("missing"), std::runtime_error, "TCPStore::get: key 'missing' not set within 0.2 s");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  server.set("after", "timeout");  // the connection is still usable
  EXPECT_EQ(server.get("after"), "timeout");
}

TEST(TCPStore, AddIsAtomicAcrossClientsInThreads) {
  TCPStore server(kHost, {.is_server = true, .timeout = 5s});
  constexpr int kThreads = 6, kAdds = 50;
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      TCPStore client = make_client(server);
      for (int i = 0; i < kAdds; ++i) seen[t].push_back(client.add("counter", 1));
    });
  }
  for (auto& t : threads) t.join();
  std::set<int64_t> all;
  for (auto& s : seen) all.insert(s.begin(), s.end());
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kAdds));  // every add saw a different value
  EXPECT_EQ(*all.rbegin(), kThreads * kAdds);
  EXPECT_EQ(server.get("counter"), std::to_string(kThreads * kAdds));
  EXPECT_EQ(server.add("counter", -kThreads * kAdds), 0);
}

TEST(TCPStore, OneClientCanBeSharedByThreads) {
  TCPStore server(kHost, {.is_server = true, .timeout = 5s});
  TCPStore shared = make_client(server);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) shared.add("n", 2);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(server.add("n", 0), 400);
}

TEST(TCPStore, AddOnANonIntegerValueIsAnError) {
  TCPStore server(kHost, {.is_server = true, .timeout = 5s});
  server.set("text", "hello");
  EXPECT_THROW_MSG(server.add("text", 1), std::runtime_error, "value of key 'text' is not an integer");
  EXPECT_EQ(server.add("fresh", 5), 5);
}

TEST(TCPStore, WaitAndCheckSeeKeysSetLater) {
  TCPStore server(kHost, {.is_server = true, .timeout = 5s});
  TCPStore client = make_client(server);
  EXPECT_FALSE(client.check({"a", "b"}));
  EXPECT_THROW_MSG(client.wait({"a", "b"}, 100ms), std::runtime_error,
                   "TCPStore::wait: keys 'a', 'b' not all set within 0.1 s");
  server.set("a", "1");
  EXPECT_FALSE(client.check({"a", "b"}));
  std::thread setter([&] {
    std::this_thread::sleep_for(50ms);
    server.set("b", "2");
  });
  client.wait({"a", "b"});
  setter.join();
  EXPECT_TRUE(client.check({"a", "b"}));
  EXPECT_TRUE(client.check({}));
}

TEST(TCPStore, DeleteKeyAndNumKeys) {
  TCPStore server(kHost, {.is_server = true, .timeout = 5s});
  TCPStore client = make_client(server);
  EXPECT_EQ(client.num_keys(), 0);
  client.set("x", "1");
  client.set("y", "2");
  EXPECT_EQ(server.num_keys(), 2);
  EXPECT_TRUE(client.delete_key("x"));
  EXPECT_FALSE(client.delete_key("x"));
  EXPECT_FALSE(server.check({"x"}));
  EXPECT_EQ(client.num_keys(), 1);
}

TEST(TCPStore, ForkedProcessesMeetThroughTheStore) {
  TCPStore server(kHost, {.is_server = true, .timeout = 5s});
  constexpr int kChildren = 3;
  std::vector<pid_t> pids;
  for (int r = 0; r < kChildren; ++r) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // a fresh client in the child; never touch the parent's objects
      int code = 1;
      try {
        TCPStore client(kHost, {.port = server.port(), .timeout = 5s});
        client.set("child/" + std::to_string(r), std::to_string(getpid()));
        client.add("arrived", 1);
        client.wait({"go"});
        code = client.get("go") == "now" ? 0 : 2;
      } catch (...) {}
      _exit(code);
    }
    pids.push_back(pid);
  }
  for (int i = 0; i < 100 && server.add("arrived", 0) < kChildren; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(server.add("arrived", 0), kChildren);
  for (int r = 0; r < kChildren; ++r) EXPECT_EQ(server.get("child/" + std::to_string(r)), std::to_string(pids[r]));
  server.set("go", "now");
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
}

// Outgoing connections (Gloo opens many) take their source ports from the ephemeral range: a
// port of that range, free when find_free_port closes it, could be taken before the caller binds
// it. Its ports are outside the range read from /proc, bind, and are not one fixed port.
TEST(Socket, FindFreePortIsOutsideTheEphemeralRangeAndBinds) {
  int first = 32768, last = 60999;  // find_free_port's fallback when /proc cannot be read
  if (int a = 0, b = 0; std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> a >> b) {
    first = a;
    last = b;
  }
  if (first <= 1024 && last >= 65535)
    GTEST_SKIP() << "the ephemeral range " << first << "-" << last << " is every port";
  std::set<uint16_t> ports;
  for (int i = 0; i < 20; ++i) {
    const uint16_t port = minidl::dist::find_free_port(kHost);
    EXPECT_TRUE(port < first || port > last) << port << " is in the ephemeral range " << first << "-" << last;
    EXPECT_GE(port, 1024);
    EXPECT_NO_THROW(minidl::dist::listen_tcp(kHost, port, /*bind_all=*/false)) << port;
    ports.insert(port);
  }
  EXPECT_GT(ports.size(), 1u);
}

TEST(TCPStore, ClientRetriesUntilTheServerIsUp) {
  uint16_t port = minidl::dist::find_free_port(kHost);
  std::string got;
  std::thread client_thread([&] {
    TCPStore client(kHost, {.port = port, .timeout = 5s});
    got = client.get("hello");
  });
  std::this_thread::sleep_for(300ms);
  TCPStore server(kHost, {.port = port, .is_server = true, .timeout = 5s});
  server.set("hello", "world");
  client_thread.join();
  EXPECT_EQ(got, "world");
}

// A server crowded by connections that never say hello closes the oldest one still waiting for
// its hello, which can be a real client's whose hello is not in yet: the client connects again.
// Here a stand-in server closes the first connection unread and answers the second one's hello.
TEST(TCPStore, ClientWhoseConnectionIsClosedBeforeItsHelloConnectsAgain) {
  using namespace minidl::dist::protocol;
  auto listener = minidl::dist::listen_tcp(kHost, 0, /*bind_all=*/false);
  const uint16_t port = minidl::dist::local_port(listener.fd());
  const timeval five_seconds{5, 0};  // accept() gives up after this (a client that never comes back)
  ASSERT_EQ(::setsockopt(listener.fd(), SOL_SOCKET, SO_RCVTIMEO, &five_seconds, sizeof(five_seconds)), 0);
  std::atomic<int> accepted{0};
  std::thread server([&] {
    const int first = ::accept(listener.fd(), nullptr, nullptr);
    if (first < 0) return;
    ::close(first);  // evicted before its hello is read
    ++accepted;
    minidl::dist::Socket second(::accept(listener.fd(), nullptr, nullptr));
    if (!second.valid()) return;
    ++accepted;
    try {
      std::string hello;
      if (recv_frame(second.fd(), hello, minidl::dist::Clock::now() + 5s) &&
          hello == Writer().u8(kHello).str("").body())
        send_frame(second.fd(), Writer().u8(kOk).body());
      char c;  // until the client closes
      (void)!minidl::dist::recv_all(second.fd(), &c, 1, minidl::dist::Clock::now() + 5s);
    } catch (const std::exception&) {  // a reset or a timeout here: the assertions below tell
    }
  });
  EXPECT_NO_THROW(TCPStore(kHost, {.port = port, .timeout = 5s, .token = ""}));
  server.join();
  EXPECT_EQ(accepted.load(), 2);
}

TEST(TCPStore, ConnectTimeoutNamesTheAddress) {
  uint16_t port = minidl::dist::find_free_port(kHost);
  auto start = std::chrono::steady_clock::now();
  EXPECT_THROW_MSG(TCPStore(kHost, {.port = port, .timeout = 300ms}), std::runtime_error,
                   "127.0.0.1:" + std::to_string(port));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

TEST(TCPStore, ServerOnAPortInUseIsAnError) {
  TCPStore first(kHost, {.is_server = true, .timeout = 5s});
  EXPECT_THROW_MSG(TCPStore(kHost, {.port = first.port(), .is_server = true, .timeout = 1s}), std::runtime_error,
                   "cannot listen on 127.0.0.1:" + std::to_string(first.port()));
}

TEST(TCPStore, OversizedMessageClosesOnlyThatConnection) {
  TCPStore server(kHost, {.is_server = true, .timeout = 5s});
  TCPStore bystander = make_client(server);
  bystander.set("before", "1");
  ::testing::internal::CaptureStderr();
  auto raw = raw_connect(server.port());
  const unsigned char huge[] = {0x7f, 0xff, 0xff, 0xff, 1, 2, 3};  // announces ~2 GiB
  minidl::dist::send_all(raw.fd(), huge, sizeof(huge));
  bool closed = closed_by_server(raw.fd());
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(closed);
  EXPECT_THAT(log, ::testing::HasSubstr("exceeds the limit of 4194304 bytes"));
  EXPECT_EQ(bystander.get("before"), "1");  // an existing client still works
  TCPStore newcomer = make_client(server);  // and a new one can connect
  newcomer.set("after", "2");
  EXPECT_EQ(bystander.get("after"), "2");
}

TEST(TCPStore, MalformedMessagesCloseTheConnectionAndAreLogged) {
  TCPStore server(kHost, {.is_server = true, .timeout = 5s});
  using minidl::dist::protocol::Writer;
  std::vector<std::pair<std::string, std::string>> cases = {
      {"unknown command", Writer().u8(0x7e).body()},
      {"truncated", Writer().u8(minidl::dist::protocol::kSet).u32(1000).body()},  // key length 1000, no key
      {"unexpected bytes", Writer().u8(minidl::dist::protocol::kNumKeys).u8(0).body()},
      {"truncated", std::string()},  // an empty body has no command
  };
  for (const auto& [expected, body] : cases) {
    ::testing::internal::CaptureStderr();
    auto raw = raw_connect(server.port());
    std::string frame = Writer().u32(static_cast<uint32_t>(body.size())).body() + body;
    minidl::dist::send_all(raw.fd(), frame.data(), frame.size());
    bool closed = closed_by_server(raw.fd());
    std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_TRUE(closed) << expected;
    EXPECT_THAT(log, ::testing::HasSubstr("closing connection from 127.0.0.1:")) << expected;
    EXPECT_THAT(log, ::testing::HasSubstr(expected));
  }
  TCPStore client = make_client(server);
  EXPECT_EQ(client.add("still", 1), 1);
}

TEST(TCPStore, ClientBlockedInGetFailsWhenTheServerGoesAway) {
  auto server = std::make_unique<TCPStore>(kHost, TCPStoreOptions{.is_server = true, .timeout = 5s});
  TCPStore client = make_client(*server, 30s);
  std::atomic<bool> threw{false};
  std::string message;
  std::thread waiter([&] {
    try {
      client.get("never");
    } catch (const std::runtime_error& e) {
      message = e.what();
      threw = true;
    }
  });
  std::this_thread::sleep_for(100ms);
  auto start = std::chrono::steady_clock::now();
  server.reset();
  waiter.join();
  EXPECT_TRUE(threw);
  EXPECT_THAT(message, ::testing::HasSubstr("TCPStore::get: key 'never'"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}
