#!/usr/bin/env bash
# tools/gpu_bundle_test.sh WORK_DIR [LAUNCHER] — proves, on a machine without a GPU, that the GPU
# machine's bundle is enough: `tools/gpu_check.sh --prepare-bundle` gathers it into WORK_DIR/bundle, then
# `tools/gpu_check.sh --bundle` configures (CUDA off) and builds `train` and `test_optim` with the
# system's copies of the packages hidden from CMake (CMAKE_IGNORE_PREFIX_PATH=/usr and
# CMAKE_IGNORE_PATH for /usr's include, lib and CMake dirs), and this script checks that
#   - every dependency CMake found (Eigen3, GTest, yaml-cpp, nlohmann_json, CLI11, Gloo, ZLIB) is
#     the bundle's, and no compiled object read one of their headers from /usr/include;
#   - the programs run with the bundle's libraries (train --help, test_optim's test list);
#   - with nvcc and the toolkit's cuDNN / NCCL present: the CUDA configure finds both from
#     MINIDL_CUDNN_ROOT / MINIDL_NCCL_ROOT laid out like the Python wheels (include/, lib/ holding
#     only libcudnn.so.9 / libnccl.so.2), ahead of the toolkit's own copies.
# Exit 0 when all hold, 77 (ctest: skipped, with the reason printed) when apt cannot reach a
# package registry, 1 otherwise. Run by ctest as gpu_bundle_builds_without_system_packages.
set -uo pipefail
WORK=${1:?usage: tools/gpu_bundle_test.sh WORK_DIR [COMPILER_LAUNCHER]}
LAUNCHER=${2:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$WORK" && WORK=$(cd "$WORK" && pwd)
BUNDLE=$WORK/bundle
fail() { echo "gpu_bundle_test: FAIL: $*" >&2; exit 1; }

"$ROOT/tools/gpu_check.sh" --prepare-bundle "$BUNDLE"
rc=$?
if [ "$rc" = 3 ]; then
  echo "gpu_bundle_test: SKIPPED: apt cannot reach a package registry, so the bundle cannot be prepared here"
  exit 77
fi
[ "$rc" = 0 ] || fail "tools/gpu_check.sh --prepare-bundle exited $rc"

SYS_DIRS="/usr/include;/usr/lib;/usr/lib/x86_64-linux-gnu;/usr/lib/x86_64-linux-gnu/cmake;/usr/share/cmake;/usr/share/eigen3/cmake;/usr/lib/cmake"
ARGS="-DMINIDL_CUDA=OFF -DMINIDL_BUILD_TESTS=ON -DCMAKE_IGNORE_PREFIX_PATH=/usr -DCMAKE_IGNORE_PATH=$SYS_DIRS"
[ -n "$LAUNCHER" ] && ARGS+=" -DCMAKE_CXX_COMPILER_LAUNCHER=$LAUNCHER"
rm -rf "$WORK/out"
MINIDL_GPU_CHECK_BUILD_ONLY=1 MINIDL_GPU_CHECK_BUILD_DIR="$WORK/build" MINIDL_GPU_CHECK_BUDGET_S=1700 \
  MINIDL_GPU_CHECK_BUILD_TIMEOUT_S=1500 \
  MINIDL_GPU_CHECK_CMAKE_ARGS="$ARGS" MINIDL_GPU_CHECK_TARGETS="train test_optim" JOBS=${JOBS:-2} \
  "$ROOT/tools/gpu_check.sh" --bundle "$BUNDLE" "$WORK/out" || fail "gpu_check.sh --bundle (build only) failed; logs in $WORK/out"

# Every package CMake found lies in the bundle.
cache=$WORK/build/CMakeCache.txt
for var in Eigen3_DIR GTest_DIR yaml-cpp_DIR nlohmann_json_DIR CLI11_DIR Gloo_DIR ZLIB_INCLUDE_DIR ZLIB_LIBRARY_RELEASE; do
  val=$(sed -n "s/^$var:[A-Z]*=//p" "$cache")
  case $val in
    "$BUNDLE"/*) echo "gpu_bundle_test: $var = $val" ;;
    *) fail "$var is '$val', not inside the bundle $BUNDLE" ;;
  esac
done
# No object read a dependency's header from the system.
deps=$(ninja -C "$WORK/build" -t deps 2>/dev/null) || fail "ninja -t deps failed"
[ -n "$deps" ] || fail "ninja -t deps listed nothing"
leaks=$(grep -E '^ +/usr/include/(eigen3|gtest|gmock|nlohmann|yaml-cpp|CLI|gloo)/|^ +/usr/include/(zlib|zconf)\.h' <<<"$deps" | sort -u)
[ -z "$leaks" ] || fail "headers read from the system instead of the bundle: $(head -5 <<<"$leaks" | tr -s ' \n' ' ')"
grep -q "$BUNDLE/prefix/usr/include/gtest/" <<<"$deps" || fail "no object read the bundle's GoogleTest headers"
grep -q "$BUNDLE/prefix/usr/include/CLI/" <<<"$deps" || fail "no object read the bundle's CLI11 headers"
echo "gpu_bundle_test: no dependency header came from /usr/include"

# The programs run with the bundle's shared libraries.
export LD_LIBRARY_PATH=$BUNDLE/prefix/usr/lib/x86_64-linux-gnu:$BUNDLE/prefix/usr/lib
# ldd's output is captured first: `ldd | grep -q` under pipefail fails when grep exits early (SIGPIPE)
train_libs=$(ldd "$WORK/build/examples/train")
grep -q "libyaml-cpp.so.0.7 => $BUNDLE/" <<<"$train_libs" || fail "train does not load the bundle's yaml-cpp"
"$WORK/build/examples/train" --help >"$WORK/train_help.txt" 2>&1 || fail "train --help failed: $(tail -3 "$WORK/train_help.txt")"
grep -q -- "--global-batch-size" "$WORK/train_help.txt" || fail "train --help lists no flags"
"$WORK/build/tests/test_optim" --gtest_list_tests >"$WORK/test_list.txt" 2>&1 || fail "test_optim does not start"
grep -q "^[A-Za-z]" "$WORK/test_list.txt" || fail "test_optim lists no tests"
echo "gpu_bundle_test: train and test_optim run with the bundle's libraries"

# cuDNN / NCCL from wheel-like roots with versioned names only (needs nvcc and the toolkit's copies).
CUDA=/usr/local/cuda
if [ -x "$CUDA/bin/nvcc" ] && [ -f "$CUDA/include/cudnn.h" ] && [ -f "$CUDA/include/nccl.h" ] &&
   ls "$CUDA"/lib64/libcudnn.so.9 "$CUDA"/lib64/libnccl.so.2 >/dev/null 2>&1; then
  for w in cudnn nccl; do
    rm -rf "$WORK/wheels/$w" && mkdir -p "$WORK/wheels/$w/include" "$WORK/wheels/$w/lib"
    ln -s "$CUDA"/include/$w*.h "$WORK/wheels/$w/include/"
  done
  ln -s "$(readlink -f "$CUDA/lib64/libcudnn.so.9")" "$WORK/wheels/cudnn/lib/libcudnn.so.9"
  ln -s "$(readlink -f "$CUDA/lib64/libnccl.so.2")" "$WORK/wheels/nccl/lib/libnccl.so.2"
  rm -rf "$WORK/build-cuda"
  cmake -S "$ROOT" -B "$WORK/build-cuda" -G Ninja -DMINIDL_CUDA=ON -DMINIDL_BUILD_BENCHMARKS=OFF \
    -DCMAKE_PREFIX_PATH="$BUNDLE/prefix/usr" -DCMAKE_IGNORE_PREFIX_PATH=/usr -DCMAKE_IGNORE_PATH="$SYS_DIRS" \
    -DMINIDL_CUDNN_ROOT="$WORK/wheels/cudnn" -DMINIDL_NCCL_ROOT="$WORK/wheels/nccl" >"$WORK/configure_cuda.log" 2>&1 ||
    fail "CUDA configure with wheel-like roots failed: $(tail -5 "$WORK/configure_cuda.log")"
  for pair in CUDNN_LIBRARY:cudnn/lib/libcudnn.so.9 NCCL_LIBRARY:nccl/lib/libnccl.so.2 \
              CUDNN_INCLUDE_DIR:cudnn/include NCCL_INCLUDE_DIR:nccl/include; do
    val=$(sed -n "s/^${pair%%:*}:[A-Z]*=//p" "$WORK/build-cuda/CMakeCache.txt")
    [ "$val" = "$WORK/wheels/${pair#*:}" ] || fail "${pair%%:*} is '$val', expected $WORK/wheels/${pair#*:}"
  done
  echo "gpu_bundle_test: cuDNN and NCCL found from wheel-like roots (versioned names only)"
  # a root without the library must fail, naming what it looked for
  if cmake -S "$ROOT" -B "$WORK/build-cuda-bad" -G Ninja -DMINIDL_CUDA=ON -DMINIDL_CUDNN_ROOT="$WORK/wheels/none" \
       >"$WORK/configure_bad.log" 2>&1; then
    fail "configure with a MINIDL_CUDNN_ROOT holding no cuDNN succeeded"
  fi
  # CMake wraps long messages: compare with the lines joined
  tr '\n' ' ' <"$WORK/configure_bad.log" | tr -s ' ' |
    grep -qF "cudnn.h / libcudnn.so[.9] not found in MINIDL_CUDNN_ROOT=$WORK/wheels/none" ||
    fail "a missing cuDNN root gave no clear message: $(grep -m1 -A2 'CMake Error' "$WORK/configure_bad.log")"
  rm -rf "$WORK/build-cuda-bad"
else
  echo "gpu_bundle_test: NOTE: no nvcc with cuDNN/NCCL in $CUDA: the wheel-root discovery part did not run here"
fi
echo "gpu_bundle_test: PASS"
