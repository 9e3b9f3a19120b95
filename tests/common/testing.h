// tests/common/testing.h — helpers shared by the test executables: tensor comparison, seeded
// input values for the kernel tests, the error-message matcher used by the bad-input tests, and
// an address-space limit for the out-of-memory tests.
#pragma once
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "minidl/tensor/tensor_all.h"

namespace minidl::testing {

// Max |a - b| over elements; shapes must be equal (fails the test otherwise).
double max_abs_diff(const Tensor& a, const Tensor& b);
// Asserts shapes equal and |a - b| <= atol + rtol * |b| element-wise, reporting the worst element.
void expect_close(const Tensor& actual, const Tensor& expected, double rtol, double atol, const std::string& what = "");
// Asserts shapes equal and |actual - expected| <= rel * bound + 1e-6 element-wise, where bound is
// the same sum of products taken over the operands' absolute values (a CUDA tensor is compared on
// the host). The error of a summation order or algorithm (Winograd's transforms, bfloat16 products
// added in pairs, cuDNN's plans, TF32's rounded operands) grows with that sum, not with the result,
// which may cancel: rel bounds it as a fraction of the sum.
void expect_within_product_bound(const Tensor& actual, const Tensor& expected, const Tensor& bound, double rel,
                                 const std::string& what);
// Asserts bit-identical contents (same dtype and shape).
void expect_equal(const Tensor& actual, const Tensor& expected, const std::string& what = "");
// n deterministic floats in [-1, 1) from a linear congruential sequence started by seed: raw
// inputs for the kernel tests, the same on every machine.
std::vector<float> values(size_t n, uint32_t seed);
// Limits this process's address space (RLIMIT_AS) to what it maps now plus slack_bytes, so that
// a larger allocation fails. Call it only in a forked child: the limit cannot be raised again.
void limit_address_space(size_t slack_bytes);
// This process's resident memory now (/proc/self/statm) and its peak so far (getrusage), in MiB.
int64_t resident_mib();
int64_t peak_resident_mib();
// Bytes of a float32 tensor larger than this machine's memory (its memory + 1 GiB, a multiple of
// 4): larger than the CPU allocator's reserved range too (tensor/cpu_segments.h), so asking for it
// fails whatever range a forked parent reserved before its child limited its address space.
size_t more_bytes_than_memory();
// Runs fn in a forked child and returns the string it returns, or "threw: <what>" when it throws
// a std::exception: for limits (setrlimit) that must not touch the test process itself.
std::string run_in_child(const std::function<std::string()>& fn);

// Runs body in a fresh copy of this test program (GoogleTest's "threadsafe" death-test style
// re-executes it for this test alone, with this process's environment): the test passes when body
// returns and what the copy writes to stderr matches `err`; an exception's message (a failed
// rank's, from spawn) is printed as the failure.
void in_fresh_process(const std::function<void()>& body,
                      const ::testing::Matcher<const std::string&>& err = ::testing::_);
// MINIDL_CPU_CAPABILITY (kernels/cpu/cpu_features.h) set to value for a scope, then restored. A
// program reads it once as it starts, so it reaches the fresh copies of this program started in
// the scope (GoogleTest's "threadsafe" death tests), not this one.
class CpuCapabilityVariable {
 public:
  explicit CpuCapabilityVariable(const char* value);
  ~CpuCapabilityVariable();
  CpuCapabilityVariable(const CpuCapabilityVariable&) = delete;
  CpuCapabilityVariable& operator=(const CpuCapabilityVariable&) = delete;

 private:
  bool had_ = false;
  std::string old_;
};
// Runs body in a fresh copy of this test program capped at MINIDL_CPU_CAPABILITY=cap: the test
// fails unless body returns true and what the copy writes to stderr matches `err`.
void expect_true_under_cpu_capability(const char* cap, const std::function<bool()>& body,
                                      const ::testing::Matcher<const std::string&>& err = ::testing::_);

}  // namespace minidl::testing

// EXPECT_THROW_MSG(stmt, ExceptionType, "substring"): throws that type and the message contains it.
#define EXPECT_THROW_MSG(stmt, etype, substr)                               \
  EXPECT_THROW(                                                             \
      {                                                                     \
        try {                                                               \
          stmt;                                                             \
        } catch (const etype& e) {                                          \
          EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr(substr)); \
          throw;                                                            \
        }                                                                   \
      },                                                                    \
      etype)
