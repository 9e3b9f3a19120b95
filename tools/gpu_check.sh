#!/usr/bin/env bash
# tools/gpu_check.sh OUT_DIR — the GPU check of issue 7, for a machine with one (or more) NVIDIA GPU:
#   1. builds minidl with CUDA (Release, its own build dir: build-gpu-check)
#   2. runs the GPU tests (test_kernels: parity of every op/layer, optimizers, dropout, allocator;
#      test_dist's NCCL process group with world size 1)
#   3. benchmarks: GEMM TFLOP/s via minidl vs cuBLAS called directly on the same shapes; each
#      reference model's training images/s at batch 512 (tools/gpu_bench)
#   4. trains each reference model one epoch on Fashion-MNIST on the GPU
#      (tools/gpu_bench epoch; examples/train --device cuda with MINIDL_GPU_CHECK_USE_TRAIN=1)
#   5. prints a summary and writes OUT_DIR/gpu_check.json (and the raw logs next to it).
# Budget: under 8 minutes on one H200 (each step has its own timeout). Installs nothing; fails
# loudly (non-zero exit, the failing step named) when a tool, a device or a step is missing.
set -uo pipefail

OUT_DIR=${1:?usage: tools/gpu_check.sh OUT_DIR}
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD="$ROOT/build-gpu-check"
DATA=${MINIDL_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
JOBS=${JOBS:-$(nproc)}
START=$(date +%s)
declare -A STATUS
FAILED=0

log() { echo "[gpu_check $(($(date +%s) - START))s] $*"; }
die() { log "FATAL: $*"; exit 1; }
step() {  # step NAME TIMEOUT_S CMD... — runs CMD with its log in OUT_DIR/NAME.log
  local name=$1 t=$2; shift 2
  log "$name ..."
  if timeout "$t" "$@" >"$OUT_DIR/$name.log" 2>&1; then STATUS[$name]=pass; log "$name: ok"
  else local rc=$?; STATUS[$name]="fail (exit $rc)"; FAILED=1; log "$name: FAILED (exit $rc), last lines:"; tail -20 "$OUT_DIR/$name.log"; fi
}

command -v cmake >/dev/null || die "cmake not found"
[ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc >/dev/null || die "nvcc not found (CUDA toolkit missing)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT_DIR/gpu.txt"

# 1. build
step configure 120 cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMINIDL_CUDA=ON -DMINIDL_BUILD_BENCHMARKS=OFF
grep -q "CUDA backend ON" "$OUT_DIR/configure.log" || die "CUDA backend not enabled (see $OUT_DIR/configure.log)"
step build 300 cmake --build "$BUILD" -j "$JOBS" --target test_kernels test_dist gpu_bench
[ "${STATUS[build]}" = pass ] || die "build failed (see $OUT_DIR/build.log)"

# 2. GPU tests (a test that skips says why; on a GPU machine none of the CUDA tests may skip)
step test_kernels 180 "$BUILD/tests/test_kernels" --gtest_filter='CudaOps*:CudaNn*:CudaOptim*:CudaAllocator*:CudaRuntime*:CachingAllocator*'
step test_nccl 60 "$BUILD/tests/test_dist" --gtest_filter='ProcessGroupNccl*'
SKIPPED=$(grep -c "SKIPPED" "$OUT_DIR/test_kernels.log" || true)

# 3. benchmarks
step bench_gemm 120 "$BUILD/tools/gpu_bench" gemm
step bench_models 120 "$BUILD/tools/gpu_bench" models --batch 512

# 4. one epoch per reference model
TRAIN="$BUILD/examples/train"
for m in mlp cnn vit; do
  if [ "${MINIDL_GPU_CHECK_USE_TRAIN:-0}" = 1 ] && [ -x "$TRAIN" ]; then  # once examples/train runs on CUDA
    step "epoch_$m" 150 "$TRAIN" --model "$m" --device cuda --epochs 1 --data "$DATA"
  else
    step "epoch_$m" 150 "$BUILD/tools/gpu_bench" epoch "$m" "$DATA"
  fi
done

# 5. summary
python3 - "$OUT_DIR" "$SKIPPED" "$(($(date +%s) - START))" <<'PY' || FAILED=1
import json, os, sys, glob
out, skipped, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def last_json(name):
    p = os.path.join(out, name + ".log")
    if not os.path.exists(p): return None
    for line in reversed(open(p, errors="replace").read().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try: return json.loads(line)
            except Exception: pass
    return None
def tail(name, n=3):
    p = os.path.join(out, name + ".log")
    return open(p, errors="replace").read().splitlines()[-n:] if os.path.exists(p) else []
summary = {"seconds": secs, "gpu": open(os.path.join(out, "gpu.txt")).read().strip() if os.path.exists(os.path.join(out, "gpu.txt")) else None,
           "tests": {"kernels": tail("test_kernels"), "nccl": tail("test_nccl"), "skipped_lines": skipped},
           "gemm": last_json("bench_gemm"), "models": last_json("bench_models"),
           "epochs": {m: last_json("epoch_" + m) or tail("epoch_" + m) for m in ("mlp", "cnn", "vit")}}
json.dump(summary, open(os.path.join(out, "gpu_check.json"), "w"), indent=2)
print(json.dumps(summary, indent=2))
PY
log "steps:"; for k in "${!STATUS[@]}"; do echo "  $k: ${STATUS[$k]}"; done
log "summary written to $OUT_DIR/gpu_check.json"
[ "$SKIPPED" = 0 ] || { log "FAILED: $SKIPPED GPU test(s) skipped on a GPU machine"; FAILED=1; }
exit $FAILED
