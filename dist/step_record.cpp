// dist/step_record.cpp — the ranks' step files (see step_record.h).
#include "minidl/dist/step_record.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace minidl::dist {

StepDir::StepDir() {
  if (const char* d = std::getenv("MINIDL_STEP_DIR"); d != nullptr && *d != '\0') {
    path_ = d;
    return;
  }
  const std::filesystem::path tmp = std::filesystem::temp_directory_path();
  std::string tmpl = (tmp / "minidl-steps.XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr)
    throw std::runtime_error("cannot create a directory for the ranks' step files in " + tmp.string() + ": " +
                             std::strerror(errno));
  path_ = tmpl;
  own_ = true;
}

StepDir::~StepDir() {
  if (!own_) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
  // remove_all opens the directory: a launcher out of file descriptors still removes it when empty
  if (ec) ::rmdir(path_.c_str());
}

StepFile::StepFile(int rank) {
  const char* dir = std::getenv("MINIDL_STEP_DIR");
  if (dir == nullptr || *dir == '\0') return;
  const std::string path = std::string(dir) + "/step." + std::to_string(rank);
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
}

StepFile::~StepFile() {
  if (fd_ >= 0) ::close(fd_);
}

void StepFile::set(int64_t step) {
  if (fd_ < 0) return;
  char buf[48];
  const int n =
      std::snprintf(buf, sizeof buf, "%20lld %10d\n", static_cast<long long>(step), static_cast<int>(::getpid()));
  if (::pwrite(fd_, buf, static_cast<size_t>(n), 0) < 0) return;  // best effort: only for the restart log
}

int64_t read_step(const std::string& dir, int rank) {
  std::ifstream in(dir + "/step." + std::to_string(rank));
  long long step = -1;
  if (!(in >> step)) return -1;
  return step;
}

}  // namespace minidl::dist
