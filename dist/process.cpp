// dist/process.cpp — describing a child's end, and PR_SET_PDEATHSIG. See process.h.
#include "minidl/dist/process.h"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

namespace minidl::dist {

std::string describe_exit(int wait_status) {
  if (WIFEXITED(wait_status)) return "exited with status " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    int sig = WTERMSIG(wait_status);
    const char* name = strsignal(sig);
    return "was killed by signal " + std::to_string(sig) + " (" + (name ? name : "unknown") + ")";
  }
  return "ended with wait status " + std::to_string(wait_status);
}

bool exited_ok(int wait_status) { return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0; }

bool is_stopped(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  const char state = stat[paren + 2];
  return state == 'T' || state == 't';
}

void die_with_parent(int signal, pid_t parent_pid) {
  prctl(PR_SET_PDEATHSIG, signal);
  if (getppid() != parent_pid) _exit(1);  // the parent died before prctl took effect
}

}  // namespace minidl::dist
