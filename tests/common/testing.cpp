// tests/common/testing.cpp — tensor comparison helpers for the tests.
#include "tests/common/testing.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace minidl::testing {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape()) << "shape " << shape_str(a.shape()) << " vs " << shape_str(b.shape());
  if (a.shape() != b.shape()) return INFINITY;
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) m = std::max(m, std::fabs(va[i] - vb[i]));
  return m;
}

void expect_close(const Tensor& actual, const Tensor& expected, double rtol, double atol, const std::string& what) {
  ASSERT_EQ(actual.shape(), expected.shape())
      << what << ": shape " << shape_str(actual.shape()) << " vs expected " << shape_str(expected.shape());
  const auto va = actual.to_vector<double>(), vb = expected.to_vector<double>();
  size_t worst = 0, bad = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < va.size(); ++i) {
    const double tol = atol + rtol * std::fabs(vb[i]);
    const double err = std::fabs(va[i] - vb[i]);
    const bool ok = err <= tol || (std::isnan(va[i]) && std::isnan(vb[i]));
    if (!ok) {
      ++bad;
      if (err - tol > worst_excess) {
        worst_excess = err - tol;
        worst = i;
      }
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << va.size() << " elements differ; worst at flat index " << worst
                     << ": got " << va[worst] << ", expected " << vb[worst] << " (rtol " << rtol << ", atol " << atol
                     << ")";
}

void expect_within_product_bound(const Tensor& actual, const Tensor& expected, const Tensor& bound, double rel,
                                 const std::string& what) {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  ASSERT_EQ(actual.shape(), bound.shape()) << what;
  const auto a = actual.cpu().to_vector<double>(), e = expected.cpu().to_vector<double>(),
             b = bound.cpu().to_vector<double>();
  size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double ratio = std::fabs(a[i] - e[i]) / (rel * b[i] + 1e-6);
    if (!(ratio <= 1)) ++bad;  // NaN too
    if (!(ratio <= worst_ratio)) worst_ratio = ratio, worst = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << a.size() << " elements differ; worst at flat index " << worst
                     << ": got " << a[worst] << ", expected " << e[worst] << ", sum of |products| " << b[worst]
                     << " (allowed: " << rel << " of it)";
}

void expect_equal(const Tensor& actual, const Tensor& expected, const std::string& what) {
  ASSERT_EQ(actual.dtype(), expected.dtype()) << what;
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  const auto va = actual.to_vector<double>(), vb = expected.to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i)
    if (va[i] != vb[i] && !(std::isnan(va[i]) && std::isnan(vb[i]))) {
      ADD_FAILURE() << what << ": element " << i << " is " << va[i] << ", expected " << vb[i];
      return;
    }
}

std::vector<float> values(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 1;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(s >> 8) / static_cast<float>(1 << 23) - 1.0f;
  }
  return v;
}

void limit_address_space(size_t slack_bytes) {
  std::ifstream status("/proc/self/status");
  size_t mapped_kib = 0;
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmSize:", 0) == 0) mapped_kib = std::stoull(line.substr(7));
  }
  if (mapped_kib == 0) throw std::runtime_error("limit_address_space: no VmSize in /proc/self/status");
  const rlim_t bytes = static_cast<rlim_t>(mapped_kib * 1024 + slack_bytes);
  const rlimit limit{bytes, bytes};
  if (::setrlimit(RLIMIT_AS, &limit) != 0) throw std::runtime_error("limit_address_space: setrlimit failed");
}

int64_t resident_mib() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * ::sysconf(_SC_PAGESIZE) / (1 << 20);
}

int64_t peak_resident_mib() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024;  // Linux: KiB
}

size_t more_bytes_than_memory() {
  const size_t memory = static_cast<size_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return (memory / 4 + (size_t(1) << 28)) * 4;
}

std::string run_in_child(const std::function<std::string()>& fn) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("run_in_child: pipe failed");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("run_in_child: fork failed");
  if (pid == 0) {
    ::close(fds[0]);
    std::string out;
    try {
      out = fn();
    } catch (const std::exception& e) {
      out = std::string("threw: ") + e.what();
    }
    (void)!::write(fds[1], out.data(), out.size());
    _exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  ::waitpid(pid, nullptr, 0);
  return out;
}

namespace {
constexpr const char* kCapabilityName = "MINIDL_CPU_CAPABILITY";
}  // namespace

CpuCapabilityVariable::CpuCapabilityVariable(const char* value) {
  const char* old = std::getenv(kCapabilityName);
  had_ = old != nullptr;
  if (had_) old_ = old;
  ::setenv(kCapabilityName, value, 1);
}

CpuCapabilityVariable::~CpuCapabilityVariable() {
  if (had_)
    ::setenv(kCapabilityName, old_.c_str(), 1);
  else
    ::unsetenv(kCapabilityName);
}

void in_fresh_process(const std::function<void()>& body, const ::testing::Matcher<const std::string&>& err) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        int code = 0;
        try {
          body();
        } catch (const std::exception& e) {
          std::fprintf(stderr, "%s\n", e.what());
          code = 1;
        }
        std::fflush(nullptr);
        std::_Exit(code);
      },
      ::testing::ExitedWithCode(0), err);
}

void expect_true_under_cpu_capability(const char* cap, const std::function<bool()>& body,
                                      const ::testing::Matcher<const std::string&>& err) {
  SCOPED_TRACE(std::string(kCapabilityName) + "=" + cap);
  const CpuCapabilityVariable var(cap);
  in_fresh_process(
      [&] {
        if (!body()) throw std::runtime_error(std::string("false under ") + kCapabilityName + "=" + cap);
      },
      err);
}

}  // namespace minidl::testing
