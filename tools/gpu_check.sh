#!/usr/bin/env bash
# tools/gpu_check.sh OUT_DIR — the GPU check of issue 7, for a machine with one (or more) NVIDIA GPU:
#   0. checks that a GPU is there (nvidia-smi lists one) before building anything
#   1. builds minidl with CUDA (Release, its own build dir: build-gpu-check)
#   2. runs the GPU tests (test_kernels: parity of every op and layer, the reference models, the
#      optimizers, dropout, the allocator; test_dist's NCCL process group with world size 1)
#   3. benchmarks: GEMM TFLOP/s via minidl vs cuBLAS called directly on the same shapes; each
#      reference model's training images/s at batch 512 (tools/gpu_bench)
#   4. trains each reference model one full epoch on Fashion-MNIST on the GPU with
#      `examples/train --device cuda --epochs 1` (one process per GPU, NCCL; with one GPU that is
#      an NCCL group of world size 1), evaluating on the 10,000 test images
#   5. prints a summary and writes OUT_DIR/gpu_check.json (and the raw logs next to it).
# Budget: under 8 minutes on one H200. Each step has its own timeout, clipped to what is left of
# MINIDL_GPU_CHECK_BUDGET_S (default 470 s); a step that no longer fits is reported as not run.
# Installs nothing. Exit status 0 only when every step passed and no GPU test skipped; without a
# GPU (or nvcc, cmake) it says so and exits 1 at once. The JSON is written on every exit path.
# Environment: MINIDL_FASHION_MNIST (data dir, default /usr/share/datasets/fashion-mnist), JOBS,
# MINIDL_GPU_CHECK_BUILD_DIR (default build-gpu-check), MINIDL_GPU_CHECK_BUDGET_S.
set -uo pipefail

OUT_DIR=${1:?usage: tools/gpu_check.sh OUT_DIR}
mkdir -p "$OUT_DIR" || { echo "gpu_check: cannot create $OUT_DIR" >&2; exit 1; }
OUT_DIR=$(cd "$OUT_DIR" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${MINIDL_GPU_CHECK_BUILD_DIR:-$ROOT/build-gpu-check}
DATA=${MINIDL_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
JOBS=${JOBS:-$(nproc)}
BUDGET=${MINIDL_GPU_CHECK_BUDGET_S:-470}
START=$(date +%s)
declare -A STATUS
STEPS=()
FAILED=0
SKIPPED=0
FATAL=""

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
  python3 - "$OUT_DIR" "$SKIPPED" "$(elapsed)" "$FATAL" "$status_lines" <<'PY'
import json, os, sys
out, skipped, secs, fatal, status_lines = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
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
summary = {"seconds": secs, "fatal": fatal or None, "gpu": gpu.strip() if gpu else None, "steps": steps,
           "tests": {"kernels": tail("test_kernels"), "nccl": tail("test_nccl"), "skipped": skipped},
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

# 0. tools and a GPU, before spending minutes on a build
command -v cmake >/dev/null || die "cmake not found"
[ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc >/dev/null || die "nvcc not found (CUDA toolkit missing)"
command -v nvidia-smi >/dev/null || die "no GPU: nvidia-smi not found (no NVIDIA driver on this machine)"
if ! timeout 30 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$OUT_DIR/gpu.txt" 2>&1 \
   || ! grep -q '[A-Za-z]' "$OUT_DIR/gpu.txt" || grep -qiE 'failed|no devices|not found|error' "$OUT_DIR/gpu.txt"; then
  die "no GPU: nvidia-smi lists no device ($(head -c 300 "$OUT_DIR/gpu.txt" | tr '\n' ' '))"
fi
cat "$OUT_DIR/gpu.txt"
[ -f "$DATA/train-images-idx3-ubyte" ] || [ -f "$DATA/train-images-idx3-ubyte.gz" ] ||
  log "WARNING: Fashion-MNIST not found in $DATA (set MINIDL_FASHION_MNIST): the epoch steps will fail"

# 1. build
step configure 120 cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMINIDL_CUDA=ON -DMINIDL_BUILD_BENCHMARKS=OFF
[ "${STATUS[configure]}" = pass ] || die "configure: ${STATUS[configure]} (see $OUT_DIR/configure.log)"
grep -q "CUDA backend ON" "$OUT_DIR/configure.log" || die "CUDA backend not enabled (see $OUT_DIR/configure.log)"
step build 300 cmake --build "$BUILD" -j "$JOBS" --target test_kernels test_dist gpu_bench train
[ "${STATUS[build]}" = pass ] || die "build: ${STATUS[build]} (see $OUT_DIR/build.log)"

# 2. GPU tests (a test that skips says why; on a GPU machine none of the CUDA tests may skip)
step test_kernels 180 "$BUILD/tests/test_kernels" \
  --gtest_filter='CudaOps*:CudaNn*:CudaLayers*:CudaOptim*:CudaAllocator*:CudaRuntime*:CachingAllocator*'
step test_nccl 60 "$BUILD/tests/test_dist" --gtest_filter='ProcessGroupNccl*'
SKIPPED=$(( $(count_skipped "$OUT_DIR/test_kernels.log") + $(count_skipped "$OUT_DIR/test_nccl.log") ))

# 3. benchmarks
step bench_gemm 60 "$BUILD/tools/gpu_bench" gemm
step bench_models 90 "$BUILD/tools/gpu_bench" models --batch 512

# 4. one full epoch per reference model with the trainer on the GPU (NCCL, one process per GPU)
for m in mlp cnn vit; do
  rm -rf "$OUT_DIR/train_$m"
  step "epoch_$m" 150 "$BUILD/examples/train" --model "$m" --device cuda --epochs 1 --data "$DATA" \
    --out "$OUT_DIR/train_$m"
done

# 5. summary
[ "$SKIPPED" = 0 ] || { log "FAILED: $SKIPPED GPU test(s) skipped on a GPU machine"; FAILED=1; }
finish "$FAILED"
