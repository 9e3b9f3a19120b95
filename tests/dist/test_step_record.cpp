// tests/dist/test_step_record.cpp — the ranks' step files that launchers read for their restart
// decisions: a private directory lives exactly as long as its StepDir (and is never removed by a
// copy), $MINIDL_STEP_DIR is used as it is, and read_step reads back what StepFile wrote.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "minidl/dist/step_record.h"
#include "tests/common/testing.h"
#include "tests/dist/dist_test_util.h"

namespace dist = minidl::dist;

namespace {

// Sets an environment variable for one scope (unset before and after).
struct ScopedEnv {
  ScopedEnv(const char* name, const std::string& value) : name_(name) { ::setenv(name, value.c_str(), 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  const char* name_;
};

}  // namespace

TEST(StepRecord, APrivateDirectoryLivesAsLongAsItsStepDir) {
  ::unsetenv("MINIDL_STEP_DIR");
  std::string path;
  {
    const dist::StepDir dir;
    path = dir.path();
    EXPECT_TRUE(std::filesystem::is_directory(path));
    ScopedEnv env("MINIDL_STEP_DIR", path);
    dist::StepFile(3).set(42);
    EXPECT_EQ(dist::read_step(path, 3), 42);
    EXPECT_TRUE(std::filesystem::is_directory(path)) << "the directory must outlive everything but its StepDir";
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(StepRecord, AGivenDirectoryIsUsedAndKept) {
  minidl::testing::TempDir tmp;
  {
    ScopedEnv env("MINIDL_STEP_DIR", tmp.path());
    const dist::StepDir dir;
    EXPECT_EQ(dir.path(), tmp.path());
    dist::StepFile file(0);
    file.set(7);
    file.set(1234567);  // overwritten in place
    EXPECT_EQ(dist::read_step(tmp.path(), 0), 1234567);
  }
  EXPECT_TRUE(std::filesystem::is_directory(tmp.path()));
}

TEST(StepRecord, NoStepWrittenReadsAsMinusOne) {
  minidl::testing::TempDir tmp;
  EXPECT_EQ(dist::read_step(tmp.path(), 5), -1);
  ::unsetenv("MINIDL_STEP_DIR");
  dist::StepFile(5).set(9);  // no launcher watches: nothing is written
  EXPECT_EQ(dist::read_step(tmp.path(), 5), -1);
}
