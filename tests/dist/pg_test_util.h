// tests/dist/pg_test_util.h — helpers for the process-group tests: run a function in N forked
// ranks that each own a TCPStore and a ProcessGroupGloo (created in the child, never in the
// parent: Gloo starts threads, which do not survive fork), and checks that throw (GoogleTest
// assertions in a child would be lost; an exception reaches the parent through spawn's message).
#pragma once
#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "minidl/dist/env.h"
#include "minidl/dist/process_group_gloo.h"
#include "minidl/dist/spawn.h"
#include "minidl/dist/store.h"
#include "minidl/tensor/tensor_all.h"
#include "tests/dist/dist_test_util.h"

namespace minidl::testing {

inline dist::ProcessGroupOptions quick_options(std::chrono::milliseconds timeout = std::chrono::seconds(5),
                                               std::optional<bool> debug = false) {
  return dist::ProcessGroupOptions{.timeout = timeout, .debug = debug};
}

// Runs fn(*group) on every rank of a world of n forked processes, each group made in the child
// by make(store, rank, world size); returns each rank's result. With final_rendezvous, rank 0
// (which hosts the store) keeps it up until every rank has torn its group down; pass false when
// a rank leaves early (it would never arrive).
template <class Group>
std::vector<std::string> run_world(int n,
                                   const std::function<std::unique_ptr<Group>(dist::TCPStore&, int, int)>& make,
                                   const std::function<std::string(Group&)>& fn, bool final_rendezvous = true) {
  EnvGuard env;  // the parent's variables must not leak into the children
  return dist::spawn_with_results(n, [&](int) {
    dist::WorldInfo w = dist::world_info_from_env();
    dist::TCPStore store(w.master_addr,
                         {.port = w.master_port, .is_server = w.rank == 0, .timeout = std::chrono::seconds(10)});
    std::string result;
    {
      std::unique_ptr<Group> group = make(store, w.rank, w.world_size);
      result = fn(*group);
    }
    if (final_rendezvous) count_rendezvous(store, w.rank, w.world_size);
    return result;
  });
}

// run_world with a ProcessGroupGloo on every rank.
inline std::vector<std::string> run_gloo_world(int n, const std::function<std::string(dist::ProcessGroupGloo&)>& fn,
                                               dist::ProcessGroupOptions options = quick_options()) {
  return run_world<dist::ProcessGroupGloo>(
      n,
      [&](dist::TCPStore& store, int rank, int size) {
        return std::make_unique<dist::ProcessGroupGloo>(store, rank, size, options);
      },
      fn);
}

// ---- the values every collective test reduces ----
// Rank r's element i: small integers, exact in every dtype (non-negative for uint8), so every
// order of a sum gives the same bits.
inline double rank_value(int r, int64_t i, DType dtype) {
  const double v = static_cast<double>((i * 7 + r * 13) % 23 - 11);
  return dtype == DType::UInt8 ? v + 11 : v;
}

// Rank r's tensor of n such values (salt shifts i).
inline Tensor rank_tensor(int r, int64_t n, DType dtype, int64_t salt = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = rank_value(r, i + salt, dtype);
  return from_vector(v, {n}, dtype);
}

// What every rank should hold after all_reduce(op) of rank_tensor over ranks 0..world-1.
inline Tensor expected_reduce(int world, int64_t n, DType dtype, dist::ReduceOp op) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double acc = rank_value(0, i, dtype);
    for (int r = 1; r < world; ++r) {
      const double x = rank_value(r, i, dtype);
      acc = op == dist::ReduceOp::MAX ? std::max(acc, x) : op == dist::ReduceOp::MIN ? std::min(acc, x) : acc + x;
    }
    if (op == dist::ReduceOp::AVG)  // sum, then divide in the dtype's own arithmetic
      acc = dtype == DType::Float32 ? static_cast<double>(static_cast<float>(acc) / static_cast<float>(world))
                                    : acc / world;
    v[static_cast<size_t>(i)] = acc;
  }
  return from_vector(v, {n}, dtype);
}

inline void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("check failed: " + what);
}

// Bitwise equality of dtype, shape and values, or an exception naming `what` and the first difference.
inline void require_equal(const Tensor& actual, const Tensor& expected, const std::string& what) {
  if (actual.dtype() != expected.dtype() || actual.shape() != expected.shape())
    throw std::runtime_error(what + ": got " + actual.desc() + ", expected " + expected.desc());
  std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != e[i]) {
      std::ostringstream os;
      os << what << ": element " << i << " is " << a[i] << ", expected " << e[i];
      throw std::runtime_error(os.str());
    }
}

// Runs stmt and returns its exception's message ("" if it did not throw).
template <class F> std::string error_of(F&& stmt) {
  try {
    stmt();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace minidl::testing
