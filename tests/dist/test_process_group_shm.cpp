// tests/dist/test_process_group_shm.cpp — what only ProcessGroupShm does, with real ranks
// (forked processes on this host): tensors larger than the default segment, the fixed summation
// order, the same bits as Gloo, blocking collectives run by the caller, a rank that exits or never
// arrives, no segment left behind, two jobs at once, debug mode, ranks on other hosts refused. Every collective of every CPU group:
// tests/dist/test_collectives.cpp.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <thread>

#include "minidl/dist/distributed.h"
#include "minidl/dist/process_group_shm.h"
#include "tests/common/testing.h"
#include "tests/dist/pg_test_util.h"

using namespace std::chrono_literals;
using minidl::DType;
using minidl::Tensor;
using minidl::dist::ProcessGroupShm;
using minidl::dist::ReduceOp;
using minidl::dist::ShmOptions;
using minidl::testing::error_of;
using minidl::testing::expected_reduce;
using minidl::testing::quick_options;
using minidl::testing::rank_tensor;
using minidl::testing::require;
using minidl::testing::require_equal;
using ::testing::HasSubstr;
namespace dist = minidl::dist;

namespace {

// A small segment (4 KB per slot: 1024 float32 per all_reduce piece) so that modest tensors
// already go through many pieces and beyond the whole segment (2 x ranks x 4 KB).
const ShmOptions kSmall{.slot_bytes = 4096};

struct WorldOptions {
  dist::ProcessGroupOptions pg = quick_options();
  ShmOptions shm = kSmall;
  bool final_rendezvous = true;  // false when a rank leaves early (it would never arrive)
};

std::vector<std::string> run_shm_world(int n, const std::function<std::string(ProcessGroupShm&)>& fn,
                                       WorldOptions options = {}) {
  return minidl::testing::run_world<ProcessGroupShm>(
      n,
      [&](dist::TCPStore& store, int rank, int size) {
        return std::make_unique<ProcessGroupShm>(store, rank, size, options.pg, options.shm);
      },
      fn, options.final_rendezvous);
}

// Random float32 values of every magnitude, the same on every call for (r, n).
Tensor random_floats(int r, int64_t n) {
  std::mt19937 gen(static_cast<unsigned>(1234 + r));
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = std::ldexp(mantissa(gen), exponent(gen));
  return minidl::from_vector(v, {n});
}

// The segments of this backend now in /dev/shm.
std::vector<std::string> segments_in_dev_shm() {
  std::vector<std::string> names;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind(std::string(dist::kShmNamePrefix).substr(1), 0) == 0) names.push_back(name);
    }
    ::closedir(d);
  }
  return names;
}

// Context switches of this process's threads other than the calling one, from /proc: how often
// they woke up (voluntary switches: each sleep in a wait, each wake-up after it).
int64_t other_threads_switches() {
  int64_t total = 0;
  const std::string self = std::to_string(::gettid());
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (dirent* e = ::readdir(d)) {
      const std::string tid = e->d_name;
      if (tid == "." || tid == ".." || tid == self) continue;
      std::ifstream status("/proc/self/task/" + tid + "/status");
      for (std::string line; std::getline(status, line);)
        if (line.rfind("voluntary_ctxt_switches:", 0) == 0) total += std::stoll(line.substr(24));
    }
    ::closedir(d);
  }
  return total;
}

}  // namespace

class ProcessGroupShmWorld : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Ranks, ProcessGroupShmWorld, ::testing::Values(2, 3),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

TEST_P(ProcessGroupShmWorld, AllReduceWithTheDefaultSegmentTakesTensorsLargerThanIt) {
  const int world = GetParam();
  WorldOptions options;
  options.shm = ShmOptions{};  // 256 KB slots: 2 * world * 256 KB of data
  const int64_t n = 3 * world * (256 << 10) / 4 + 5;  // 1.5 segments of float32, not a multiple of a piece
  EXPECT_NO_THROW(run_shm_world(
      world,
      [world, n](ProcessGroupShm& pg) {
        Tensor t = rank_tensor(pg.rank(), n, DType::Float32);
        pg.all_reduce(t);
        require_equal(t, expected_reduce(world, n, DType::Float32, ReduceOp::SUM), "float32 sum");
        return std::string();
      },
      options));
}

TEST_P(ProcessGroupShmWorld, AllReduceAddsInRankOrderAndEveryRankGetsTheSameBits) {
  // Random float32 values of magnitudes 2^-20..2^20: the sum's last bits depend on the order of
  // the additions. Every rank must get exactly (x0 + x1) + x2 ..., computed here in float32.
  const int world = GetParam();
  constexpr int64_t n = 5000;  // 5 pieces of the small segment
  EXPECT_NO_THROW(run_shm_world(world, [world](ProcessGroupShm& pg) {
    Tensor t = random_floats(pg.rank(), n);
    pg.all_reduce(t);
    std::vector<float> expected = random_floats(0, n).to_vector<float>();
    for (int r = 1; r < world; ++r) {
      std::vector<float> x = random_floats(r, n).to_vector<float>();
      for (size_t i = 0; i < expected.size(); ++i) expected[i] = expected[i] + x[i];
    }
    require_equal(t, minidl::from_vector(expected, {n}), "rank-order sum on rank " + std::to_string(pg.rank()));
    // 1 + 1e8 - 1e8 is 0 in float32 in rank order, 1 in any order that adds the large ones first.
    if (world == 3) {
      Tensor c = minidl::full({3}, pg.rank() == 0 ? 1.0 : pg.rank() == 1 ? 1e8 : -1e8);
      pg.all_reduce(c);
      require_equal(c, minidl::zeros({3}), "1 + 1e8 + -1e8");
    }
    // Every rank's bits, compared byte for byte.
    std::string mine(static_cast<const char*>(t.raw_data()), static_cast<size_t>(n) * 4);
    std::vector<std::string> all = pg.all_gather_object(mine);
    for (int r = 0; r < world; ++r)
      require(all[static_cast<size_t>(r)] == mine, "rank " + std::to_string(r) + " holds other bits");
    return std::string();
  }));
}

TEST_P(ProcessGroupShmWorld, AllGatherOfRowsOfDifferentLengthsIsAnErrorOnEveryRankNamingThem) {
  const int world = GetParam();
  auto errors = run_shm_world(world, [](ProcessGroupShm& pg) {
    return error_of([&] { pg.all_gather(minidl::zeros({2, pg.rank() + 1})); });
  });
  for (const std::string& err : errors) EXPECT_THAT(err, HasSubstr("ranks disagree")) << err;
}

TEST(ProcessGroupShm, GivesTheSameBitsAsGlooOnTwoRanks) {
  // With two ranks every order of the sum is x0 + x1, so the two backends must agree exactly.
  EXPECT_NO_THROW(run_shm_world(2, [](ProcessGroupShm& shm) {
    dist::WorldInfo w = dist::world_info_from_env();
    dist::TCPStore store(w.master_addr, {.port = w.master_port, .is_server = false, .timeout = 10s});
    dist::ProcessGroupGloo gloo(store, w.rank, w.world_size, quick_options());
    for (ReduceOp op : {ReduceOp::SUM, ReduceOp::AVG, ReduceOp::MAX, ReduceOp::MIN}) {
      Tensor a = random_floats(shm.rank(), 4099), b = a.clone();
      shm.all_reduce(a, op);
      gloo.all_reduce(b, op);
      require_equal(a, b, std::string("shm vs gloo, ") + minidl::dist::reduce_op_name(op));
    }
    Tensor in = random_floats(shm.rank(), 4100).view({2050, 2});
    require_equal(shm.reduce_scatter(in), gloo.reduce_scatter(in), "reduce_scatter");
    std::vector<Tensor> x = shm.all_gather(in), y = gloo.all_gather(in);
    for (size_t r = 0; r < 2; ++r) require_equal(x[r], y[r], "all_gather");
    return std::string();
  }));
}

TEST(ProcessGroupShm, BlockingCollectivesRunOnTheCallerWithoutWakingTheCommunicationThread) {
  // 200 blocking all-reduces, broadcasts and barriers each leave the communication thread asleep:
  // at most a stray wake-up or two among the process's other threads (0 or 1 in practice). Handed
  // to the thread instead (the *_async form, then wait), the same calls wake it about 100-200 times.
  EXPECT_NO_THROW(run_shm_world(2, [](ProcessGroupShm& pg) {
    Tensor t = rank_tensor(pg.rank(), 64, DType::Float32);
    pg.all_reduce_async(t, ReduceOp::MAX)->wait();  // the thread has started and gone to sleep
    const auto woken_by = [](const char* what, const std::function<void()>& call) {
      const int64_t before = other_threads_switches();
      for (int i = 0; i < 200; ++i) call();
      const int64_t woke = other_threads_switches() - before;
      require(woke <= 5, std::string("blocking ") + what + " leave the other threads asleep, they woke " +
                             std::to_string(woke) + " times");
    };
    woken_by("all-reduces", [&] { pg.all_reduce(t, ReduceOp::MAX); });
    require_equal(t, expected_reduce(2, 64, DType::Float32, ReduceOp::MAX), "the maxima");
    Tensor b = rank_tensor(pg.rank(), 64, DType::Float32);
    woken_by("broadcasts", [&] { pg.broadcast(b, 1); });
    require_equal(b, rank_tensor(1, 64, DType::Float32), "rank 1's tensor");
    woken_by("barriers", [&] { pg.barrier(); });
    return std::string();
  }));
}

TEST(ProcessGroupShm, ARankThatExitsMidCollectiveMakesTheOthersFailNamingIt) {
  // Rank 1 leaves with _exit while it and the others run a long stream of all-reduces. With a
  // 20 s timeout, ranks 0 and 2 must fail within a second or two, naming rank 1 and its pid,
  // and the group must then refuse every call.
  WorldOptions options;
  options.pg = quick_options(20s);
  options.final_rendezvous = false;
  const auto start = std::chrono::steady_clock::now();
  auto results = run_shm_world(
      3,
      [](ProcessGroupShm& pg) -> std::string {
        if (pg.rank() == 1)
          std::thread([] {
            std::this_thread::sleep_for(200ms);
            ::_exit(0);
          }).detach();
        Tensor t = minidl::ones({1 << 18});
        const auto t0 = std::chrono::steady_clock::now();
        std::string err;
        while (err.empty() && std::chrono::steady_clock::now() - t0 < 10s) err = error_of([&] { pg.all_reduce(t); });
        std::string again = error_of([&] { pg.barrier(); });
        return err + "|" + std::to_string(::getpid()) + "|" + again;
      },
      options);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s) << "the others must notice the exit, not time out";
  EXPECT_EQ(results[1], "");  // it never returned
  // Whoever notices first names rank 1's exit; the other names it too, or (when it woke to the
  // first one's failure before it saw the exit itself) names that rank as the one that gave up.
  int named = 0;
  for (int r : {0, 2}) {
    const std::string& res = results[static_cast<size_t>(r)];
    EXPECT_THAT(res, HasSubstr("all_reduce #")) << r;
    const bool exit_named = res.find("(float32[262144]): rank 1 (pid ") != std::string::npos &&
                            res.find(") exited while the others waited") != std::string::npos;
    const bool gave_up =
        res.find("(float32[262144]): rank " + std::to_string(2 - r) + " gave up on it") != std::string::npos;
    EXPECT_TRUE(exit_named || gave_up) << r << ": " << res;
    named += exit_named ? 1 : 0;
    EXPECT_THAT(res.substr(res.rfind('|')), HasSubstr("barrier: the process group is broken by an earlier failure"));
  }
  EXPECT_GE(named, 1) << "no rank named rank 1's exit: " << results[0] << " / " << results[2];
}

TEST(ProcessGroupShm, ARankThatSkipsACollectiveMakesTheOthersTimeOutNamingIt) {
  // Rank 1 skips collective #2 and stays alive past the timeout; ranks 0 and 2 must fail within
  // it, naming the collective, its number and rank 1, and then fail fast.
  WorldOptions options;
  options.pg = quick_options(1000ms);
  const auto start = std::chrono::steady_clock::now();
  auto results = run_shm_world(
      3,
      [](ProcessGroupShm& pg) -> std::string {
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
      options);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 8s);
  EXPECT_EQ(results[1], "skipped");
  bool one_timed_out = false;
  for (int r : {0, 2}) {
    const std::string& res = results[static_cast<size_t>(r)];
    EXPECT_THAT(res, HasSubstr("all_reduce #2 (float32[4])")) << r;
    EXPECT_THAT(res, HasSubstr("rank 1 did not arrive")) << r;
    one_timed_out = one_timed_out || res.find("timed out after 1000 ms: rank 1 did not arrive") != std::string::npos;
    long long waited = std::stoll(res.substr(res.find('|') + 1));
    EXPECT_GE(waited, 900) << "rank " << r;
    EXPECT_LT(waited, 2400) << "rank " << r << " waited longer than the timeout allows";
    EXPECT_THAT(res.substr(res.rfind('|')), HasSubstr("barrier: the process group is broken by an earlier failure"));
  }
  EXPECT_TRUE(one_timed_out) << results[0] << "\n" << results[2];
}

TEST(ProcessGroupShm, NoSegmentIsLeftBehindWhenRankZeroIsKilled) {
  // Rank 0 writes down its segment's name and kills itself with SIGKILL after a collective, as
  // a crash or an OOM kill would; the name must already be gone from /dev/shm.
  minidl::testing::TempDir dir;
  const std::string file = dir.path() + "/segment";
  const std::string err = error_of([&] {
    WorldOptions options;
    options.final_rendezvous = false;
    run_shm_world(
        2,
        [&](ProcessGroupShm& pg) -> std::string {
          Tensor t = minidl::ones({10});
          pg.all_reduce(t);
          if (pg.rank() == 0) {
            std::ofstream(file) << pg.segment_name();
            ::raise(SIGKILL);
          }
          std::string e = error_of([&] { pg.barrier(); });
          return e;
        },
        options);
  });
  EXPECT_THAT(err, HasSubstr("rank 0 failed"));
  std::string name;
  std::ifstream(file) >> name;
  ASSERT_EQ(name.rfind(dist::kShmNamePrefix, 0), 0u) << name;
  struct stat st {};
  EXPECT_NE(::stat(("/dev/shm" + name).c_str(), &st), 0) << name << " is still in /dev/shm";
  for (const std::string& left : segments_in_dev_shm()) EXPECT_NE("/" + left, name);
}

TEST(ProcessGroupShm, ASegmentNameIsGoneOnceTheGroupHasRunACollective) {
  auto names = run_shm_world(2, [](ProcessGroupShm& pg) {
    pg.barrier();  // rank 0 has finished its constructor (which unlinks the name) before this
    struct stat st {};
    require(::stat(("/dev/shm" + pg.segment_name()).c_str(), &st) != 0, pg.segment_name() + " is still linked");
    return pg.segment_name();
  });
  EXPECT_EQ(names[0], names[1]);
  EXPECT_EQ(names[0].rfind(dist::kShmNamePrefix, 0), 0u);
  EXPECT_EQ(names[0].size(), std::string(dist::kShmNamePrefix).size() + 16) << names[0];
}

TEST(ProcessGroupShm, TwoJobsOnOneHostRunAtOnce) {
  // Two worlds of 2 ranks started together, each all-reducing its own values for a while: each
  // gets its own segment and only its own sums.
  minidl::testing::EnvGuard env;
  // Two ports picked one after the other, not by the two spawns at once: a port that bind(0)
  // has just handed out and that was closed again may be handed out again at once.
  const uint16_t port_a = dist::find_free_port("127.0.0.1");
  uint16_t port_b = dist::find_free_port("127.0.0.1");
  while (port_b == port_a) port_b = dist::find_free_port("127.0.0.1");
  auto job = [](double offset, uint16_t port) {
    return dist::spawn_with_results(
        2,
        [offset](int) {
          dist::WorldInfo w = dist::world_info_from_env();
          dist::TCPStore store(w.master_addr, {.port = w.master_port, .is_server = w.rank == 0, .timeout = 10s});
          std::string name;
          {
            ProcessGroupShm pg(store, w.rank, w.world_size, quick_options(), kSmall);
            name = pg.segment_name();
            for (int i = 0; i < 300; ++i) {
              Tensor t = minidl::full({3000}, offset + w.rank + i);
              pg.all_reduce(t);
              require_equal(t, minidl::full({3000}, 2 * (offset + i) + 1), "job " + std::to_string(offset));
            }
          }
          minidl::testing::count_rendezvous(store, w.rank, w.world_size);
          return name;
        },
        dist::SpawnOptions{.master_port = port});
  };
  std::vector<std::string> a, b;
  std::string error_a, error_b;
  std::thread ta([&] { error_a = error_of([&] { a = job(0, port_a); }); });
  std::thread tb([&] { error_b = error_of([&] { b = job(1000, port_b); }); });
  ta.join();
  tb.join();
  EXPECT_EQ(error_a, "");
  EXPECT_EQ(error_b, "");
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_NE(a[0], b[0]) << "two jobs must not share a segment";
}

TEST(ProcessGroupShm, DebugModeNamesTheFirstRankThatCallsADifferentCollective) {
  WorldOptions options;
  options.pg = quick_options(5000ms, true);
  auto start = std::chrono::steady_clock::now();
  auto results = run_shm_world(
      3,
      [](ProcessGroupShm& pg) {
        Tensor t = minidl::ones({4});
        pg.all_reduce(t);  // #1 agrees
        return error_of([&] {
          if (pg.rank() == 2)
            pg.broadcast(t, 0);  // #2 differs on rank 2
          else
            pg.all_reduce(t);
        });
      },
      options);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 4s) << "debug mode must fail fast, not time out";
  for (const std::string& err : results)
    EXPECT_EQ(err,
              "MINIDL_DIST_DEBUG: collective #2 mismatch: rank 0 called all_reduce float32[4] op=sum, "
              "rank 2 called broadcast float32[4] root=0");
}

TEST(ProcessGroupShm, RanksOnDifferentHostsAreRefusedNamingThem) {
  minidl::testing::EnvGuard env;
  auto errors = dist::spawn_with_results(3, [](int) {
    dist::WorldInfo w = dist::world_info_from_env();
    dist::TCPStore store(w.master_addr, {.port = w.master_port, .is_server = w.rank == 0, .timeout = 10s});
    // ranks 0 and 1 on "node-a", rank 2 on "node-b"
    const ShmOptions shm{.host_id = w.rank < 2 ? "node-a" : "node-b"};
    std::string err = error_of([&] { ProcessGroupShm pg(store, w.rank, w.world_size, quick_options(), shm); });
    minidl::testing::count_rendezvous(store, w.rank, w.world_size);
    return err;
  });
  for (int r = 0; r < 3; ++r)
    EXPECT_THAT(errors[static_cast<size_t>(r)],
                HasSubstr("ProcessGroupShm: rank " + std::to_string(r) +
                          " of 3: rank 2 runs on another host than rank 0 (node-b vs node-a); shared memory needs "
                          "every rank on one host (use the hierarchical or gloo backend)"));
}

TEST(ProcessGroupShm, InitPicksShmForAutoOnOneHostAndByName) {
  for (const std::string backend : {"auto", "shm"}) {
    minidl::testing::EnvGuard env;
    auto results = dist::spawn_with_results(2, [&](int) {
      dist::init({.backend = backend, .timeout = 10s});
      std::string name = dist::default_group().backend_name();
      Tensor t = minidl::full({5}, dist::rank() + 1.0);
      dist::all_reduce(t);
      require_equal(t, minidl::full({5}, 3.0), "all_reduce through dist::");
      dist::barrier();
      dist::shutdown();
      return name;
    });
    EXPECT_EQ(results[0], "shm") << backend;
    EXPECT_EQ(results[1], "shm") << backend;
  }
  EXPECT_TRUE(dist::is_backend_available("shm"));
  EXPECT_TRUE(dist::is_backend_available("auto"));
}
