// dist/process.h — small POSIX process helpers shared by spawn() and the minidl-run launcher:
// describing how a child ended, and tying a child's life to its parent's.
#pragma once
#include <sys/types.h>

#include <string>

namespace minidl::dist {

// "exited with status 1", "was killed by signal 9 (Killed)" for a waitpid() status.
std::string describe_exit(int wait_status);
// True when the child exited normally with status 0.
bool exited_ok(int wait_status);

// Whether the process is stopped (SIGSTOP, SIGTSTP, a debugger): state 'T' or 't' in
// /proc/PID/stat. False when it is running, gone or unreadable. A stopped worker hangs the
// collectives of every other rank; launchers name it when the others time out.
bool is_stopped(pid_t pid);

// In a freshly forked child: ask the kernel to send `signal` when the parent dies, and exit at
// once (status 1) if it already has (parent_pid is the parent's pid, read before fork()).
// Linux only (prctl PR_SET_PDEATHSIG); it fires when the forking *thread* ends, so fork from a
// thread that outlives the children (normally the main thread).
void die_with_parent(int signal, pid_t parent_pid);

}  // namespace minidl::dist
