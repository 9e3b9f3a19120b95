// tests/tensor/test_out_of_memory.cpp — a CPU tensor that does not fit says how much it asked
// for, and is still a std::bad_alloc. The allocation runs in a forked child whose address space
// (RLIMIT_AS) is limited, so the test process itself keeps its memory.
#include <sys/wait.h>
#include <unistd.h>

#include <functional>

#include "tests/common/testing.h"

using namespace minidl;
using ::testing::HasSubstr;
using ::testing::StartsWith;

namespace {

// Runs fn in a forked child and returns the string it returns (or the text of what it threw).
std::string run_in_child(const std::function<std::string()>& fn) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = ::fork();
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

}  // namespace

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
