// tests/tensor/test_out_of_memory.cpp — a CPU tensor that does not fit says how much it asked
// for, and is still a std::bad_alloc. The allocation runs in a forked child whose address space
// (RLIMIT_AS) is limited, so the test process itself keeps its memory.
#include "tests/common/testing.h"

using namespace minidl;
using ::testing::HasSubstr;
using ::testing::StartsWith;

using minidl::testing::run_in_child;

TEST(CpuOutOfMemory, AHugeTensorSaysHowMuchItAskedForAndIsABadAlloc) {
  const std::string out = run_in_child([] {
    minidl::testing::limit_address_space(size_t(256) << 20);
    try {
      Tensor t = empty({int64_t(3) << 27}, DType::Float32);  // 1.5 GiB
      return std::string("allocated");
    } catch (const std::bad_alloc& e) {
      return std::string("bad_alloc: ") + e.what();
    }
  });
  EXPECT_THAT(out,
              StartsWith("bad_alloc: out of memory: cannot allocate 1.50 GiB for a CPU tensor (1610612736 bytes); "));
  EXPECT_THAT(out, HasSubstr("(see free memory and `ulimit -v`)"));
}
