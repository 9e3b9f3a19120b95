// tests/dist/test_out_of_descriptors.cpp — a process that has no file descriptor left is told
// so, with its limit and `ulimit -n`, at once: connect_tcp, a TCPStore client and the Gloo
// process group do not retry until their deadline or blame a timeout or a route. Each case runs
// in a forked child whose RLIMIT_NOFILE is lowered to the descriptors it already has open.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <functional>

#include "minidl/dist/process.h"
#include "minidl/dist/process_group_gloo.h"
#include "minidl/dist/socket.h"
#include "minidl/dist/store.h"
#include "tests/common/testing.h"

using namespace std::chrono_literals;
using minidl::dist::Clock;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

const std::string kHost = "127.0.0.1";

// What a child's fn threw: the exception's type (OutOfDescriptors or other) and message, and
// how long it took.
struct ChildError {
  bool out_of_descriptors = false;
  std::string message;
  std::chrono::milliseconds took{0};
};

// Lowers RLIMIT_NOFILE to the lowest free descriptor number, so that every open fails with
// EMFILE; returns the new limit.
rlim_t use_up_descriptors() {
  const int lowest_free = ::dup(0);
  ::close(lowest_free);
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = static_cast<rlim_t>(lowest_free);
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) throw std::runtime_error("setrlimit failed");
  return limit.rlim_cur;
}

// Forks; the child runs setup(), then uses up its descriptors and runs fn, and reports what fn
// threw (fn is expected to throw) through a pipe.
ChildError run_out_of_descriptors(const std::function<void()>& setup, const std::function<void()>& fn) {
  const pid_t parent = ::getpid();
  const std::string report = minidl::testing::run_in_child([&] {
    minidl::dist::die_with_parent(SIGKILL, parent);
    std::string report = "-no exception";
    try {
      setup();
      use_up_descriptors();
      const auto start = Clock::now();
      try {
        fn();
      } catch (const std::exception& e) {
        const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
        const bool ood = dynamic_cast<const minidl::dist::OutOfDescriptors*>(&e) != nullptr;
        report = std::string(ood ? "O" : "R") + std::to_string(took) + " " + e.what();
      }
    } catch (const std::exception& e) {
      report = std::string("-setup failed: ") + e.what();
    }
    return report;
  });
  ChildError out;
  if (report.empty() || report[0] == '-') {
    out.message = report.empty() ? "the child reported nothing" : report.substr(1);
    return out;
  }
  out.out_of_descriptors = report[0] == 'O';
  const size_t space = report.find(' ');
  out.took = std::chrono::milliseconds(std::stoll(report.substr(1, space - 1)));
  out.message = report.substr(space + 1);
  return out;
}

}  // namespace

TEST(OutOfDescriptors, ConnectFailsAtOnceNamingTheLimit) {
  minidl::dist::Socket listener = minidl::dist::listen_tcp(kHost, 0, false);
  const uint16_t port = minidl::dist::local_port(listener.fd());
  const ChildError e =
      run_out_of_descriptors([] {}, [&] { minidl::dist::connect_tcp(kHost, port, Clock::now() + 5s); });
  EXPECT_TRUE(e.out_of_descriptors) << e.message;
  EXPECT_THAT(e.message, HasSubstr("cannot connect to 127.0.0.1:" + std::to_string(port) +
                                   ": this process is out of file descriptors (Too many open files; its limit is "));
  EXPECT_THAT(e.message, HasSubstr(" open files: raise it with `ulimit -n`)"));
  EXPECT_LT(e.took, 1s);  // not retried until the deadline
}

TEST(OutOfDescriptors, AStoreClientSaysSoInsteadOfGivingUpAfterItsTimeout) {
  minidl::dist::Socket listener = minidl::dist::listen_tcp(kHost, 0, false);
  const uint16_t port = minidl::dist::local_port(listener.fd());
  const ChildError e =
      run_out_of_descriptors([] {}, [&] { minidl::dist::TCPStore client(kHost, {.port = port, .timeout = 5s}); });
  EXPECT_TRUE(e.out_of_descriptors) << e.message;
  EXPECT_THAT(e.message, HasSubstr("TCPStore: cannot connect to 127.0.0.1:"));
  EXPECT_THAT(e.message, HasSubstr("this process is out of file descriptors"));
  EXPECT_THAT(e.message, Not(HasSubstr("gave up after")));
  EXPECT_LT(e.took, 1s);
}

#ifdef MINIDL_WITH_GLOO
TEST(OutOfDescriptors, TheGlooGroupSaysSoInsteadOfBlamingARouteOrATimeout) {
  std::unique_ptr<minidl::dist::TCPStore> store;
  const ChildError e = run_out_of_descriptors(
      [&] {
        store = std::make_unique<minidl::dist::TCPStore>(kHost, minidl::dist::TCPStoreOptions{.is_server = true});
      },
      [&] { minidl::dist::ProcessGroupGloo group(*store, 0, 1, {.timeout = 300s, .debug = false}); });
  EXPECT_TRUE(e.out_of_descriptors) << e.message;
  EXPECT_THAT(e.message, HasSubstr("ProcessGroupGloo: rank 0 of 1 could not connect to the other ranks: "));
  EXPECT_THAT(e.message, HasSubstr("this process is out of file descriptors (Too many open files; its limit is "));
  EXPECT_THAT(e.message, Not(HasSubstr("within 300000 ms")));
  EXPECT_THAT(e.message, Not(HasSubstr("no local interface routes")));
  EXPECT_LT(e.took, 1s);
}
#endif
