#!/usr/bin/env bash
# tools/gpu_check.sh — minidl's GPU check: the programs are built here, the GPU machine only runs them.
#   tools/gpu_check.sh --prepare DIR      (this machine: x86-64 Linux, g++, nvcc, the Debian build
#       dependencies; no GPU needed) builds the kit into DIR (<= 48 MiB, checked): test_gpu_kit
#       (test_kernels, test_dist and test_data in one program), gpu_bench and train in DIR/bin, for
#       sm_90 with PTX (compressed for size), host code for x86-64-v3,
#       libstdc++/libgcc/libgomp/cudart/yaml-cpp/zlib/GoogleTest linked in;
#       Gloo and the libraries it loads in DIR/lib (RPATH $ORIGIN/../lib); the trainer's recipes in
#       DIR/share/minidl/configs; Fashion-MNIST in DIR/fashion-mnist (the test split and the first
#       MINIDL_KIT_TRAIN_IMAGES, default 10000, training images); DIR/MANIFEST (sizes, the
#       newest GLIBC/GLIBCXX versions and the SONAMEs each file needs). cuBLAS, cuDNN and NCCL are
#       not in the kit: the programs need them by SONAME (libcublas.so.13, libcublasLt.so.13,
#       libcudnn.so.9, libnccl.so.2). Exit 0 when done, 3 when nvcc is missing, 1 otherwise.
#   tools/gpu_check.sh --kit DIR OUT      (the GPU machine) runs the check below with DIR's programs:
#       finds cuBLAS/cuDNN/NCCL (the CUDA toolkit's lib64, else the Python wheels nvidia-* of
#       /opt/torch/.venv/bin/python3 or python3, else the loader's cache; printing where), starts
#       each program once (--help / --gtest_list_tests) and reports any that cannot start, and why
#       (missing library, glibc too old, ...). Budget 270 s.
#   Fallback, when a prebuilt program cannot start there: build on the GPU machine.
#   tools/gpu_check.sh --prepare-bundle DIR   (a Debian 12 machine with apt) gathers the build
#       dependencies' Debian packages into DIR/prefix (never into /) and Fashion-MNIST into
#       DIR/fashion-mnist (<= 50 MiB). Exit 0 when done, 3 when apt cannot fetch, 1 otherwise.
#   tools/gpu_check.sh --bundle DIR OUT   (the GPU machine) configures and builds the check's
#       programs with DIR's prefix first, then runs the check. Budget 360 s, build included.
#   tools/gpu_check.sh OUT                the same with the machine's own packages.
# The check (docs/gpu.md: the exact device call, sizes and times):
#   0. facts that would explain a failure (host, glibc, driver, where each library came from) and
#      a GPU (nvidia-smi lists one) before anything else
#   1. in parallel: the GPU tests of test_kernels (Cuda*, CachingAllocator*; CudaMultiGpu* only with
#      more than one GPU), test_dist's NCCL group and Gloo host staging (ProcessGroupNccl*,
#      HostStaging*), test_data's DataLoaderPinMemory*; compute-sanitizer
#      memcheck over a short subset; one short Fashion-MNIST epoch per reference model with
#      `train --device cuda`; with more than one GPU also CudaMultiGpu* and `train --nproc N`
#      (NCCL), else those are reported "not run: 1 GPU"
#   2. one after the other: GEMM TFLOP/s vs cuBLAS, each reference model's training images/s at
#      batch 512, and PyTorch's on the same GPU when /opt/torch/.venv exists (tools/bench_torch_gpu.py)
#   3. OUT/gpu_check.json (on every exit path) and OUT/gpu_check_logs.tar.gz (every step's log).
# Each step has its own timeout, clipped to what is left of the budget (MINIDL_GPU_CHECK_BUDGET_S);
# a step that no longer fits is "not run". Exit 0 only when every step passed and no GPU test
# skipped; benchmark figures below their expectation are reported, not failed.
# Environment: MINIDL_GPU_CHECK_BUDGET_S, MINIDL_FASHION_MNIST (data dir), JOBS; --prepare:
# MINIDL_KIT_BUILD_DIR (default build-kit), MINIDL_KIT_CMAKE_ARGS (extra configure arguments),
# MINIDL_KIT_LIMIT_MB (48); builds on the GPU machine: MINIDL_GPU_CHECK_BUILD_DIR (default
# build-gpu-check), MINIDL_GPU_CHECK_BUILD_ONLY=1 (stop after the build, no GPU needed),
# MINIDL_GPU_CHECK_CMAKE_ARGS, MINIDL_GPU_CHECK_TARGETS, MINIDL_GPU_CHECK_BUILD_TIMEOUT_S (240);
# --kit: CUDA_HOME (the toolkit searched first; default: nvcc's, else /usr/local/cuda),
# MINIDL_GPU_CHECK_DRY_RUN=1 (no GPU needed: find the libraries, start each program, stop there;
# tools/gpu_kit_test.sh uses it).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
KIT_PROGRAMS=(tests/test_gpu_kit tools/gpu_bench examples/train)
KIT_LIMIT_MB=${MINIDL_KIT_LIMIT_MB:-48}
# The libraries a kit program may need from the GPU machine: the C library's own, the GCC runtime
# (libgcc_s, libstdc++: only the carried Gloo needs them) and the CUDA libraries by SONAME.
SYSTEM_LIBS='^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|libgcc_s\.so\.1|libstdc\+\+\.so\.6)$'
CUDA_LIBS='^(libcuda\.so\.1|libcublas\.so\.13|libcublasLt\.so\.13|libcudnn[a-z_]*\.so\.9|libnccl\.so\.2)$'
PREPARE_PACKAGES=(libeigen3-dev libgtest-dev libgmock-dev googletest libyaml-cpp-dev libyaml-cpp0.7 libcli11-dev
                  nlohmann-json3-dev zlib1g-dev zlib1g libgloo-dev libgloo0 libhiredis0.14 libibverbs1
                  libnl-3-200 libnl-route-3-200)
BUNDLE_LIMIT_MB=50

# The newest GLIBC_ / GLIBCXX_ version FILE requires (its version references), or "-".
needs_version() {  # needs_version FILE GLIBC|GLIBCXX
  local v
  v=$(objdump -p "$1" 2>/dev/null | sed -n '/^Version References:/,/^$/p' | grep -oE "\b$2_[0-9.]+" | sort -uV | tail -1)
  echo "${v:--}"
}
needed_sonames() { readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
fashion_mnist_dir() {  # where this machine's Fashion-MNIST files are
  local d=${MINIDL_FASHION_MNIST:-}
  [ -n "$d" ] && { echo "$d"; return; }
  d=$(dpkg -L dataset-fashion-mnist 2>/dev/null | grep -m1 -E 'train-images-idx3-ubyte(\.gz)?$')
  [ -n "$d" ] && { dirname "$d"; return; }
  echo /usr/share/datasets/fashion-mnist
}

# ---- --prepare DIR: build the kit here ----
prepare_kit() {
  local dir=$1 build nvcc log f p mb need lib
  nvcc=/usr/local/cuda/bin/nvcc
  [ -x "$nvcc" ] || nvcc=$(command -v nvcc || true)
  [ -n "$nvcc" ] || { echo "gpu_check --prepare: nvcc not found (the kit needs the CUDA toolkit to build)" >&2; exit 3; }
  for f in cmake objdump readelf strip ldd; do
    command -v "$f" >/dev/null || { echo "gpu_check --prepare: $f not found" >&2; exit 1; }
  done
  mkdir -p "$dir" || { echo "gpu_check --prepare: cannot create $dir" >&2; exit 1; }
  dir=$(cd "$dir" && pwd)
  case $dir in "$ROOT"|/) echo "gpu_check --prepare: DIR must be a folder of its own, not $dir" >&2; exit 1 ;; esac
  build=${MINIDL_KIT_BUILD_DIR:-$ROOT/build-kit}
  log=$(mktemp) || exit 1
  local gen=()
  command -v ninja >/dev/null && [ ! -f "$build/Makefile" ] && gen=(-G Ninja)
  # shellcheck disable=SC2206
  local extra=(${MINIDL_KIT_CMAKE_ARGS:-})
  echo "gpu_check --prepare: configuring $build (sm_90 + PTX, x86-64-v3, static runtime)"
  if ! cmake -S "$ROOT" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DMINIDL_CUDA=ON \
       -DCMAKE_CUDA_COMPILER="$nvcc" -DMINIDL_NATIVE=OFF -DMINIDL_ARCH=x86-64-v3 -DMINIDL_STATIC_RUNTIME=ON \
       -DMINIDL_BUILD_TESTS=ON -DMINIDL_BUILD_BENCHMARKS=OFF "-DCMAKE_CUDA_ARCHITECTURES=90-real;90-virtual" \
       -DCMAKE_CUDA_FLAGS=-compress-mode=size \
       "${extra[@]}" >"$log" 2>&1; then
    cat "$log" >&2; echo "gpu_check --prepare: configure failed" >&2; exit 1
  fi
  grep -q "CUDA backend ON" "$log" || { cat "$log" >&2; echo "gpu_check --prepare: the CUDA backend is off in $build" >&2; exit 1; }
  grep -q "^Gloo_DIR:PATH=/" "$build/CMakeCache.txt" ||
    { echo "gpu_check --prepare: Gloo not found (install libgloo-dev): test_dist's HostStaging tests need it" >&2; exit 1; }
  echo "gpu_check --prepare: building ${KIT_PROGRAMS[*]##*/} (JOBS=${JOBS:-$(nproc)})"
  # shellcheck disable=SC2068
  if ! cmake --build "$build" -j "${JOBS:-$(nproc)}" --target ${KIT_PROGRAMS[@]##*/} >"$log" 2>&1; then
    grep -E "error|FAILED" "$log" | head -30 >&2; echo "gpu_check --prepare: build failed (log: $log)" >&2; exit 1
  fi
  rm -rf "${dir:?}/bin" "${dir:?}/lib" "${dir:?}/share" "${dir:?}/fashion-mnist" "${dir:?}/MANIFEST"
  mkdir -p "$dir/bin" "$dir/lib" "$dir/share/minidl/configs" "$dir/fashion-mnist"
  for p in "${KIT_PROGRAMS[@]}"; do
    strip --strip-unneeded -o "$dir/bin/${p##*/}" "$build/$p" ||
      { echo "gpu_check --prepare: cannot copy $build/$p" >&2; exit 1; }
  done
  # Libraries that are neither the C library's, the GCC runtime's nor the GPU machine's CUDA
  # libraries are carried (Gloo and what it loads). ldd lists every program's libraries, transitively.
  local libs
  libs=$(for p in "$dir"/bin/*; do ldd "$p"; done | sort -u)
  if grep -q "not found" <<<"$libs"; then
    echo "gpu_check --prepare: a program needs a library this machine lacks: $(grep 'not found' <<<"$libs" | sort -u | tr -s ' \n' ' ')" >&2
    exit 1
  fi
  while read -r name _ path _; do
    [ -n "$path" ] && [ -f "$path" ] || continue
    grep -qE "$SYSTEM_LIBS" <<<"$name" && continue
    grep -qE "$CUDA_LIBS" <<<"$name" && continue
    strip --strip-unneeded -o "$dir/lib/$name" "$path" || { echo "gpu_check --prepare: cannot copy $path" >&2; exit 1; }
  done < <(grep "=> /" <<<"$libs")
  cp "$ROOT"/configs/*.yaml "$dir/share/minidl/configs/" || { echo "gpu_check --prepare: cannot copy configs/" >&2; exit 1; }
  # Fashion-MNIST: the 10000 test images and the first MINIDL_KIT_TRAIN_IMAGES training images
  # (the whole training split is 26 MiB of gzip; the check's epochs train on the first 10000)
  local data n_train=${MINIDL_KIT_TRAIN_IMAGES:-10000}
  data=$(fashion_mnist_dir)
  case $n_train in ''|*[!0-9]*|0) echo "gpu_check --prepare: MINIDL_KIT_TRAIN_IMAGES must be 1..60000, not '$n_train'" >&2; exit 1 ;; esac
  python3 - "$data" "$dir/fashion-mnist" "$n_train" <<'PY' || { echo "gpu_check --prepare: cannot copy Fashion-MNIST from $data (apt-get install dataset-fashion-mnist, or set MINIDL_FASHION_MNIST)" >&2; exit 1; }
import gzip, os, struct, sys
src, dst, n_train = sys.argv[1], sys.argv[2], int(sys.argv[3])
for split, keep in (("train", n_train), ("t10k", None)):
    for kind, header in (("images-idx3", 16), ("labels-idx1", 8)):
        name = f"{split}-{kind}-ubyte"
        path = os.path.join(src, name + ".gz")
        raw = gzip.open(path).read() if os.path.exists(path) else open(os.path.join(src, name), "rb").read()
        count = struct.unpack(">I", raw[4:8])[0]
        record = (len(raw) - header) // count
        if keep is not None and keep > count:
            sys.exit(f"gpu_check --prepare: {name} has {count} records, fewer than {keep}")
        n = count if keep is None else keep
        out = raw[:4] + struct.pack(">I", n) + raw[8:header] + raw[header:header + n * record]
        with gzip.GzipFile(os.path.join(dst, name + ".gz"), "wb", compresslevel=9, mtime=0) as f:
            f.write(out)
PY
  # MANIFEST: what each file is and needs
  local glibc_all glibcxx_all sonames_all commit
  commit=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
  git -C "$ROOT" diff --quiet HEAD 2>/dev/null || commit+=" (with uncommitted changes)"
  {
    echo "# MANIFEST of the minidl GPU kit, written by tools/gpu_check.sh --prepare; read by --kit"
    echo "commit $commit"
    echo "built $(date -u +%Y-%m-%dT%H:%MZ) with $(g++ --version | head -1), $("$nvcc" --version | grep -o 'release [0-9.]*')"
    echo "code host x86-64-v3 (AVX-512 kernels chosen at run time); CUDA sm_90 machine code + compute_90 PTX"
    echo "cuda_runtime $("$nvcc" --version | grep -oE 'release [0-9]+\.[0-9]+' | cut -d' ' -f2) static; the NVIDIA driver must support it (580 or newer for CUDA 13)"
    for f in "$dir"/bin/* "$dir"/lib/*; do
      need=$(needed_sonames "$f" | tr '\n' ',' | sed 's/,$//')
      echo "file ${f#"$dir"/} $(stat -c %s "$f") glibc=$(needs_version "$f" GLIBC) glibcxx=$(needs_version "$f" GLIBCXX) needed=${need:--}"
    done
    for f in "$dir"/fashion-mnist/* "$dir"/share/minidl/configs/*; do echo "file ${f#"$dir"/} $(stat -c %s "$f")"; done
  } >"$dir/MANIFEST"
  glibc_all=$(grep -oE 'glibc=GLIBC_[0-9.]+' "$dir/MANIFEST" | cut -d= -f2 | sort -uV | tail -1)
  glibcxx_all=$(grep -oE 'glibcxx=GLIBCXX_[0-9.]+' "$dir/MANIFEST" | cut -d= -f2 | sort -uV | tail -1)
  # the CUDA libraries the GPU machine must supply: those ldd found for the programs, transitively
  # (libcublas.so.13 brings libcublasLt.so.13)
  sonames_all=$(awk '{print $1}' <<<"$libs" | grep -E "$CUDA_LIBS" | grep -vx 'libcuda\.so\.1' | sort -u | tr '\n' ' ')
  {
    echo "needs_glibc ${glibc_all:--}"
    echo "needs_glibcxx ${glibcxx_all:--} (the GPU machine's libstdc++.so.6, for: $(grep -E 'glibcxx=GLIBCXX' "$dir/MANIFEST" | awk '{print $2}' | tr '\n' ' ')- the programs carry their own)"
    echo "needs_sonames ${sonames_all% }"
  } >>"$dir/MANIFEST"
  local bytes; bytes=$(du -sb "$dir" | cut -f1)
  echo "total_bytes $bytes" >>"$dir/MANIFEST"
  mb=$(( (bytes + 1048575) / 1048576 ))
  echo "gpu_check --prepare: $dir is ${mb} MiB; needs ${glibc_all} ${glibcxx_all}; from the GPU machine: ${sonames_all}"
  du -sh "$dir"/bin/* "$dir"/lib "$dir"/fashion-mnist | sed 's/^/  /'
  [ "$mb" -le "$KIT_LIMIT_MB" ] || { echo "gpu_check --prepare: $dir is ${mb} MiB, over the ${KIT_LIMIT_MB} MiB limit" >&2; exit 1; }
  rm -f "$log"
  exit 0
}

# ---- --prepare-bundle DIR: the Debian packages for a build on the GPU machine (the fallback) ----
# Downloads the packages (apt-get download, no root needed once the lists exist), unpacks each
# into DIR/prefix, makes it relocatable, copies Fashion-MNIST, checks the size.
prepare_bundle() {
  local dir=$1 debs tmp p f
  command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null ||
    { echo "gpu_check --prepare-bundle: needs apt-get and dpkg-deb (a Debian or Ubuntu machine)" >&2; exit 1; }
  mkdir -p "$dir" || { echo "gpu_check --prepare-bundle: cannot create $dir" >&2; exit 1; }
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
      echo "gpu_check --prepare-bundle: apt-get update (package lists missing or stale)"
      apt-get update -qq || { echo "gpu_check --prepare-bundle: apt-get update failed: no package registry reachable" >&2; exit 3; }
    else
      echo "gpu_check --prepare-bundle: the package lists lack some of ${want[*]}; run 'apt-get update' as root first" >&2
      exit 3
    fi
  fi
  echo "gpu_check --prepare-bundle: downloading ${#want[@]} packages"
  if ! (cd "$debs" && apt-get download -q "${want[@]}" >"$tmp/download.log" 2>&1); then
    cat "$tmp/download.log" >&2
    if grep -qiE "Could not resolve|Failed to fetch|Temporary failure|Unable to connect|Connection" "$tmp/download.log"; then
      echo "gpu_check --prepare-bundle: apt-get download failed: no package registry reachable" >&2; exit 3
    fi
    echo "gpu_check --prepare-bundle: apt-get download failed" >&2; exit 1
  fi
  rm -rf "$dir/prefix" "$dir/fashion-mnist"
  mkdir -p "$dir/prefix" "$dir/fashion-mnist"
  : >"$dir/MANIFEST"
  for f in "$debs"/*.deb; do
    p=$(dpkg-deb -f "$f" Package)
    if [ "$p" = dataset-fashion-mnist ]; then
      dpkg-deb -x "$f" "$tmp/fmnist" || { echo "gpu_check --prepare-bundle: cannot unpack $f" >&2; exit 1; }
      cp "$tmp"/fmnist/usr/share/datasets/fashion-mnist/*-ubyte.gz "$dir/fashion-mnist/"
    else
      dpkg-deb -x "$f" "$dir/prefix" || { echo "gpu_check --prepare-bundle: cannot unpack $f" >&2; exit 1; }
    fi
    echo "$p $(dpkg-deb -f "$f" Version)" >>"$dir/MANIFEST"
  done
  if [ -z "$(ls "$dir/fashion-mnist")" ]; then
    cp $(dpkg -L dataset-fashion-mnist | grep -E -- '-ubyte\.gz$') "$dir/fashion-mnist/" ||
      { echo "gpu_check --prepare-bundle: cannot copy Fashion-MNIST from the installed dataset-fashion-mnist" >&2; exit 1; }
    echo "dataset-fashion-mnist $(dpkg-query -W -f='${Version}' dataset-fashion-mnist) (installed copy)" >>"$dir/MANIFEST"
  fi
  [ "$(ls "$dir"/fashion-mnist/*-ubyte.gz | wc -l)" = 4 ] ||
    { echo "gpu_check --prepare-bundle: expected 4 Fashion-MNIST files in $dir/fashion-mnist" >&2; exit 1; }
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
    echo "gpu_check --prepare-bundle: a CMake file of the bundle still points into /usr:" >&2
    cat "$tmp/abs.txt" >&2; exit 1
  fi
  # The newest glibc / libstdc++ symbol versions the bundle's shared libraries need (the GPU
  # machine's must be at least these for Gloo; --bundle checks and builds without Gloo otherwise).
  local glibc glibcxx
  glibc=$(find "$pre" -name '*.so.*' -type f -exec objdump -T {} \; 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
  glibcxx=$(find "$pre" -name '*.so.*' -type f -exec objdump -T {} \; 2>/dev/null | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1)
  echo "needs ${glibc:-GLIBC_?} ${glibcxx:-GLIBCXX_?}" >>"$dir/MANIFEST"
  local mb; mb=$(du -sm "$dir" | cut -f1)
  echo "gpu_check --prepare-bundle: $dir is ${mb} MiB ($(grep -vc '^needs' "$dir/MANIFEST") packages, Fashion-MNIST; needs ${glibc} ${glibcxx})"
  [ "$mb" -le "$BUNDLE_LIMIT_MB" ] || { echo "gpu_check --prepare-bundle: over the ${BUNDLE_LIMIT_MB} MiB limit" >&2; exit 1; }
  exit 0
}

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d'; }
MODE=build
BUNDLE=""
KIT=""
case "${1:-}" in
  --prepare) [ $# = 2 ] || { echo "usage: tools/gpu_check.sh --prepare DIR" >&2; exit 2; }; prepare_kit "$2" ;;
  --prepare-bundle) [ $# = 2 ] || { echo "usage: tools/gpu_check.sh --prepare-bundle DIR" >&2; exit 2; }; prepare_bundle "$2" ;;
  --kit)
    [ $# = 3 ] || { echo "usage: tools/gpu_check.sh --kit DIR OUT_DIR" >&2; exit 2; }
    [ -f "$2/MANIFEST" ] && [ -d "$2/bin" ] ||
      { echo "gpu_check: $2 is not a kit (no MANIFEST or bin/; build one with tools/gpu_check.sh --prepare $2)" >&2; exit 2; }
    KIT=$(cd "$2" && pwd); MODE=kit
    shift 2 ;;
  --bundle)
    [ $# = 3 ] || { echo "usage: tools/gpu_check.sh --bundle DIR OUT_DIR" >&2; exit 2; }
    [ -d "$2/prefix/usr" ] || { echo "gpu_check: $2 is not a bundle (run tools/gpu_check.sh --prepare-bundle $2)" >&2; exit 2; }
    BUNDLE=$(cd "$2" && pwd)
    shift 2 ;;
  -h|--help) usage; exit 0 ;;
  "") usage >&2; exit 2 ;;
  -*) echo "gpu_check: unknown option '$1' (see tools/gpu_check.sh --help)" >&2; exit 2 ;;
esac
[ $# = 1 ] || { echo "usage: tools/gpu_check.sh [--kit DIR | --bundle DIR] OUT_DIR" >&2; exit 2; }

OUT_DIR=$1
mkdir -p "$OUT_DIR" || { echo "gpu_check: cannot create $OUT_DIR" >&2; exit 1; }
OUT_DIR=$(cd "$OUT_DIR" && pwd)
LOGS=$OUT_DIR/logs
rm -rf "$LOGS" "$OUT_DIR/gpu_check.json" "$OUT_DIR/gpu_check_logs.tar.gz"
mkdir -p "$LOGS"
WORK=$(mktemp -d) || exit 1
BUILD=${MINIDL_GPU_CHECK_BUILD_DIR:-$ROOT/build-gpu-check}
DEFAULT_DATA=/usr/share/datasets/fashion-mnist
[ -n "$BUNDLE" ] && DEFAULT_DATA=$BUNDLE/fashion-mnist
[ -n "$KIT" ] && DEFAULT_DATA=$KIT/fashion-mnist
DATA=${MINIDL_FASHION_MNIST:-$DEFAULT_DATA}
JOBS=${JOBS:-$(nproc)}
DEFAULT_BUDGET=360
[ "$MODE" = kit ] && DEFAULT_BUDGET=270
BUDGET=${MINIDL_GPU_CHECK_BUDGET_S:-$DEFAULT_BUDGET}
BUILD_ONLY=${MINIDL_GPU_CHECK_BUILD_ONLY:-0}
DRY_RUN=${MINIDL_GPU_CHECK_DRY_RUN:-0}
[ "$DRY_RUN" = 1 ] && [ "$MODE" != kit ] && { echo "gpu_check: MINIDL_GPU_CHECK_DRY_RUN=1 is for --kit only" >&2; exit 2; }
RESERVE=8  # seconds kept for the summary and the log archive
START=$(date +%s)
declare -A STATUS
declare -A CANNOT_START  # program -> why it cannot start here (kit mode)
CANNOT_NAMES=()          # its keys (an empty associative array's keys are "unbound" under set -u)
STEPS=()
FAILED=0
SKIPPED=0
FATAL=""
NOTES=()
FINISHED=0
NGPU=0

elapsed() { echo $(($(date +%s) - START)); }
log() { echo "[gpu_check $(elapsed)s] $*"; }
note() { NOTES+=("$*"); log "note: $*"; }

# Writes OUT_DIR/gpu_check.json from the logs of the steps that ran (python3; without it, a note).
write_summary() {
  local status_lines="" k
  for k in "${STEPS[@]}"; do status_lines+="$k=${STATUS[$k]}"$'\n'; done
  if ! command -v python3 >/dev/null; then
    log "python3 not found: no gpu_check.json (see the logs)"
    return 1
  fi
  local notes cannot="" p
  notes=$(printf '%s\n' "${NOTES[@]}")
  for p in "${CANNOT_NAMES[@]}"; do cannot+="$p=${CANNOT_START[$p]}"$'\n'; done
  python3 - "$LOGS" "$OUT_DIR/gpu_check.json" "$SKIPPED" "$(elapsed)" "$FATAL" "$status_lines" "$notes" "$MODE" \
    "$BUDGET" "$cannot" "$NGPU" <<'PY'
import json, os, sys
logs, dest, skipped, secs, fatal, status_lines = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
notes = [n for n in sys.argv[7].splitlines() if n]
mode, budget, cannot, ngpu = sys.argv[8], int(sys.argv[9]), sys.argv[10], int(sys.argv[11])
def read(name):
    p = os.path.join(logs, name)
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
# benchmarks, each figure beside its expectation
gemm = last_json(read("bench_gemm.log"))
if gemm:
    for r in gemm.get("results", []):
        if (r.get("M"), r.get("N"), r.get("K")) == (4096, 4096, 4096):
            r["expect"] = "minidl >= 0.9x cuBLAS at 4096^3"
            r["meets_expectation"] = r.get("ratio", 0) >= 0.9
models = last_json(read("bench_models.log"))
models_bf16 = last_json(read("bench_models_bf16.log"))
torch = last_json(read("bench_torch.log"))
theirs = {(r["model"], r.get("precision", "fp32")): r for r in (torch or {}).get("results", [])}
fp32_rate = {r["model"]: r.get("images_per_s") for r in (models or {}).get("results", [])}
for ms in (models, models_bf16):
    for r in (ms or {}).get("results", []):
        t = theirs.get((r["model"], r.get("precision", "fp32")))
        if t:
            r["torch_images_per_s"] = t.get("images_per_s")
            r["vs_torch"] = round(r["images_per_s"] / t["images_per_s"], 3) if t.get("images_per_s") else None
        if ms is models_bf16 and fp32_rate.get(r["model"]):
            r["vs_fp32"] = round(r["images_per_s"] / fp32_rate[r["model"]], 3)
        r["expect"] = "PyTorch's images/s on the same GPU, same step (SGD, batch %s, %s), for comparison" % (
            ms.get("batch"), r.get("precision", "fp32"))
smoke = read("kit_start.txt")
gpu = read("gpu.txt")
facts = read("facts.txt")
summary = {"mode": mode, "seconds": secs, "budget_seconds": budget, "fatal": fatal or None,
           "gpu": gpu.strip() if gpu else None, "gpus": ngpu, "steps": steps,
           "facts": facts.splitlines() if facts else [], "notes": notes,
           "kit": {"program_start": smoke.splitlines() if smoke else [],
                   "cannot_start": dict(l.split("=", 1) for l in cannot.splitlines() if "=" in l)} if mode == "kit" else None,
           "tests": {s: tail(s) for s in ("test_kernels", "test_nccl", "test_data_gpu",
                                          "memcheck", "multi_gpu_tests") if read(s + ".log") is not None},
           "skipped_gpu_tests": skipped,
           "benchmarks": {"gemm": gemm, "models": models, "models_bf16": models_bf16, "torch": torch},
           "epochs": epochs}
with open(dest, "w") as f:
    json.dump(summary, f, indent=2)
print(json.dumps({k: summary[k] for k in ("mode", "seconds", "fatal", "steps", "notes")}, indent=2))
PY
}

# The logs come back as one archive; each log is cut to its last 2 MiB first.
pack_logs() {
  local f
  find "$LOGS" -type f -size +2M | while read -r f; do
    tail -c 2M "$f" >"$f.cut" && mv "$f.cut" "$f" && echo "[cut to its last 2 MiB]" >>"$f"
  done
  tar czf "$OUT_DIR/gpu_check_logs.tar.gz" -C "$OUT_DIR" logs && rm -rf "$LOGS"
}

finish() {  # finish STATUS — summary, log archive, list of steps, exit
  local rc=$1 k
  [ "$FINISHED" = 1 ] && exit "$rc"
  FINISHED=1
  write_summary || rc=1
  pack_logs || { log "could not pack the logs"; rc=1; }
  rm -rf "$WORK"
  log "steps:"
  for k in "${STEPS[@]}"; do echo "  $k: ${STATUS[$k]}"; done
  [ -n "$FATAL" ] && log "FATAL: $FATAL"
  log "summary: $OUT_DIR/gpu_check.json, logs: $OUT_DIR/gpu_check_logs.tar.gz; exit $rc"
  exit "$rc"
}
die() { FATAL="$*"; log "FATAL: $*"; finish 1; }
# Every exit path writes the summary: a signal or an unexpected exit included.
trap 'FATAL=${FATAL:-"stopped by a signal after $(elapsed)s"}; finish 1' INT TERM
trap '[ "$FINISHED" = 1 ] || { FATAL=${FATAL:-"exited early after $(elapsed)s"}; finish 1; }' EXIT

left() { echo $((BUDGET - RESERVE - $(elapsed))); }
not_run() { STEPS+=("$1"); STATUS[$1]="not run ($2)"; log "$1: not run ($2)"; }

# step NAME TIMEOUT_S CMD... — runs CMD, its log in LOGS/NAME.log, its timeout clipped to the budget
step() {
  local name=$1 t=$2 l rc
  shift 2
  l=$(left)
  if [ "$l" -lt 5 ]; then not_run "$name" "over the ${BUDGET}s budget"; FAILED=1; return; fi
  [ "$t" -gt "$l" ] && t=$l
  STEPS+=("$name")
  log "$name (timeout ${t}s) ..."
  if timeout -k 5 "$t" "$@" >"$LOGS/$name.log" 2>&1; then
    STATUS[$name]=pass; log "$name: ok"
  else
    rc=$?
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then STATUS[$name]="fail (timed out after ${t}s)"; else STATUS[$name]="fail (exit $rc)"; fi
    FAILED=1; log "$name: FAILED (${STATUS[$name]}), last lines:"; tail -15 "$LOGS/$name.log"
  fi
}

# Parallel steps: bg NAME TIMEOUT_S CMD... starts one; bg_wait waits for all and records them.
BG=()
bg() {
  local name=$1 t=$2 l
  shift 2
  l=$(left)
  if [ "$l" -lt 5 ]; then not_run "$name" "over the ${BUDGET}s budget"; FAILED=1; return; fi
  [ "$t" -gt "$l" ] && t=$l
  STEPS+=("$name")
  STATUS[$name]="running (timeout ${t}s)"
  log "$name started (timeout ${t}s)"
  ( timeout -k 5 "$t" "$@" >"$LOGS/$name.log" 2>&1; echo $? >"$WORK/$name.rc" ) &
  BG+=("$name:$!:$t")
}
bg_wait() {
  local e name pid t rc
  for e in "${BG[@]}"; do
    IFS=: read -r name pid t <<<"$e"
    wait "$pid"
    rc=$(cat "$WORK/$name.rc" 2>/dev/null || echo 1)
    if [ "$rc" = 0 ]; then STATUS[$name]=pass; log "$name: ok"
    else
      if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then STATUS[$name]="fail (timed out after ${t}s)"; else STATUS[$name]="fail (exit $rc)"; fi
      FAILED=1; log "$name: FAILED (${STATUS[$name]}), last lines:"; tail -15 "$LOGS/$name.log"
    fi
  done
  BG=()
}

# A gtest log's skipped tests: "[  SKIPPED ] Suite.Test (N ms)" lines (not the summary's list).
count_skipped() {
  local n=0
  [ -f "$1" ] && n=$(grep -cE '^\[  SKIPPED \] [A-Za-z0-9_/]+\.[A-Za-z0-9_/]+ \(' "$1")
  echo "${n:-0}"
}

# ---- 0. facts, the GPU ----
NVCC=/usr/local/cuda/bin/nvcc
[ -x "$NVCC" ] || NVCC=$(command -v nvcc || true)
CUDA_HOME_DIR=${CUDA_HOME:-$(dirname "$(dirname "${NVCC:-/usr/local/cuda/bin/nvcc}")")}
{
  echo "mode: $MODE"
  echo "host: $(uname -srm); $(nproc) cores"
  echo "glibc: $(ldd --version 2>/dev/null | head -1 || echo unknown)"
  echo "nvcc: $([ -n "$NVCC" ] && "$NVCC" --version | grep -i release || echo 'not found')"
  if [ "$MODE" = kit ]; then
    echo "kit: $KIT ($(grep -E '^(commit|built|needs_glibc|needs_glibcxx|needs_sonames|total_bytes) ' "$KIT/MANIFEST" | tr '\n' ';'))"
  else
    echo "g++: $(g++ --version 2>/dev/null | head -1 || echo 'not found')"
    echo "cmake: $(cmake --version 2>/dev/null | head -1 || echo 'not found'); ninja: $(ninja --version 2>/dev/null || echo 'not found')"
  fi
  echo "compute-sanitizer: $(command -v compute-sanitizer || ls "$CUDA_HOME_DIR/bin/compute-sanitizer" 2>/dev/null || echo 'not found')"
  [ -n "$BUNDLE" ] && echo "bundle: $BUNDLE ($(grep -vc '^needs' "$BUNDLE/MANIFEST") packages; $(grep '^needs' "$BUNDLE/MANIFEST"))"
} | tee "$LOGS/facts.txt"
if [ "$BUILD_ONLY" != 1 ] && [ "$DRY_RUN" != 1 ]; then
  command -v nvidia-smi >/dev/null || die "no GPU: nvidia-smi not found (no NVIDIA driver on this machine)"
  if ! timeout 30 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$LOGS/gpu.txt" 2>&1 \
     || ! grep -q '[A-Za-z]' "$LOGS/gpu.txt" || grep -qiE 'failed|no devices|not found|error' "$LOGS/gpu.txt"; then
    die "no GPU: nvidia-smi lists no device ($(head -c 300 "$LOGS/gpu.txt" | tr '\n' ' '))"
  fi
  cat "$LOGS/gpu.txt"
  NGPU=$(grep -c '[A-Za-z]' "$LOGS/gpu.txt")
  timeout 10 nvidia-smi 2>/dev/null | grep -m1 -o 'CUDA Version: [0-9.]*' | sed 's/^/driver supports /' | tee -a "$LOGS/facts.txt"
fi
[ -f "$DATA/train-images-idx3-ubyte" ] || [ -f "$DATA/train-images-idx3-ubyte.gz" ] ||
  note "Fashion-MNIST not found in $DATA (set MINIDL_FASHION_MNIST): the epoch steps will fail"

# wheel_lib SONAME — the directory of SONAME inside the nvidia-* Python wheels (nvidia/<pkg>/lib or
# nvidia/cu13/lib) of /opt/torch/.venv/bin/python3, else python3.
wheel_lib() {
  local py d f
  for py in /opt/torch/.venv/bin/python3 python3; do
    command -v "$py" >/dev/null || continue
    for d in $("$py" -c 'import nvidia; print(" ".join(nvidia.__path__))' 2>/dev/null); do
      f=$(find "$d" -maxdepth 3 -name "$1" 2>/dev/null | head -1)
      [ -n "$f" ] && { dirname "$f"; return 0; }
    done
  done
  return 1
}
LIB_PATH=""
add_lib_path() { case ":$LIB_PATH:" in *":$1:"*) ;; *) LIB_PATH+="$1:" ;; esac; }

if [ "$MODE" = kit ]; then
  # ---- kit: the CUDA libraries by SONAME, then each program started once ----
  add_lib_path "$KIT/lib"
  TOOLKIT_LIBS=("$CUDA_HOME_DIR/lib64" "$CUDA_HOME_DIR/lib" "$CUDA_HOME_DIR/targets/x86_64-linux/lib")
  for so in $(sed -n 's/^needs_sonames //p' "$KIT/MANIFEST"); do
    where=""
    for d in "${TOOLKIT_LIBS[@]}"; do
      [ -e "$d/$so" ] && { where=$d; echo "$so: $d (the CUDA toolkit)"; break; }
    done
    if [ -z "$where" ] && where=$(wheel_lib "$so"); then echo "$so: $where (Python wheel)"; fi
    if [ -z "$where" ] && ldconfig -p 2>/dev/null | grep -qE "^[[:space:]]*$so "; then
      echo "$so: $(ldconfig -p | grep -m1 -E "^[[:space:]]*$so " | sed 's/.*=> //') (the system's loader cache)"; continue
    fi
    if [ -z "$where" ]; then echo "$so: NOT FOUND (not in the toolkit, the nvidia-* wheels or the loader's cache)"; continue; fi
    add_lib_path "$where"
  done | tee -a "$LOGS/facts.txt"
  # the loop ran in a pipeline (tee): take the directories back from what it printed
  for d in $(sed -n 's/^lib[^:]*: \(\/[^ ]*\) (\(the CUDA toolkit\|Python wheel\))$/\1/p' "$LOGS/facts.txt"); do add_lib_path "$d"; done
  export LD_LIBRARY_PATH="${LIB_PATH}${LD_LIBRARY_PATH:-}"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" | tee -a "$LOGS/facts.txt"
  have_glibc=$(ldd --version 2>/dev/null | head -1 | grep -oE '[0-9]+\.[0-9]+$')
  need_glibc=$(sed -n 's/^needs_glibc GLIBC_//p' "$KIT/MANIFEST")
  drv=$(sed -n 's/.*,[[:space:]]*\([0-9]*\)\.[0-9.]*$/\1/p' "$LOGS/gpu.txt" 2>/dev/null | head -1)
  [ -n "$drv" ] && [ "$drv" -lt 580 ] && note "the NVIDIA driver ($drv) is older than CUDA 13's minimum (580): the kit's static CUDA 13 runtime cannot start; use the fallback (--bundle) with a matching toolkit"
  P_KERNELS=$KIT/bin/test_gpu_kit P_DIST=$KIT/bin/test_gpu_kit P_DATA=$KIT/bin/test_gpu_kit
  P_BENCH=$KIT/bin/gpu_bench P_TRAIN=$KIT/bin/train
  for p in "$KIT"/bin/*; do
    name=${p##*/}
    case $name in train|gpu_bench) args=(--help) ;; *) args=(--gtest_list_tests) ;; esac
    deps=$(ldd "$p" 2>&1)
    if grep -q "not found" <<<"$deps"; then
      CANNOT_START[$name]="missing libraries: $(grep 'not found' <<<"$deps" | sed 's/ =>.*//; s/^[[:space:]]*//' | sort -u | tr '\n' ' ')"
    elif ! timeout 20 "$p" "${args[@]}" >"$WORK/start_$name.txt" 2>&1; then
      why=$(grep -m1 -oE "GLIBC(XX)?_[0-9.]+' not found|error while loading shared libraries: .*|CUDA driver version is insufficient.*" "$WORK/start_$name.txt")
      CANNOT_START[$name]="${p##*/} ${args[*]} failed: ${why:-$(tail -2 "$WORK/start_$name.txt" | tr '\n' ' ')}"
      if grep -q "GLIBC_" <<<"$why"; then CANNOT_START[$name]+=" (the kit needs glibc ${need_glibc:-?}, this machine has ${have_glibc:-?})"; fi
    fi
    if [ -n "${CANNOT_START[$name]:-}" ]; then echo "$name: CANNOT START: ${CANNOT_START[$name]}"; else echo "$name: starts"; fi
  done | tee "$LOGS/kit_start.txt"
  while IFS= read -r line; do
    case $line in
      *": CANNOT START: "*) CANNOT_START[${line%%: CANNOT START: *}]=${line#*: CANNOT START: }
                            CANNOT_NAMES+=("${line%%: CANNOT START: *}") ;;
    esac
  done <"$LOGS/kit_start.txt"
  if [ "${#CANNOT_NAMES[@]}" -gt 0 ]; then
    FAILED=1
    note "prebuilt programs that cannot start here: ${CANNOT_NAMES[*]}; fallback: build here with tools/gpu_check.sh --bundle (docs/gpu.md)"
  fi
  [ "$DRY_RUN" = 1 ] && { log "dry run (MINIDL_GPU_CHECK_DRY_RUN=1): libraries found and programs started; no GPU step run"; finish "$FAILED"; }
else
  # ---- build here: cuDNN / NCCL from the toolkit, else the Python wheels, then configure and build ----
  CMAKE_ARGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DMINIDL_CUDA=ON -DMINIDL_BUILD_BENCHMARKS=OFF
              -DCMAKE_CUDA_ARCHITECTURES=90)
  command -v cmake >/dev/null || die "cmake not found"
  command -v ninja >/dev/null || die "ninja not found (the check builds with Ninja)"
  [ -n "$NVCC" ] || [ "$BUILD_ONLY" = 1 ] || die "nvcc not found (CUDA toolkit missing)"
  # wheel_dir NAME HEADER — the wheel directory holding include/HEADER and lib/libNAME.so*
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
  for lib in cudnn:CUDNN:cudnn.h nccl:NCCL:nccl.h; do
    IFS=: read -r name var header <<<"$lib"
    root_var=MINIDL_${var}_ROOT
    root=${!root_var:-}
    if [ -z "$root" ] && ! { [ -f "$CUDA_HOME_DIR/include/$header" ] && ls "$CUDA_HOME_DIR"/lib64/lib$name.so* >/dev/null 2>&1; }; then
      root=$(wheel_dir "$name" "$header") || root=""
    fi
    if [ -n "$root" ]; then
      CMAKE_ARGS+=("-D$root_var=$root")
      add_lib_path "$root/lib"
      echo "$name: $root ($(ls "$root"/lib/lib$name.so* 2>/dev/null | xargs -n1 basename 2>/dev/null | tr '\n' ' '))" | tee -a "$LOGS/facts.txt"
    else
      echo "$name: the CUDA toolkit ($CUDA_HOME_DIR) or the system paths" | tee -a "$LOGS/facts.txt"
    fi
  done
  # The bundle: its prefix searched first, its libraries found at run time. Gloo's shared library
  # needs the glibc / libstdc++ symbol versions of the Debian release it came from: without them,
  # build without Gloo (the HostStaging tests then skip, and the check says so).
  GLOO=1
  if [ -n "$BUNDLE" ]; then
    CMAKE_ARGS+=("-DCMAKE_PREFIX_PATH=$BUNDLE/prefix/usr")
    add_lib_path "$BUNDLE/prefix/usr/lib/x86_64-linux-gnu"; add_lib_path "$BUNDLE/prefix/usr/lib"
    need_glibc=$(sed -n 's/^needs GLIBC_\([0-9.]*\) .*/\1/p' "$BUNDLE/MANIFEST")
    need_cxx=$(sed -n 's/^needs .* \(GLIBCXX_[0-9.]*\)$/\1/p' "$BUNDLE/MANIFEST")
    have_glibc=$(ldd --version 2>/dev/null | head -1 | grep -oE '[0-9]+\.[0-9]+$')
    stdcxx=$(g++ -print-file-name=libstdc++.so.6 2>/dev/null)
    if [ -n "$need_glibc" ] && [ "$(printf '%s\n%s\n' "$need_glibc" "${have_glibc:-0}" | sort -V | head -1)" != "$need_glibc" ]; then
      GLOO=0; note "Gloo off: the bundle's libgloo needs glibc $need_glibc, this machine has ${have_glibc:-unknown}"
    elif [ -n "$need_cxx" ] && ! grep -qa "$need_cxx" "$(readlink -f "$stdcxx" 2>/dev/null || echo /nonexistent)"; then
      GLOO=0; note "Gloo off: the bundle's libgloo needs $need_cxx, not in this machine's libstdc++ ($stdcxx)"
    fi
  fi
  if [ "${MINIDL_GPU_CHECK_GLOO:-1}" = 0 ]; then GLOO=0; note "Gloo off: MINIDL_GPU_CHECK_GLOO=0"; fi
  [ "$GLOO" = 0 ] && CMAKE_ARGS+=(-DCMAKE_DISABLE_FIND_PACKAGE_Gloo=ON)
  [ -n "$LIB_PATH" ] && export LD_LIBRARY_PATH="${LIB_PATH}${LD_LIBRARY_PATH:-}"
  # shellcheck disable=SC2206
  [ -n "${MINIDL_GPU_CHECK_CMAKE_ARGS:-}" ] && CMAKE_ARGS+=(${MINIDL_GPU_CHECK_CMAKE_ARGS})
  rm -f "$BUILD/CMakeCache.txt"  # a fresh configure: cached cuDNN/NCCL/Gloo paths of an earlier run must not win
  step configure 90 cmake -S "$ROOT" -B "$BUILD" "${CMAKE_ARGS[@]}"
  [ "${STATUS[configure]}" = pass ] || die "configure: ${STATUS[configure]} (see logs/configure.log)"
  grep -E "minidl: (CUDA backend|CUDNN|NCCL)" "$LOGS/configure.log" | tee -a "$LOGS/facts.txt"
  if [ "$BUILD_ONLY" != 1 ]; then
    grep -q "CUDA backend ON" "$LOGS/configure.log" || die "CUDA backend not enabled (see logs/configure.log)"
  fi
  TARGETS=${MINIDL_GPU_CHECK_TARGETS:-test_kernels test_dist test_data gpu_bench train}
  # shellcheck disable=SC2086
  step build "${MINIDL_GPU_CHECK_BUILD_TIMEOUT_S:-240}" cmake --build "$BUILD" -j "$JOBS" --target $TARGETS
  [ "${STATUS[build]}" = pass ] || die "build: ${STATUS[build]} (see logs/build.log)"
  [ "$BUILD_ONLY" = 1 ] && { log "build only (MINIDL_GPU_CHECK_BUILD_ONLY=1): done"; finish "$FAILED"; }
  P_KERNELS=$BUILD/tests/test_kernels P_DIST=$BUILD/tests/test_dist P_DATA=$BUILD/tests/test_data
  P_BENCH=$BUILD/tools/gpu_bench P_TRAIN=$BUILD/examples/train
fi
export MINIDL_FASHION_MNIST="$DATA"

# runnable PROGRAM — true when PROGRAM can start here (always, outside kit mode)
runnable() { [ -z "${CANNOT_START[${1##*/}]:-}" ]; }
# gpu_step bg|step NAME TIMEOUT_S PROGRAM ARGS... — a step of one of our programs
gpu_step() {
  local how=$1 name=$2 t=$3 p=$4
  if ! runnable "$p"; then not_run "$name" "${p##*/} cannot start here: ${CANNOT_START[${p##*/}]}"; FAILED=1; return; fi
  shift 3
  "$how" "$name" "$t" "$@"
}

# ---- 1. in parallel: GPU tests, memcheck, one short epoch per model (16 cores: threads shared) ----
# A test that skips says why; on a GPU machine none of the selected tests may skip.
KERNEL_FILTER='Cuda*:CachingAllocator*:-CudaMultiGpu*:CudaStub*'
OMP_NUM_THREADS=6 gpu_step bg test_kernels 110 "$P_KERNELS" --gtest_filter="$KERNEL_FILTER"
OMP_NUM_THREADS=2 gpu_step bg test_nccl 60 "$P_DIST" --gtest_filter='ProcessGroupNccl*:HostStaging*'
OMP_NUM_THREADS=1 gpu_step bg test_data_gpu 30 "$P_DATA" --gtest_filter='DataLoaderPinMemory*:-*WithoutACudaDevice*'
# memcheck over small shapes only: element-wise, reductions, strided outputs, matmuls, a small
# convolution, pooling, layer norm, cross-entropy, the allocator (no batch-512 convolutions checked
# against the CPU: under memcheck those alone would take minutes)
SANITIZER=$(command -v compute-sanitizer || echo "$CUDA_HOME_DIR/bin/compute-sanitizer")
if [ -x "$SANITIZER" ]; then
  OMP_NUM_THREADS=2 gpu_step bg memcheck 110 "$SANITIZER" --tool memcheck --error-exitcode 9 "$P_KERNELS" \
    --gtest_filter='CudaOps.UnaryOps*:CudaOps.BinaryOps*:CudaOps.ReductionsMatchCpu:CudaOps.StridedOutputs*:CudaOps.Matmul*:CudaNn.Conv2dForwardAndBackwardMatchCpu:CudaNn.Pooling*:CudaNn.LayerNorm*:CudaNn.CrossEntropyForwardAndBackwardMatchCpu:CudaAllocator*'
else
  not_run memcheck "compute-sanitizer not found"; FAILED=1
fi
for m in mlp cnn vit; do
  mkdir -p "$LOGS/train_$m"
  recipe=()
  [ "$MODE" = kit ] && recipe=(--config "$KIT/share/minidl/configs/$m.yaml")
  gpu_step bg "epoch_$m" 110 "$P_TRAIN" --model "$m" "${recipe[@]}" --device cuda --epochs 1 --data "$DATA" --threads 2 --workers 2 \
    --train-subset 10000 --val-subset 2000 --out "$WORK/train_$m"
done
if [ "$NGPU" -gt 1 ]; then
  OMP_NUM_THREADS=2 gpu_step bg multi_gpu_tests 60 "$P_KERNELS" --gtest_filter='CudaMultiGpu*'
  gpu_step bg train_nproc 110 "$P_TRAIN" --model mlp --device cuda --nproc "$NGPU" --epochs 1 --data "$DATA" \
    --threads 2 --workers 1 --train-subset 10000 --val-subset 2000 --out "$WORK/train_nproc"
else
  not_run multi_gpu_tests "1 GPU: CudaMultiGpu.* needs two"
  not_run train_nproc "1 GPU: train --nproc N over NCCL needs N > 1 GPUs"
fi
bg_wait
for d in "$WORK"/train_*; do  # keep the metrics and the log, not the checkpoints
  [ -d "$d" ] || continue
  mkdir -p "$LOGS/${d##*/}"
  cp "$d"/*.jsonl "$d"/*.log "$d"/*.txt "$LOGS/${d##*/}/" 2>/dev/null
  rm -rf "$d"
done
if [ "${STATUS[memcheck]:-}" != pass ] && grep -qE "Device not supported|device is not supported" "$LOGS/memcheck.log" 2>/dev/null; then
  STATUS[memcheck]="not run (compute-sanitizer does not support this machine's device or runtime: $(grep -m1 -oE '[^=]*not supported[^.]*' "$LOGS/memcheck.log"))"
  note "memcheck could not attach here (a gVisor machine?); not counted as a failure"
fi
for s in test_kernels test_nccl test_data_gpu multi_gpu_tests; do
  SKIPPED=$((SKIPPED + $(count_skipped "$LOGS/$s.log")))
done

# ---- 2. benchmarks, one at a time ----
gpu_step step bench_gemm 25 "$P_BENCH" gemm
gpu_step step bench_models 35 "$P_BENCH" models --batch 512
gpu_step step bench_models_bf16 30 "$P_BENCH" models --batch 512 --precision bf16
TORCH_PY=/opt/torch/.venv/bin/python3
if [ -x "$TORCH_PY" ]; then
  step bench_torch 55 "$TORCH_PY" "$ROOT/tools/bench_torch_gpu.py" --batch 512 --precision fp32 bf16
else
  STEPS+=(bench_torch); STATUS[bench_torch]="not run (no /opt/torch/.venv on this machine)"
fi
python3 - "$LOGS" <<'PY' || true
import json, os, sys
def last(name):
    try: lines = open(os.path.join(sys.argv[1], name)).read().splitlines()
    except OSError: return None
    for l in reversed(lines):
        if l.startswith("{"):
            try: return json.loads(l)
            except ValueError: pass
g, t = last("bench_gemm.log"), last("bench_torch.log")
for r in (g or {}).get("results", []):
    exp = "   expect >= 0.90x cuBLAS" if (r["M"], r["N"], r["K"]) == (4096, 4096, 4096) and r.get("dtype", "fp32") == "fp32" else ""
    print(f"gemm {r['M']}x{r['N']}x{r['K']} {r.get('dtype', 'fp32')} tf32={r['tf32']}: minidl {r['minidl_tflops']} TFLOP/s, cuBLAS {r['cublas_tflops']}, ratio {r['ratio']}{exp}")
theirs = {(r["model"], r.get("precision", "fp32")): r["images_per_s"] for r in (t or {}).get("results", [])}
for m in (last("bench_models.log"), last("bench_models_bf16.log")):
    for r in (m or {}).get("results", []):
        p = r.get("precision", "fp32")
        ref = theirs.get((r["model"], p))
        side = f", PyTorch {ref:.0f} ({r['images_per_s'] / ref:.2f}x)" if ref else ", PyTorch: not measured"
        print(f"{r['model']} {p} batch {m.get('batch')}: minidl {r['images_per_s']:.0f} images/s{side}")
PY

[ "$SKIPPED" = 0 ] || { log "FAILED: $SKIPPED GPU test(s) skipped on a GPU machine"; FAILED=1; }
finish "$FAILED"
