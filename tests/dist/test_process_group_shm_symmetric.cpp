// tests/dist/test_process_group_shm_symmetric.cpp — ProcessGroupShm::empty_symmetric: tensors
// that every rank maps, all-reduced in place between the ranks' copies. Checked bit for bit
// against the rank-order sum and against the copying path, a part of a buffer, reduce_scatter
// into this rank's slab, all_gather_into_tensor, no name left in
// /dev/shm, a tensor that outlives its group, and debug mode naming a rank that passes an
// ordinary tensor where the others pass symmetric ones.
#include <dirent.h>

#include <cmath>
#include <cstring>
#include <random>

#include "minidl/dist/process_group_shm.h"
#include "tests/common/testing.h"
#include "tests/dist/pg_test_util.h"

using namespace std::chrono_literals;
using minidl::DType;
using minidl::Tensor;
using minidl::dist::ProcessGroupShm;
using minidl::dist::ReduceOp;
using minidl::testing::error_of;
using minidl::testing::quick_options;
using minidl::testing::require;
using minidl::testing::require_equal;
using ::testing::HasSubstr;
namespace dist = minidl::dist;

namespace {

std::vector<std::string> run_world(int n, const std::function<std::string(ProcessGroupShm&)>& fn,
                                   dist::ProcessGroupOptions options = quick_options()) {
  return minidl::testing::run_world<ProcessGroupShm>(
      n,
      [&](dist::TCPStore& store, int rank, int size) {
        return std::make_unique<ProcessGroupShm>(store, rank, size, options);
      },
      fn);
}

// Random float32 values of every magnitude: the sum's last bits depend on the order of additions.
std::vector<float> random_floats(int r, int64_t n) {
  std::mt19937 gen(static_cast<unsigned>(99 + r));
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = std::ldexp(mantissa(gen), exponent(gen));
  return v;
}

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

}  // namespace

TEST(ProcessGroupShmSymmetric, AllReduceInPlaceGivesTheRankOrderSumAndTheCopyingPathsBits) {
  const int64_t n = 300007;  // not a multiple of the parts' alignment
  EXPECT_NO_THROW(run_world(3, [n](ProcessGroupShm& pg) {
    Tensor sym = pg.empty_symmetric({n}, DType::Float32);
    require_equal(sym, minidl::zeros({n}), "a new symmetric tensor is zero-filled");
    const std::vector<float> mine = random_floats(pg.rank(), n);
    std::memcpy(sym.data<float>(), mine.data(), mine.size() * sizeof(float));
    Tensor plain = sym.clone();  // an ordinary tensor: the copying path
    pg.all_reduce(sym);
    pg.all_reduce(plain);
    std::vector<float> expected = random_floats(0, n);
    for (int r = 1; r < 3; ++r) {
      const std::vector<float> x = random_floats(r, n);
      for (size_t i = 0; i < expected.size(); ++i) expected[i] = expected[i] + x[i];
    }
    require_equal(sym, minidl::from_vector(expected, {n}), "symmetric all_reduce on rank " + std::to_string(pg.rank()));
    require_equal(plain, sym, "the copying path's bits");
    // AVG and MAX on a part of the buffer, the rest untouched.
    Tensor part = sym.narrow(0, 1000, 5000);
    part.fill_(static_cast<double>(pg.rank() + 1));
    pg.all_reduce(part, ReduceOp::AVG);
    require_equal(part, minidl::full({5000}, 2.0), "AVG of a part");
    require(sym.data<float>()[999] == expected[999] && sym.data<float>()[6000] == expected[6000],
            "all_reduce of a part leaves the rest alone");
    Tensor ints = pg.empty_symmetric({7}, DType::Int64);
    ints.fill_(static_cast<double>(10 * pg.rank()));
    pg.all_reduce(ints, ReduceOp::MAX);
    require_equal(ints, minidl::full({7}, 20.0, DType::Int64), "MAX of int64");
    return std::string();
  }));
}

// reduce_scatter of a symmetric tensor: slab r of the all_reduce's bits, AVG in place into this
// rank's own slab (DDP's buckets under ZeroRedundancyOptimizer), the other slabs untouched.
TEST(ProcessGroupShmSymmetric, ReduceScatterGivesTheAllReducesBitsInThisRanksSlab) {
  const int64_t n = 100003;  // per rank: not a multiple of the parts' alignment
  EXPECT_NO_THROW(run_world(3, [n](ProcessGroupShm& pg) {
    Tensor sym = pg.empty_symmetric({3 * n}, DType::Float32);
    const std::vector<float> mine = random_floats(pg.rank(), 3 * n);
    std::memcpy(sym.data<float>(), mine.data(), mine.size() * sizeof(float));
    Tensor reduced = sym.clone();  // the copying all_reduce's bits
    pg.all_reduce(reduced, ReduceOp::AVG);
    Tensor out = minidl::zeros({n});
    pg.reduce_scatter_async(sym, out, ReduceOp::AVG)->wait();
    const Tensor expected = reduced.narrow(0, pg.rank() * n, n);
    require_equal(out, expected, "reduce_scatter into another tensor on rank " + std::to_string(pg.rank()));
    Tensor slab = sym.narrow(0, pg.rank() * n, n);
    pg.reduce_scatter_async(sym, slab, ReduceOp::AVG)->wait();  // in place
    require_equal(slab, expected, "reduce_scatter into its own slab");
    for (int r = 0; r < 3; ++r)
      if (r != pg.rank())
        require_equal(sym.narrow(0, r * n, n), minidl::from_vector(mine, {3 * n}).narrow(0, r * n, n),
                      "the other slabs untouched");
    return std::string();
  }));
}

// all_gather_into_tensor: every rank's slab in every rank's tensor, from its own slab in place
// (symmetric: straight between the ranks' tensors) or from another tensor (an ordinary out: the
// all_gather's copies); the same result both ways.
TEST(ProcessGroupShmSymmetric, AllGatherIntoTensorInPlaceAndFromAnotherTensor) {
  const int64_t n = 70001;
  EXPECT_NO_THROW(run_world(3, [n](ProcessGroupShm& pg) {
    std::vector<float> expected;
    for (int r = 0; r < 3; ++r) {
      const std::vector<float> x = random_floats(r, n);
      expected.insert(expected.end(), x.begin(), x.end());
    }
    const Tensor mine = minidl::from_vector(random_floats(pg.rank(), n), {n});
    Tensor sym = pg.empty_symmetric({3 * n}, DType::Float32);
    sym.narrow(0, pg.rank() * n, n).copy_(mine);
    pg.all_gather_into_tensor(sym, sym.narrow(0, pg.rank() * n, n));
    require_equal(sym, minidl::from_vector(expected, {3 * n}), "in place, symmetric");
    Tensor sym2 = pg.empty_symmetric({3 * n}, DType::Float32);
    pg.all_gather_into_tensor(sym2, mine);
    require_equal(sym2, sym, "from another tensor, symmetric");
    Tensor plain = minidl::zeros({3 * n});
    pg.all_gather_into_tensor(plain, mine);
    require_equal(plain, sym, "an ordinary out");
    require(error_of([&] {
              pg.all_gather_into_tensor(plain, minidl::zeros({n + 1}));
            }).find("all_gather_into_tensor: out") != std::string::npos,
            "a wrong shape is refused");
    return std::string();
  }));
}

TEST(ProcessGroupShmSymmetric, LeavesNoNameInDevShmAndATensorMayOutliveItsGroup) {
  const auto before = segments_in_dev_shm();
  minidl::testing::EnvGuard env;
  auto results = dist::spawn_with_results(2, [](int) {
    dist::WorldInfo w = dist::world_info_from_env();
    dist::TCPStore store(w.master_addr, {.port = w.master_port, .is_server = w.rank == 0, .timeout = 10s});
    Tensor kept;
    {
      ProcessGroupShm pg(store, w.rank, w.world_size, quick_options());
      kept = pg.empty_symmetric({1024}, DType::Float32);
      kept.fill_(static_cast<double>(w.rank + 1));
      pg.all_reduce(kept);
    }
    minidl::add_(kept, minidl::ones({1024}));  // the mapping lives as long as the tensor
    require_equal(kept, minidl::full({1024}, 4.0), "the tensor after its group is gone");
    minidl::testing::count_rendezvous(store, w.rank, w.world_size);
    return std::string();
  });
  EXPECT_EQ(results, std::vector<std::string>(2, ""));
  EXPECT_EQ(segments_in_dev_shm(), before);
}

TEST(ProcessGroupShmSymmetric, DebugModeNamesARankThatPassesAnOrdinaryTensor) {
  auto results = run_world(
      2,
      [](ProcessGroupShm& pg) {
        Tensor sym = pg.empty_symmetric({4}, DType::Float32);
        return error_of([&] {
          Tensor t = pg.rank() == 1 ? sym.clone() : sym;
          pg.all_reduce(t);
        });
      },
      quick_options(5000ms, true));
  for (const std::string& err : results)
    EXPECT_EQ(err,
              "MINIDL_DIST_DEBUG: collective #2 mismatch: rank 0 called all_reduce float32[4] op=sum symmetric, "
              "rank 1 called all_reduce float32[4] op=sum");
}
