// examples/trainer/plot.cpp — OUT/curves.png at the end of a run (plot.h): a child process runs
// python3 tools/plot_metrics.py, and this process waits for it.
#include "examples/trainer/plot.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <iostream>
#include <string>

namespace trainer {

std::string plot_script_path() {
  const std::filesystem::path source = std::filesystem::path(MINIDL_TOOLS_DIR) / "plot_metrics.py";
  if (std::filesystem::exists(source)) return source.string();
  std::error_code ec;  // an installed train (PREFIX/bin/train) finds PREFIX/share/minidl/tools
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::filesystem::path installed = exe.parent_path().parent_path() / "share/minidl/tools/plot_metrics.py";
  if (!ec && std::filesystem::exists(installed)) return installed.string();
  return {};
}

bool draw_curves(const std::string& out_dir) {
  const std::string metrics = out_dir + "/metrics.jsonl", png = out_dir + "/curves.png";
  const std::string script = plot_script_path();
  const auto give_up = [&](const std::string& why) {
    std::cerr << "train: no " << png << " (" << why << "); the figures are in " << metrics
              << " (draw them later with python3 tools/plot_metrics.py " << metrics << ", or pass --plot none)\n";
    return false;
  };
  if (script.empty()) return give_up("tools/plot_metrics.py not found");
  // Debian's interpreter first: its python3-matplotlib (run.sh installs it) belongs to it.
  const char* python = ::access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
  std::cout.flush();
  const pid_t pid = ::fork();
  if (pid < 0) return give_up("fork failed");
  if (pid == 0) {
    ::execlp(python, python, script.c_str(), metrics.c_str(), "-o", png.c_str(), static_cast<char*>(nullptr));
    std::cerr << "train: cannot run " << python << "\n";
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return give_up(std::string(python) + " " + script + " failed: is python3-matplotlib installed?");
  return true;
}

}  // namespace trainer
