#!/usr/bin/env bash
# minidl's two commands:
#   ./run.sh test            install missing Debian packages, build into build/, run ctest
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

cmd=${1:-}
case "$cmd" in
  test)
    install_missing
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
    echo "usage: ./run.sh test | ./run.sh train [trainer flags]" >&2
    exit 2
    ;;
esac
