#!/usr/bin/env bash
# minidl's two commands:
#   ./run.sh test            install missing Debian packages, build into build/, run ctest
#   ./run.sh test --sanitize address   the same under ASan + UBSan, in build-asan/ (CUDA off)
#   ./run.sh test --sanitize thread    the data and dist tests under TSan, in build-tsan/
#                                      (CUDA off, OMP_NUM_THREADS=1); see docs/testing.md
#   ./run.sh train [ARGS...] the same set-up, then train the default model on Fashion-MNIST
# Idempotent: packages already installed are not touched, and the build is incremental.
# MINIDL_WERROR=ON (set by .ci/run) makes compiler warnings errors; it applies when build/ is first configured.
set -euo pipefail
cd "$(dirname "$0")"

PACKAGES=(cmake g++ make ninja-build pkg-config libeigen3-dev libgtest-dev libgmock-dev libbenchmark-dev
          libgloo-dev zlib1g-dev nlohmann-json3-dev libyaml-cpp-dev libcli11-dev
          dataset-fashion-mnist python3-numpy python3-matplotlib)
BUILD_DIR=${MINIDL_BUILD_DIR:-build}
JOBS=$(nproc)

install_missing() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "run.sh: installing missing Debian packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

build() {
  if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
    cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DMINIDL_WERROR="${MINIDL_WERROR:-OFF}" >/dev/null
  fi
  # pipefail keeps cmake's exit status; grep only hides progress lines
  cmake --build "$BUILD_DIR" -j "$JOBS" 2>&1 \
    | { grep -vE '^\[ *[0-9]+%\] (Building|Linking)|^Consolidate|^Scanning' || true; }
}

# ./run.sh test --sanitize address|thread: its own build directory (build-asan/, build-tsan/;
# incremental like build/), CUDA off, then ctest. address: every test under ASan + UBSan except
# the two that build a separate unsanitized project (the GPU bundle, a consumer of the install)
# and the five that use up the file descriptors (see below);
# thread: the data and dist tests (the code that owns threads and processes) under TSan.
# docs/testing.md explains both and records the runs.
sanitize_test() {
  local kind=$1 dir
  case "$kind" in
    address) dir=build-asan ;;
    thread) dir=build-tsan ;;
    *) echo "run.sh: --sanitize takes address or thread, not '$kind'" >&2; exit 2 ;;
  esac
  if [ ! -f "$dir/CMakeCache.txt" ]; then
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DMINIDL_CUDA=OFF -DMINIDL_BUILD_BENCHMARKS=OFF \
          -DMINIDL_SANITIZE="$kind" >/dev/null
  fi
  local supp="$PWD/tests/sanitizers"
  if [ "$kind" = address ]; then
    BUILD_DIR=$dir build
    cd "$dir"
    # any report fails the test: ASan aborts, UBSan halts (also compiled -fno-sanitize-recover),
    # LeakSanitizer reports at exit; lsan.supp lists the leaks of libraries we do not own.
    # allocator_may_return_null: an allocation too large to serve throws std::bad_alloc, as it does
    # unsanitized (the out-of-memory tests check its message), instead of ASan aborting.
    # Left out besides the two separate projects: the tests that use up the file descriptors on
    # purpose. UBSan's vptr check asks whether a vtable is readable through a pipe it opens, so
    # with no descriptor left it reports every virtual call ("object has invalid vptr"). And the
    # test that spawns two jobs from two threads at once: on a loaded machine a rank of it stalls
    # mid-run until the collective or store timeout (docs/testing.md says why, likely).
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:allocator_may_return_null=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 LSAN_OPTIONS=suppressions=$supp/lsan.supp \
      ctest --output-on-failure -j "$JOBS" --timeout 900 \
        -E '^(gpu_bundle_builds_without_system_packages|consumer_builds_against_install|OutOfDescriptors\..*|Launcher\.OutOfDescriptorsItSaysSoWithTheLimit|TrainerMetrics\.AFileThatCannotBeOpenedSaysWhyAndAProcessOutOfDescriptorsSaysSo|ProcessGroupShm\.TwoJobsOnOneHostRunAtOnce)$'
  else
    cmake --build "$dir" -j "$JOBS" --target test_data test_dist minidl-run tsan_canary 2>&1 \
      | { grep -vE '^\[ *[0-9]+%\] (Building|Linking)|^Consolidate|^Scanning' || true; }
    cd "$dir"
    # parallel_for runs on std::threads in this build (TSan cannot see libgomp's barriers), so
    # the kernels' threads are checked too. allocator_may_return_null: an allocation too large to
    # serve fails as it does unsanitized (the out-of-memory tests check its message), instead of
    # TSan's allocator ending the process. Left out: the two tests that bound resident memory,
    # which TSan's shadow memory inflates, and the one that spawns two jobs from two threads at
    # once (TSan cannot run a child that starts threads after a multi-threaded fork).
    TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:allocator_may_return_null=1:suppressions=$supp/tsan.supp" \
      ctest --output-on-failure -j "$JOBS" --timeout 900 -L '^(data|dist|sanitizer)$' \
        -E '^(IdxHostile.GzipHeaderClaimingABillionImagesIsBoundedByWhatDecompresses|StoreSecurity.AnnouncedFramesCostNoMemoryUntilTheirBytesArrive|ProcessGroupShm.TwoJobsOnOneHostRunAtOnce)$'
  fi
}

cmd=${1:-}
case "$cmd" in
  test)
    install_missing
    if [ "${2:-}" = "--sanitize" ]; then
      sanitize_test "${3:-}"
      exit
    elif [[ "${2:-}" == --sanitize=* ]]; then
      sanitize_test "${2#--sanitize=}"
      exit
    elif [ -n "${2:-}" ]; then
      echo "usage: ./run.sh test [--sanitize address|thread]" >&2
      exit 2
    fi
    build
    cd "$BUILD_DIR" && ctest --output-on-failure -j "$JOBS" --timeout 900
    ;;
  train)
    shift
    install_missing
    build
    exec "$BUILD_DIR/examples/train" "$@"
    ;;
  *)
    echo "usage: ./run.sh test [--sanitize address|thread] | ./run.sh train [trainer flags]" >&2
    exit 2
    ;;
esac
