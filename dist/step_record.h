// dist/step_record.h — which training step each rank is in, kept in files for a launcher's
// restart decisions (minidl-run, train --max-restarts): the restart log names the step that
// failed, and a second failure at the same step ends the run (a deterministic crash).
//
//   StepDir dir;                         // $MINIDL_STEP_DIR, else a private temporary directory
//   ... start the ranks with MINIDL_STEP_DIR = dir.path() ...
//   StepFile file(rank);                 // in a rank: $MINIDL_STEP_DIR/step.<rank>
//   file.set(global_step);               // once per step: "<step> <pid>", one pwrite, no fsync
//   read_step(dir.path(), rank);         // in the launcher, after the rank failed: the step, or -1
#pragma once
#include <cstdint>
#include <string>

namespace minidl::dist {

// The directory of the ranks' step files: $MINIDL_STEP_DIR when set (a test or an outer launcher
// watching the steps), else a private temporary directory, removed with its files when this
// object ends. Not copyable: a copy's destructor would remove the directory the ranks write to.
class StepDir {
 public:
  StepDir();  // throws std::runtime_error when no temporary directory can be made
  ~StepDir();
  StepDir(const StepDir&) = delete;
  StepDir& operator=(const StepDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool own_ = false;
};

// A rank's step file, $MINIDL_STEP_DIR/step.<rank>; does nothing when the variable is unset (no
// launcher watches). Writing is best effort: the file serves only the restart log.
class StepFile {
 public:
  explicit StepFile(int rank);
  ~StepFile();
  StepFile(const StepFile&) = delete;
  StepFile& operator=(const StepFile&) = delete;
  void set(int64_t step);

 private:
  int fd_ = -1;
};

// The step a rank last wrote to DIR/step.<rank>, or -1 when it wrote none.
int64_t read_step(const std::string& dir, int rank);

}  // namespace minidl::dist
