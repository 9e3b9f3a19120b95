#!/usr/bin/env bash
# tools/gpu_check.sh — minidl's GPU check, and the kit that carries what a bare GPU machine lacks.
#   tools/gpu_check.sh --prepare DIR      (a Debian 12 machine with apt, no GPU needed) gathers into
#       DIR (<= 50 MiB) everything the GPU machine lacks: the build dependencies' Debian packages
#       (Eigen, GoogleTest/GMock, yaml-cpp, CLI11, nlohmann-json, zlib, Gloo and its libraries)
#       unpacked with `dpkg -x` into DIR/prefix (never into /), and Fashion-MNIST in
#       DIR/fashion-mnist. Exit 0 when done, 3 when apt cannot fetch (no registry), 1 otherwise.
#   tools/gpu_check.sh --bundle DIR OUT   (the GPU machine) the check below, configured with DIR's
#       prefix first (CMAKE_PREFIX_PATH), DIR's data set and DIR's libraries on LD_LIBRARY_PATH.
#   tools/gpu_check.sh OUT                the check with the machine's own packages.
# The check, for a machine with an NVIDIA GPU (docs/gpu.md: the exact run):
#   0. prints what would explain a failure (nvcc, g++, glibc, cmake, where cuDNN / NCCL were
#      found: the CUDA toolkit, else the Python wheels nvidia-cudnn-cu13 / nvidia-nccl-cu13), and
#      checks that a GPU is there (nvidia-smi lists one) before building anything
#   1. configures (Ninja, Release, sm_90) and builds only the targets the check runs
#   2. the GPU tests: test_kernels (parity of every op and layer against the CPU, the reference
#      models, optimizers, dropout, the allocator) and test_dist's NCCL group (world size 1)
#   3. compute-sanitizer --tool memcheck over a short subset of the GPU tests (when installed)
#   4. benchmarks: GEMM TFLOP/s vs cuBLAS; each reference model's training images/s at batch 512
#   5. one Fashion-MNIST epoch per reference model with `examples/train --device cuda`
#   6. OUT/gpu_check.json (written on every exit path) and the raw logs in OUT.
# Budget: MINIDL_GPU_CHECK_BUDGET_S (default 360 s, build included); each step has its own
# timeout clipped to what is left; a step that no longer fits is reported as not run. Exit 0 only
# when every step passed and no GPU test skipped.
# Environment: MINIDL_FASHION_MNIST (data dir), JOBS, MINIDL_GPU_CHECK_BUILD_DIR (default
# build-gpu-check), MINIDL_GPU_CHECK_BUDGET_S, and for dry runs without a GPU (the bundle's build
# proof, tools/gpu_bundle_test.sh): MINIDL_GPU_CHECK_BUILD_ONLY=1 (stop after the build, no GPU
# needed), MINIDL_GPU_CHECK_CMAKE_ARGS (extra configure arguments), MINIDL_GPU_CHECK_TARGETS,
# MINIDL_GPU_CHECK_BUILD_TIMEOUT_S (default 240).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PREPARE_PACKAGES=(libeigen3-dev libgtest-dev libgmock-dev googletest libyaml-cpp-dev libyaml-cpp0.7 libcli11-dev
                  nlohmann-json3-dev zlib1g-dev zlib1g libgloo-dev libgloo0 libhiredis0.14 libibverbs1
                  libnl-3-200 libnl-route-3-200)
BUNDLE_LIMIT_MB=50

# --prepare DIR: download the packages (apt-get download, no root needed once the lists exist),
# unpack each into DIR/prefix, make it relocatable, copy Fashion-MNIST, check the size.
prepare() {
  local dir=$1 debs tmp p f
  command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null ||
    { echo "gpu_check --prepare: needs apt-get and dpkg-deb (a Debian or Ubuntu machine)" >&2; exit 1; }
  mkdir -p "$dir" || { echo "gpu_check --prepare: cannot create $dir" >&2; exit 1; }
  dir=$(cd "$dir" && pwd)
  tmp=$(mktemp -d) || exit 1
  trap 'rm -rf "$tmp"' EXIT
  debs=$tmp/debs
  mkdir -p "$debs"
  local want=("${PREPARE_PACKAGES[@]}")
  command -v dpkg-query >/dev/null && dpkg-query -W -f='${Status}' dataset-fashion-mnist 2>/dev/null |
    grep -q "install ok installed" || want+=(dataset-fashion-mnist)
  # A fresh machine has no package lists: update once (root only) when a package has no candidate.
  if apt-cache policy "${want[@]}" 2>/dev/null | grep -q "Candidate: (none)" || ! apt-cache show "${want[0]}" >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
      echo "gpu_check --prepare: apt-get update (package lists missing or stale)"
      apt-get update -qq || { echo "gpu_check --prepare: apt-get update failed: no package registry reachable" >&2; exit 3; }
    else
      echo "gpu_check --prepare: the package lists lack some of ${want[*]}; run 'apt-get update' as root first" >&2
      exit 3
    fi
  fi
  echo "gpu_check --prepare: downloading ${#want[@]} packages"
  if ! (cd "$debs" && apt-get download -q "${want[@]}" >"$tmp/download.log" 2>&1); then
    cat "$tmp/download.log" >&2
    if grep -qiE "Could not resolve|Failed to fetch|Temporary failure|Unable to connect|Connection" "$tmp/download.log"; then
      echo "gpu_check --prepare: apt-get download failed: no package registry reachable" >&2; exit 3
    fi
    echo "gpu_check --prepare: apt-get download failed" >&2; exit 1
  fi
  rm -rf "$dir/prefix" "$dir/fashion-mnist"
  mkdir -p "$dir/prefix" "$dir/fashion-mnist"
  : >"$dir/MANIFEST"
  for f in "$debs"/*.deb; do
    p=$(dpkg-deb -f "$f" Package)
    if [ "$p" = dataset-fashion-mnist ]; then
      dpkg-deb -x "$f" "$tmp/fmnist" || { echo "gpu_check --prepare: cannot unpack $f" >&2; exit 1; }
      cp "$tmp"/fmnist/usr/share/datasets/fashion-mnist/*-ubyte.gz "$dir/fashion-mnist/"
    else
      dpkg-deb -x "$f" "$dir/prefix" || { echo "gpu_check --prepare: cannot unpack $f" >&2; exit 1; }
    fi
    echo "$p $(dpkg-deb -f "$f" Version)" >>"$dir/MANIFEST"
  done
  if [ -z "$(ls "$dir/fashion-mnist")" ]; then
    cp $(dpkg -L dataset-fashion-mnist | grep -E -- '-ubyte\.gz$') "$dir/fashion-mnist/" ||
      { echo "gpu_check --prepare: cannot copy Fashion-MNIST from the installed dataset-fashion-mnist" >&2; exit 1; }
    echo "dataset-fashion-mnist $(dpkg-query -W -f='${Version}' dataset-fashion-mnist) (installed copy)" >>"$dir/MANIFEST"
  fi
  [ "$(ls "$dir"/fashion-mnist/*-ubyte.gz | wc -l)" = 4 ] ||
    { echo "gpu_check --prepare: expected 4 Fashion-MNIST files in $dir/fashion-mnist" >&2; exit 1; }
  # Relocatable: /lib -> usr/lib (usrmerge), absolute symlinks made relative, the docs dropped,
  # Gloo's CMake file pointed at its own prefix instead of /usr/lib.
  local pre=$dir/prefix lib=$dir/prefix/usr/lib/x86_64-linux-gnu
  mkdir -p "$lib"
  if [ -d "$pre/lib/x86_64-linux-gnu" ]; then cp -a "$pre"/lib/x86_64-linux-gnu/. "$lib/" && rm -rf "$pre/lib"; fi
  rm -rf "$pre/usr/share/doc" "$pre/usr/share/man" "$pre/usr/src" "$pre/etc" "$pre/usr/include/eigen3/unsupported"
  find "$pre" -type l | while read -r f; do
    local t; t=$(readlink "$f")
    case $t in /*) ln -sfn "$(basename "$t")" "$f" ;; esac
  done
  sed -i 's|"/usr/lib/libgloo|"${_IMPORT_PREFIX}/lib/libgloo|g' "$pre"/usr/share/cmake/Gloo/GlooTargets-*.cmake
  local pat='(IMPORTED_LOCATION[A-Z_]*|INTERFACE_[A-Z_]*) +"/usr/'
  if grep -rnE "$pat" "$pre"/usr/share/cmake "$pre"/usr/lib/x86_64-linux-gnu/cmake >"$tmp/abs.txt" 2>/dev/null; then
    echo "gpu_check --prepare: a CMake file of the bundle still points into /usr:" >&2
    cat "$tmp/abs.txt" >&2; exit 1
  fi
  # The newest glibc / libstdc++ symbol versions the bundle's shared libraries need (the GPU
  # machine's must be at least these for Gloo; --bundle checks and builds without Gloo otherwise).
  local glibc glibcxx
  glibc=$(find "$pre" -name '*.so.*' -type f -exec objdump -T {} \; 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
  glibcxx=$(find "$pre" -name '*.so.*' -type f -exec objdump -T {} \; 2>/dev/null | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1)
  echo "needs ${glibc:-GLIBC_?} ${glibcxx:-GLIBCXX_?}" >>"$dir/MANIFEST"
  local mb; mb=$(du -sm "$dir" | cut -f1)
  echo "gpu_check --prepare: $dir is ${mb} MiB ($(grep -vc '^needs' "$dir/MANIFEST") packages, Fashion-MNIST; needs ${glibc} ${glibcxx})"
  [ "$mb" -le "$BUNDLE_LIMIT_MB" ] || { echo "gpu_check --prepare: over the ${BUNDLE_LIMIT_MB} MiB limit" >&2; exit 1; }
  exit 0
}

BUNDLE=""
case "${1:-}" in
  --prepare) prepare "${2:?usage: tools/gpu_check.sh --prepare DIR}" ;;
  --bundle)
    BUNDLE=${2:?usage: tools/gpu_check.sh --bundle DIR OUT_DIR}
    [ -d "$BUNDLE/prefix/usr" ] || { echo "gpu_check: $BUNDLE is not a bundle (run tools/gpu_check.sh --prepare $BUNDLE)" >&2; exit 1; }
    BUNDLE=$(cd "$BUNDLE" && pwd)
    shift 2 ;;
  -h|--help|"") sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 2 ;;
esac

OUT_DIR=${1:?usage: tools/gpu_check.sh [--bundle DIR] OUT_DIR}
mkdir -p "$OUT_DIR" || { echo "gpu_check: cannot create $OUT_DIR" >&2; exit 1; }
OUT_DIR=$(cd "$OUT_DIR" && pwd)
BUILD=${MINIDL_GPU_CHECK_BUILD_DIR:-$ROOT/build-gpu-check}
DEFAULT_DATA=/usr/share/datasets/fashion-mnist
[ -n "$BUNDLE" ] && DEFAULT_DATA=$BUNDLE/fashion-mnist
DATA=${MINIDL_FASHION_MNIST:-$DEFAULT_DATA}
JOBS=${JOBS:-$(nproc)}
BUDGET=${MINIDL_GPU_CHECK_BUDGET_S:-360}
BUILD_ONLY=${MINIDL_GPU_CHECK_BUILD_ONLY:-0}
START=$(date +%s)
declare -A STATUS
STEPS=()
FAILED=0
SKIPPED=0
FATAL=""
NOTES=()

elapsed() { echo $(($(date +%s) - START)); }
log() { echo "[gpu_check $(elapsed)s] $*"; }

# Writes OUT_DIR/gpu_check.json from the logs of the steps that ran (python3; without it, a note).
write_summary() {
  local status_lines="" k
  for k in "${STEPS[@]}"; do status_lines+="$k=${STATUS[$k]}"$'\n'; done
  if ! command -v python3 >/dev/null; then
    log "python3 not found: no gpu_check.json (see the logs in $OUT_DIR)"
    return 1
  fi
  local notes; notes=$(printf '%s\n' "${NOTES[@]}")
  python3 - "$OUT_DIR" "$SKIPPED" "$(elapsed)" "$FATAL" "$status_lines" "$notes" <<'PY'
import json, os, sys
out, skipped, secs, fatal, status_lines = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
notes = [n for n in sys.argv[6].splitlines() if n]
def read(name):
    p = os.path.join(out, name)
    return open(p, errors="replace").read() if os.path.exists(p) else None
def last_json(text):
    for line in reversed((text or "").splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try: return json.loads(line)
            except Exception: pass
    return None
def tail(name, n=3):
    text = read(name + ".log")
    return text.splitlines()[-n:] if text else []
steps = dict(l.split("=", 1) for l in status_lines.splitlines() if "=" in l)
epochs = {}
for m in ("mlp", "cnn", "vit"):
    metrics = last_json(read(os.path.join("train_" + m, "metrics.jsonl")))
    epochs[m] = metrics if metrics else {"log_tail": tail("epoch_" + m)}
gpu = read("gpu.txt")
facts = read("facts.txt")
summary = {"seconds": secs, "fatal": fatal or None, "gpu": gpu.strip() if gpu else None, "steps": steps,
           "facts": facts.splitlines() if facts else [], "notes": notes,
           "tests": {"kernels": tail("test_kernels"), "nccl": tail("test_nccl"),
                     "memcheck": tail("memcheck"),
                     "skipped": skipped},
           "gemm": last_json(read("bench_gemm.log")), "models": last_json(read("bench_models.log")),
           "epochs": epochs}
with open(os.path.join(out, "gpu_check.json"), "w") as f:
    json.dump(summary, f, indent=2)
print(json.dumps(summary, indent=2))
PY
}

finish() {  # finish STATUS — summary, list of steps, exit
  local rc=$1 k
  write_summary || rc=1
  log "steps:"
  for k in "${STEPS[@]}"; do echo "  $k: ${STATUS[$k]}"; done
  [ -n "$FATAL" ] && log "FATAL: $FATAL"
  log "summary written to $OUT_DIR/gpu_check.json"
  exit "$rc"
}
die() { FATAL="$*"; log "FATAL: $*"; finish 1; }

step() {  # step NAME TIMEOUT_S CMD... — runs CMD with its log in OUT_DIR/NAME.log
  local name=$1 t=$2 left rc
  shift 2
  STEPS+=("$name")
  left=$((BUDGET - $(elapsed)))
  if [ "$left" -lt 10 ]; then
    STATUS[$name]="not run (over the ${BUDGET}s budget)"; FAILED=1; log "$name: not run, over budget"; return
  fi
  [ "$t" -gt "$left" ] && t=$left
  log "$name (timeout ${t}s) ..."
  if timeout -k 10 "$t" "$@" >"$OUT_DIR/$name.log" 2>&1; then
    STATUS[$name]=pass; log "$name: ok"
  else
    rc=$?
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then STATUS[$name]="fail (timed out after ${t}s)"; else STATUS[$name]="fail (exit $rc)"; fi
    FAILED=1; log "$name: FAILED (${STATUS[$name]}), last lines:"; tail -20 "$OUT_DIR/$name.log"
  fi
}

# A gtest log's skipped tests: "[  SKIPPED ] Suite.Test (N ms)" lines (not the summary's list).
count_skipped() {
  local n=0
  [ -f "$1" ] && n=$(grep -cE '^\[  SKIPPED \] [A-Za-z0-9_]+\.[A-Za-z0-9_]+ \(' "$1")
  echo "${n:-0}"
}

# 0. the facts that would explain a failure, then tools and a GPU before spending minutes on a build
NVCC=/usr/local/cuda/bin/nvcc
[ -x "$NVCC" ] || NVCC=$(command -v nvcc || true)
{
  echo "host: $(uname -srm); $(nproc) cores"
  echo "nvcc: $([ -n "$NVCC" ] && "$NVCC" --version | grep -i release || echo 'not found')"
  echo "g++: $(g++ --version 2>/dev/null | head -1 || echo 'not found')"
  echo "glibc: $(ldd --version 2>/dev/null | head -1 || echo unknown)"
  echo "libstdc++: $(g++ -print-file-name=libstdc++.so.6 2>/dev/null)"
  echo "cmake: $(cmake --version 2>/dev/null | head -1 || echo 'not found'); ninja: $(ninja --version 2>/dev/null || echo 'not found')"
  echo "compute-sanitizer: $(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || echo 'not found')"
  [ -n "$BUNDLE" ] && echo "bundle: $BUNDLE ($(grep -vc '^needs' "$BUNDLE/MANIFEST") packages; $(grep '^needs' "$BUNDLE/MANIFEST"))"
} | tee "$OUT_DIR/facts.txt"
command -v cmake >/dev/null || die "cmake not found"
command -v ninja >/dev/null || die "ninja not found (the check builds with Ninja)"
[ -n "$NVCC" ] || [ "$BUILD_ONLY" = 1 ] || die "nvcc not found (CUDA toolkit missing)"
if [ "$BUILD_ONLY" != 1 ]; then
  command -v nvidia-smi >/dev/null || die "no GPU: nvidia-smi not found (no NVIDIA driver on this machine)"
  if ! timeout 30 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$OUT_DIR/gpu.txt" 2>&1 \
     || ! grep -q '[A-Za-z]' "$OUT_DIR/gpu.txt" || grep -qiE 'failed|no devices|not found|error' "$OUT_DIR/gpu.txt"; then
    die "no GPU: nvidia-smi lists no device ($(head -c 300 "$OUT_DIR/gpu.txt" | tr '\n' ' '))"
  fi
  cat "$OUT_DIR/gpu.txt"
fi
[ -f "$DATA/train-images-idx3-ubyte" ] || [ -f "$DATA/train-images-idx3-ubyte.gz" ] ||
  log "WARNING: Fashion-MNIST not found in $DATA (set MINIDL_FASHION_MNIST): the epoch steps will fail"

# cuDNN / NCCL: the toolkit's when it has them, else the Python wheels (any python3 that imports
# nvidia.cudnn / nvidia.nccl; /opt/torch/.venv first), else CMake's own search fails saying so.
CMAKE_ARGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DMINIDL_CUDA=ON -DMINIDL_BUILD_BENCHMARKS=OFF
            -DCMAKE_CUDA_ARCHITECTURES=90)
LIB_PATH=""
# wheel_dir NAME HEADER — the wheel directory holding include/HEADER and lib/libNAME.so*: first
# nvidia.NAME of the first python3 that imports it, else any such directory under its nvidia/
# (wheel layouts differ between CUDA versions).
wheel_dir() {
  local py d lib
  for py in /opt/torch/.venv/bin/python3 python3; do
    command -v "$py" >/dev/null || continue
    d=$("$py" -c "import nvidia.$1 as m; print(list(m.__path__)[0])" 2>/dev/null)
    if [ -n "$d" ] && [ -f "$d/include/$2" ] && ls "$d"/lib/lib$1.so* >/dev/null 2>&1; then echo "$d"; return 0; fi
    d=$("$py" -c "import nvidia; print(list(nvidia.__path__)[0])" 2>/dev/null) || continue
    for lib in $(find "$d" -name "lib$1.so*" 2>/dev/null); do
      lib=$(dirname "$(dirname "$lib")")
      [ -f "$lib/include/$2" ] && { echo "$lib"; return 0; }
    done
  done
  return 1
}
CUDA_HOME_DIR=$(dirname "$(dirname "${NVCC:-/usr/local/cuda/bin/nvcc}")")
for lib in cudnn:CUDNN:cudnn.h nccl:NCCL:nccl.h; do
  IFS=: read -r name var header <<<"$lib"
  root_var=MINIDL_${var}_ROOT
  root=${!root_var:-}
  if [ -z "$root" ] && ! { [ -f "$CUDA_HOME_DIR/include/$header" ] && ls "$CUDA_HOME_DIR"/lib64/lib$name.so* >/dev/null 2>&1; }; then
    root=$(wheel_dir "$name" "$header") || root=""
  fi
  if [ -n "$root" ]; then
    CMAKE_ARGS+=("-D$root_var=$root")
    LIB_PATH+="$root/lib:"
    echo "$name: $root ($(ls "$root"/lib/lib$name.so* 2>/dev/null | xargs -n1 basename 2>/dev/null | tr '\n' ' '))" | tee -a "$OUT_DIR/facts.txt"
  else
    echo "$name: the CUDA toolkit ($CUDA_HOME_DIR) or the system paths" | tee -a "$OUT_DIR/facts.txt"
  fi
done

# The bundle: its prefix searched first, its libraries found at run time. Gloo's shared library
# needs the glibc / libstdc++ symbol versions of the Debian release it came from: without them,
# build without Gloo (the GPU steps need only NCCL) and say so.
GLOO=1
if [ -n "$BUNDLE" ]; then
  CMAKE_ARGS+=("-DCMAKE_PREFIX_PATH=$BUNDLE/prefix/usr")
  LIB_PATH+="$BUNDLE/prefix/usr/lib/x86_64-linux-gnu:$BUNDLE/prefix/usr/lib:"
  need_glibc=$(sed -n 's/^needs GLIBC_\([0-9.]*\) .*/\1/p' "$BUNDLE/MANIFEST")
  need_cxx=$(sed -n 's/^needs .* \(GLIBCXX_[0-9.]*\)$/\1/p' "$BUNDLE/MANIFEST")
  have_glibc=$(ldd --version 2>/dev/null | head -1 | grep -oE '[0-9]+\.[0-9]+$')
  stdcxx=$(g++ -print-file-name=libstdc++.so.6 2>/dev/null)
  if [ -n "$need_glibc" ] && [ "$(printf '%s\n%s\n' "$need_glibc" "${have_glibc:-0}" | sort -V | head -1)" != "$need_glibc" ]; then
    GLOO=0; NOTES+=("Gloo off: the bundle's libgloo needs glibc $need_glibc, this machine has ${have_glibc:-unknown}")
  elif [ -n "$need_cxx" ] && ! grep -qa "$need_cxx" "$(readlink -f "$stdcxx" 2>/dev/null || echo /nonexistent)"; then
    GLOO=0; NOTES+=("Gloo off: the bundle's libgloo needs $need_cxx, not in this machine's libstdc++ ($stdcxx)")
  fi
fi
if [ "${MINIDL_GPU_CHECK_GLOO:-1}" = 0 ]; then GLOO=0; NOTES+=("Gloo off: MINIDL_GPU_CHECK_GLOO=0"); fi
[ "$GLOO" = 0 ] && CMAKE_ARGS+=(-DCMAKE_DISABLE_FIND_PACKAGE_Gloo=ON)
for n in "${NOTES[@]}"; do log "$n"; done
[ -n "$LIB_PATH" ] && export LD_LIBRARY_PATH="${LIB_PATH}${LD_LIBRARY_PATH:-}"
export MINIDL_FASHION_MNIST="$DATA"
# shellcheck disable=SC2206
[ -n "${MINIDL_GPU_CHECK_CMAKE_ARGS:-}" ] && CMAKE_ARGS+=(${MINIDL_GPU_CHECK_CMAKE_ARGS})

# 1. build
rm -f "$BUILD/CMakeCache.txt"  # a fresh configure: cached cuDNN/NCCL/Gloo paths of an earlier run must not win
step configure 90 cmake -S "$ROOT" -B "$BUILD" "${CMAKE_ARGS[@]}"
[ "${STATUS[configure]}" = pass ] || die "configure: ${STATUS[configure]} (see $OUT_DIR/configure.log)"
grep -E "minidl: (CUDA backend|CUDNN|NCCL)" "$OUT_DIR/configure.log" | tee -a "$OUT_DIR/facts.txt"
if [ "$BUILD_ONLY" != 1 ]; then
  grep -q "CUDA backend ON" "$OUT_DIR/configure.log" || die "CUDA backend not enabled (see $OUT_DIR/configure.log)"
fi
TARGETS=${MINIDL_GPU_CHECK_TARGETS:-test_kernels test_dist gpu_bench train}
# shellcheck disable=SC2086
step build "${MINIDL_GPU_CHECK_BUILD_TIMEOUT_S:-240}" cmake --build "$BUILD" -j "$JOBS" --target $TARGETS
[ "${STATUS[build]}" = pass ] || die "build: ${STATUS[build]} (see $OUT_DIR/build.log)"
[ "$BUILD_ONLY" = 1 ] && { log "build only (MINIDL_GPU_CHECK_BUILD_ONLY=1): done"; finish "$FAILED"; }

# 2. GPU tests (a test that skips says why; on a GPU machine none of the CUDA tests may skip)
step test_kernels 120 "$BUILD/tests/test_kernels" \
  --gtest_filter='CudaOps*:CudaNn*:CudaLayers*:CudaOptim*:CudaAllocator*:CudaRuntime*:CachingAllocator*:CudaIter*:CudaBatchStride*'
step test_nccl 60 "$BUILD/tests/test_dist" --gtest_filter='ProcessGroupNccl*:HostStaging*'
SKIPPED=$(( $(count_skipped "$OUT_DIR/test_kernels.log") + $(count_skipped "$OUT_DIR/test_nccl.log") ))

# 3. memcheck over a short subset (element-wise, matmul, conv, the allocator)
SANITIZER=$(command -v compute-sanitizer || echo "$CUDA_HOME_DIR/bin/compute-sanitizer")
if [ -x "$SANITIZER" ]; then
  step memcheck 60 "$SANITIZER" --tool memcheck --error-exitcode 9 "$BUILD/tests/test_kernels" \
    --gtest_filter='CudaOps.StridedOutputs*:CudaOps.MatmulWith*:CudaOps.BatchedMatmul*:CudaNn.Conv*:CudaAllocator*'
else
  STEPS+=(memcheck); STATUS[memcheck]="not run (compute-sanitizer not found)"; FAILED=1
fi

# 4. benchmarks
step bench_gemm 40 "$BUILD/tools/gpu_bench" gemm
step bench_models 60 "$BUILD/tools/gpu_bench" models --batch 512

# 5. one full epoch per reference model with the trainer on the GPU (NCCL, one process per GPU)
for m in mlp cnn vit; do
  rm -rf "$OUT_DIR/train_$m"
  step "epoch_$m" 90 "$BUILD/examples/train" --model "$m" --device cuda --epochs 1 --data "$DATA" \
    --out "$OUT_DIR/train_$m"
done

# 6. summary
[ "$SKIPPED" = 0 ] || { log "FAILED: $SKIPPED GPU test(s) skipped on a GPU machine"; FAILED=1; }
finish "$FAILED"
