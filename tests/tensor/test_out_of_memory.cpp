// tests/tensor/test_out_of_memory.cpp — a CPU tensor larger than the machine's memory says how
// much it asked for, and is still a std::bad_alloc. The allocation runs in a forked child whose
// address space (RLIMIT_AS) is limited, so the test process itself keeps its memory.
#include "minidl/kernels/caching_allocator.h"
#include "tests/common/testing.h"

using namespace minidl;
using ::testing::HasSubstr;
using ::testing::StartsWith;

using minidl::testing::run_in_child;

TEST(CpuOutOfMemory, AHugeTensorSaysHowMuchItAskedForAndIsABadAlloc) {
  const size_t bytes = minidl::testing::more_bytes_than_memory();
  const std::string out = run_in_child([bytes] {
    minidl::testing::limit_address_space(size_t(256) << 20);
    try {
      Tensor t = empty({static_cast<int64_t>(bytes / 4)}, DType::Float32);
      return std::string("allocated");
    } catch (const std::bad_alloc& e) {
      return std::string("bad_alloc: ") + e.what();
    }
  });
  EXPECT_THAT(out, StartsWith("bad_alloc: out of memory: cannot allocate " + kernels::format_bytes(bytes) +
                              " for a CPU tensor (" + std::to_string(bytes) + " bytes); "));
  EXPECT_THAT(out, HasSubstr("(see free memory and `ulimit -v`)"));
}
