#!/usr/bin/env bash
# tools/gpu_kit_test.sh WORK_DIR [COMPILER_LAUNCHER] — proves, on a machine without a GPU, that the
# GPU machine's prebuilt kit can run there: `tools/gpu_check.sh --prepare WORK_DIR/kit` builds it
# (in WORK_DIR/build, or MINIDL_KIT_BUILD_DIR when set: an existing kit build is reused), then this
# script checks that
#   - the kit is at most 48 MiB and holds every program the check runs;
#   - every program carries sm_90 machine code and compute_90 PTX (cuobjdump --list-elf/--list-ptx,
#     or tools/fatbin_list.py where cuobjdump is absent);
#   - no file needs a GLIBC newer than 2.35 (its version references, objdump -p);
#   - each program needs only the C library, the carried Gloo and cuBLAS/cuDNN/NCCL by their
#     SONAMEs (libcublas.so.13, libcublasLt.so.13, libcudnn.so.9, libnccl.so.2): no libstdc++,
#     libgcc_s, libgomp, yaml-cpp, zlib, GoogleTest or CUDA runtime, and its RPATH is $ORIGIN/../lib;
#   - with the CUDA libraries offered only as fake Python wheels (versioned names symlinked to the
#     toolkit's copies, found through `import nvidia` on PYTHONPATH, the toolkit hidden by CUDA_HOME),
#     `tools/gpu_check.sh --kit` in dry-run mode finds each library in those wheels, starts every
#     program (--help, --gtest_list_tests), and writes gpu_check.json and one log archive; ldd shows
#     nothing of yaml-cpp, GoogleTest, zlib or Gloo resolving outside the kit, and the CUDA
#     libraries resolving from the wheels;
#   - test_gpu_kit (test_kernels + test_dist + test_data) lists the suites the check filters on,
#     and the trainer runs a CPU smoke
#     test from the kit's recipe and data;
#   - without a GPU, the full --kit run stops at once saying so, exit 1, and still writes its JSON.
# Exit 0 when all hold, 77 (ctest: skipped, with the reason printed) when nvcc is absent, 1 otherwise.
# Run by ctest as gpu_kit_runs_without_system_packages.
set -uo pipefail
WORK=${1:?usage: tools/gpu_kit_test.sh WORK_DIR [COMPILER_LAUNCHER]}
LAUNCHER=${2:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$WORK" && WORK=$(cd "$WORK" && pwd)
KIT=$WORK/kit
fail() { echo "gpu_kit_test: FAIL: $*" >&2; exit 1; }
say() { echo "gpu_kit_test: $*"; }

CUDA=/usr/local/cuda
NVCC=$CUDA/bin/nvcc
[ -x "$NVCC" ] || NVCC=$(command -v nvcc || true)
if [ -z "$NVCC" ]; then
  echo "gpu_kit_test: SKIPPED: nvcc not found, so the kit's CUDA programs cannot be built here"
  exit 77
fi
CUDA=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
START=$(date +%s)

# 1. the kit
# MINIDL_KIT_CMAKE_ARGS from the environment (ctest passes -DMINIDL_WERROR=<the build's>), then the launcher
args=${MINIDL_KIT_CMAKE_ARGS:-}
[ -n "$LAUNCHER" ] && args+=" -DCMAKE_CXX_COMPILER_LAUNCHER=$LAUNCHER -DCMAKE_CUDA_COMPILER_LAUNCHER=$LAUNCHER"
MINIDL_KIT_BUILD_DIR=${MINIDL_KIT_BUILD_DIR:-$WORK/build} MINIDL_KIT_CMAKE_ARGS="$args" JOBS=${JOBS:-2} \
  "$ROOT/tools/gpu_check.sh" --prepare "$KIT"
rc=$?
[ "$rc" = 0 ] || fail "tools/gpu_check.sh --prepare exited $rc"
say "kit prepared in $(( $(date +%s) - START )) s"
PROGRAMS=(test_gpu_kit gpu_bench train)
for p in "${PROGRAMS[@]}"; do [ -x "$KIT/bin/$p" ] || fail "the kit has no bin/$p"; done
[ -f "$KIT/MANIFEST" ] || fail "the kit has no MANIFEST"
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  [ -s "$KIT/fashion-mnist/$f.gz" ] || fail "the kit has no fashion-mnist/$f.gz"
done
bytes=$(du -sb "$KIT" | cut -f1)
[ "$bytes" -le $((48 * 1024 * 1024)) ] || fail "the kit is $bytes bytes, over 48 MiB"
say "size $((bytes / 1024)) KiB (limit 49152 KiB)"

# 2. sm_90 machine code and PTX in every program
for p in "${PROGRAMS[@]}"; do
  if command -v cuobjdump >/dev/null; then
    code=$(cuobjdump --list-elf "$KIT/bin/$p" 2>&1 | grep -o 'sm_[0-9]*' | sort -u | sed 's/^/elf /'
           cuobjdump --list-ptx "$KIT/bin/$p" 2>&1 | grep -o 'sm_[0-9]*' | sort -u | sed 's/^/ptx /')
  else
    code=$(python3 "$ROOT/tools/fatbin_list.py" "$KIT/bin/$p") || fail "tools/fatbin_list.py cannot read bin/$p"
  fi
  grep -q "elf sm_90" <<<"$code" || fail "bin/$p has no sm_90 machine code: $(tr '\n' ' ' <<<"$code")"
  grep -q "ptx sm_90" <<<"$code" || fail "bin/$p has no compute_90 PTX: $(tr '\n' ' ' <<<"$code")"
done
say "every program holds sm_90 machine code and PTX"

# 3. glibc <= 2.35
for f in "$KIT"/bin/* "$KIT"/lib/*; do
  v=$(objdump -p "$f" | sed -n '/^Version References:/,/^$/p' | grep -oE 'GLIBC_[0-9.]+' | sort -uV | tail -1)
  [ -n "$v" ] || fail "${f#"$KIT"/} lists no GLIBC version (objdump -p failed?)"
  [ "$(printf '%s\n%s\n' "${v#GLIBC_}" 2.35 | sort -V | tail -1)" = 2.35 ] || fail "${f#"$KIT"/} needs $v (> GLIBC_2.35)"
  # objdump -T agrees: no imported symbol versioned above 2.35
  bad=$(objdump -T "$f" | grep -oE 'GLIBC_2\.(3[6-9]|[4-9][0-9])' | sort -u | tr '\n' ' ')
  [ -z "$bad" ] || fail "${f#"$KIT"/} has symbols of $bad"
done
grep -q "^needs_glibc GLIBC_2\.\(3[0-5]\|[12][0-9]\|[0-9]\)\b" "$KIT/MANIFEST" || fail "MANIFEST: $(grep '^needs_glibc ' "$KIT/MANIFEST")"
say "nothing needs a GLIBC newer than 2.35 ($(grep '^needs_glibc ' "$KIT/MANIFEST"))"

# 4. what each program needs
allowed='^(libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|ld-linux-x86-64\.so\.2|libcublas\.so\.13|libcublasLt\.so\.13|libcudnn\.so\.9|libnccl\.so\.2)$'
for p in "${PROGRAMS[@]}"; do
  dyn=$(readelf -d "$KIT/bin/$p") || fail "readelf -d bin/$p failed"
  needed=$(sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' <<<"$dyn")
  [ -n "$needed" ] || fail "bin/$p lists no NEEDED libraries"
  while read -r so; do
    grep -qE "$allowed" <<<"$so" && continue
    [ -f "$KIT/lib/$so" ] && continue
    fail "bin/$p needs $so, neither carried in lib/ nor one of the C library's or the CUDA SONAMEs"
  done <<<"$needed"
  grep -qE '^(libstdc\+\+|libgcc_s|libgomp|libyaml-cpp|libz\.|libgtest|libgmock|libcudart)' <<<"$needed" &&
    fail "bin/$p links a runtime dynamically: $(tr '\n' ' ' <<<"$needed")"
  grep -qF '(RPATH)              Library rpath: [$ORIGIN/../lib]' <<<"$dyn" ||
    fail "bin/$p has no RPATH \$ORIGIN/../lib: $(grep -E 'RPATH|RUNPATH' <<<"$dyn")"
done
for so in libcublas.so.13 libcudnn.so.9 libnccl.so.2; do
  grep -qx "$so" <<<"$(readelf -d "$KIT/bin/test_gpu_kit" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')" ||
    fail "test_gpu_kit does not need $so by that name"
done
say "programs need only the C library, lib/ and the CUDA SONAMEs; RPATH \$ORIGIN/../lib"

# 5. the CUDA libraries as fake wheels only (site-packages/nvidia/<pkg>/lib), the toolkit hidden
SITE=$WORK/site
rm -rf "$SITE" "$WORK/no-cuda" && mkdir -p "$SITE/nvidia/cu13/lib" "$SITE/nvidia/cudnn/lib" "$SITE/nvidia/nccl/lib" "$WORK/no-cuda"
lib64=$CUDA/lib64
[ -e "$lib64/libcublas.so.13" ] || lib64=$CUDA/lib
for so in libcublas.so.13 libcublasLt.so.13; do
  [ -e "$lib64/$so" ] || fail "the toolkit has no $lib64/$so to stand in for the wheel"
  ln -s "$(readlink -f "$lib64/$so")" "$SITE/nvidia/cu13/lib/$so"
done
for f in "$lib64"/libcudnn*.so.9; do ln -s "$(readlink -f "$f")" "$SITE/nvidia/cudnn/lib/${f##*/}"; done
ln -s "$(readlink -f "$lib64/libnccl.so.2")" "$SITE/nvidia/nccl/lib/libnccl.so.2"
[ -e "$SITE/nvidia/cudnn/lib/libcudnn.so.9" ] || fail "the toolkit has no libcudnn.so.9"
rm -rf "$WORK/dry"
env -u LD_LIBRARY_PATH PYTHONPATH="$SITE" CUDA_HOME="$WORK/no-cuda" MINIDL_GPU_CHECK_DRY_RUN=1 \
  "$ROOT/tools/gpu_check.sh" --kit "$KIT" "$WORK/dry" >"$WORK/dry.log" 2>&1
rc=$?
[ "$rc" = 0 ] || fail "gpu_check.sh --kit (dry run) exited $rc: $(tail -15 "$WORK/dry.log")"
[ -s "$WORK/dry/gpu_check.json" ] || fail "the dry run wrote no gpu_check.json"
[ -s "$WORK/dry/gpu_check_logs.tar.gz" ] || fail "the dry run wrote no gpu_check_logs.tar.gz"
python3 - "$WORK/dry/gpu_check.json" "$SITE" "${PROGRAMS[@]}" <<'PY' || fail "the dry run's gpu_check.json is wrong (above)"
import json, sys
j, site, programs = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3:]
facts, kit = "\n".join(j["facts"]), j["kit"]
errors = []
for so, pkg in (("libcublas.so.13", "cu13"), ("libcublasLt.so.13", "cu13"), ("libcudnn.so.9", "cudnn"), ("libnccl.so.2", "nccl")):
    want = f"{so}: {site}/nvidia/{pkg}/lib (Python wheel)"
    if want not in facts: errors.append(f"facts lack '{want}'")
for p in programs:
    if f"{p}: starts" not in kit["program_start"]: errors.append(f"{p} did not start: {kit['program_start']}")
if kit["cannot_start"]: errors.append(f"cannot_start: {kit['cannot_start']}")
if j["fatal"]: errors.append(f"fatal: {j['fatal']}")
for e in errors: print("gpu_kit_test:", e)
sys.exit(1 if errors else 0)
PY
say "dry run: the CUDA libraries found in the fake wheels, every program started"

export LD_LIBRARY_PATH=$SITE/nvidia/cu13/lib:$SITE/nvidia/cudnn/lib:$SITE/nvidia/nccl/lib
for p in "${PROGRAMS[@]}"; do
  deps=$(ldd "$KIT/bin/$p") || fail "ldd bin/$p failed"
  grep -q "not found" <<<"$deps" && fail "bin/$p: $(grep 'not found' <<<"$deps" | tr -s ' \n' ' ')"
  leak=$(grep -E '^\s*(libyaml-cpp|libgtest|libgmock|libz\.so|libgloo|libhiredis|libibverbs|libnl-)' <<<"$deps" | grep -vE "=> $KIT/(bin/\.\./)?lib/")
  [ -z "$leak" ] || fail "bin/$p resolves outside the kit: $(tr -s ' \n' ' ' <<<"$leak")"
  cuda=$(grep -E '^\s*(libcublas|libcublasLt|libcudnn|libnccl)' <<<"$deps" | grep -v "=> $SITE/")
  [ -z "$cuda" ] || fail "bin/$p takes a CUDA library from outside the wheels: $(tr -s ' \n' ' ' <<<"$cuda")"
done
# libstdc++.so.6 appears only through the CUDA libraries and the carried Gloo, never through a program
for f in "$KIT"/bin/*; do
  readelf -d "$f" | grep -q 'NEEDED.*libstdc++' && fail "${f#"$KIT"/} needs libstdc++.so.6"
done
say "ldd: yaml-cpp, GoogleTest, zlib and Gloo from the kit or linked in; cuBLAS/cuDNN/NCCL from the wheels"

# 6. the suites the check filters on, and a CPU smoke run of the trainer from the kit's files
list() { "$KIT/bin/$1" --gtest_list_tests >"$WORK/list_$1.txt" 2>&1 || fail "bin/$1 --gtest_list_tests failed: $(tail -3 "$WORK/list_$1.txt")"; }
list test_gpu_kit
for s in CudaOps. CudaNn. CudaLayers. CudaOptim. CudaAllocator. CudaRuntime. CachingAllocator. CudaMultiGpu. \
         ProcessGroupNccl HostStaging DataLoaderPinMemory.; do
  grep -q "^$s" "$WORK/list_test_gpu_kit.txt" || fail "test_gpu_kit lists no $s tests (HostStaging: built without Gloo?)"
done
# one program for three: as many tests as test_kernels, test_dist and test_data hold
n=$(grep -c '^  ' "$WORK/list_test_gpu_kit.txt")
[ "$n" -ge 300 ] || fail "test_gpu_kit lists only $n tests"
"$KIT/bin/gpu_bench" --help >"$WORK/bench_help.txt" 2>&1 || fail "gpu_bench --help failed"
"$KIT/bin/train" --help >"$WORK/train_help.txt" 2>&1 || fail "train --help failed: $(tail -3 "$WORK/train_help.txt")"
grep -q -- "--train-subset" "$WORK/train_help.txt" || fail "train --help lists no --train-subset"
rm -rf "$WORK/smoke"
OMP_NUM_THREADS=1 "$KIT/bin/train" --model mlp --config "$KIT/share/minidl/configs/mlp.yaml" --device cpu --nproc 1 \
  --smoke-test --data "$KIT/fashion-mnist" --out "$WORK/smoke" >"$WORK/smoke.log" 2>&1 ||
  fail "the kit's train --smoke-test on the CPU failed: $(tail -5 "$WORK/smoke.log")"
[ -s "$WORK/smoke/metrics.jsonl" ] || fail "the smoke run wrote no metrics.jsonl"
say "the suites are listed; train ran a CPU smoke test from the kit's recipe and data"

# 7. without a GPU the full run stops at once, exit 1, JSON written
unset LD_LIBRARY_PATH
rm -rf "$WORK/nogpu"
"$ROOT/tools/gpu_check.sh" --kit "$KIT" "$WORK/nogpu" >"$WORK/nogpu.log" 2>&1
rc=$?
[ "$rc" = 1 ] || fail "gpu_check.sh --kit without a GPU exited $rc, expected 1: $(tail -5 "$WORK/nogpu.log")"
python3 -c 'import json,sys; f=json.load(open(sys.argv[1]))["fatal"]; sys.exit(0 if f and "no GPU" in f else 1)' \
  "$WORK/nogpu/gpu_check.json" || fail "no 'no GPU' fatal in $WORK/nogpu/gpu_check.json"
n=$(find "$WORK/nogpu" -type f | wc -l)
[ "$n" -le 8 ] || fail "the run left $n files in OUT (the device tool returns at most 8)"
say "without a GPU: exit 1, gpu_check.json says so"
say "PASS ($(( $(date +%s) - START )) s)"
