// cmake/glibc_compat.cpp — linked into programs only with MINIDL_STATIC_RUNTIME (the GPU kit).
// GCC 12's static libstdc++ built on glibc 2.36 calls arc4random (std::random_device), a symbol new
// in glibc 2.36; a program that imports it does not start on a machine with glibc 2.35 or older.
// This definition, pulled into every program (LINKER:--undefined=arc4random), satisfies that call
// from inside the program with the getrandom system call (glibc 2.25), so no GLIBC_2.36 reference
// remains. Not compiled into the ordinary build.
#include <sys/random.h>

#include <cerrno>
#include <cstdint>

extern "C" uint32_t arc4random(void) noexcept {
  uint32_t v = 0;
  for (;;) {
    const ssize_t n = getrandom(&v, sizeof v, 0);
    if (n == static_cast<ssize_t>(sizeof v)) return v;
    if (n < 0 && errno != EINTR) __builtin_trap();  // no entropy source at all: nothing sane to return
  }
}
