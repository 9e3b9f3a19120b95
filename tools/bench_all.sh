#!/usr/bin/env bash
# tools/bench_all.sh — every figure of docs/benchmarks.md, from one build of one commit, in one run.
#
#   tools/bench_all.sh OUT_DIR [SECTION ...]     sections (default: all, in this order):
#     step zoo profile scaling trainer precision zero core kernels deterministic dataloader accuracy restart
#
# Each section writes OUT_DIR/SECTION.txt (its commands, their output, its wall time); OUT_DIR/machine.txt
# holds the commit, date, CPU and build flags the figures belong to. Run it on a quiet machine (nothing
# else running: every figure is a rate, and the 2-core VMs this was written on share their cores with
# whatever else runs). The PyTorch peer is PyTorch 2.15 from PyPI in a venv (TORCH_PYTHON, default
# /tmp/torch-peer/python); the build is ./build (BUILD to change it); BASELINE=PATH/bench adds an
# older build's bench to the reference models' rotation (a before/after of the same step). Each
# python peer runs with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, as docs/benchmarks.md says.
# All sections take about 45 minutes on 2 cores.
set -euo pipefail
if [[ $# -lt 1 ]]; then
  sed -n '3,5p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
out=$1
shift
sections=("$@")
[[ ${#sections[@]} -gt 0 ]] || sections=(step zoo profile scaling trainer precision zero core kernels deterministic dataloader accuracy restart)
build=${BUILD:-build}
torch_python=${TORCH_PYTHON:-/tmp/torch-peer/python}
ex=$build/examples
py=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3)
[[ -x $ex/bench ]] || { echo "bench_all: no $ex/bench: build first (cmake --build $build)" >&2; exit 2; }
[[ -x $torch_python ]] || { echo "bench_all: no PyTorch peer at $torch_python (set TORCH_PYTHON)" >&2; exit 2; }
mkdir -p "$out"

{
  echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo ' (with local changes)')"
  echo "date   $(date -u '+%Y-%m-%d %H:%M UTC')"
  lscpu | grep -E '^(Model name|CPU\(s\)|L1d|L2|L3)'
  echo "flags  $(grep -o -w -E 'avx512f|avx512_bf16|avx512_fp16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "cap    MINIDL_CPU_CAPABILITY=${MINIDL_CPU_CAPABILITY:-} (empty: the kernels the CPU has; README)"
  grep -E '^(CMAKE_BUILD_TYPE|CMAKE_CXX_COMPILER|MINIDL_NATIVE|CMAKE_CXX_FLAGS_RELEASE):' "$build/CMakeCache.txt"
  echo "load   $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out/machine.txt"
cat "$out/machine.txt"

# run SECTION CMD...: print and run one command of a section, appending to its file.
run() {
  local section=$1
  shift
  echo "\$ $*" >> "$out/$section.txt"
  "$@" >> "$out/$section.txt" 2>&1
}

for s in "${sections[@]}"; do
  start=$(date +%s)
  : > "$out/$s.txt"
  # the training runs a section writes start fresh (train refuses an --out that holds a run)
  case $s in trainer) rm -rf "$out"/runs/trainer_* ;; accuracy) rm -rf "$out"/runs/{mlp,cnn}_* "$out/runs/speedrun" ;; esac
  echo "== $s ($(date -u +%H:%M:%S), load $(cut -d' ' -f1 /proc/loadavg))"
  case $s in
    step)  # the reference models against PyTorch, 1 and 2 threads (and BASELINE's bench, when given)
      run "$s" "${py[@]}" tools/compare_pytorch.py --bench "$ex/bench" --torch-python "$torch_python" \
        --models mlp cnn vit --reps 3 --json "$out/step.jsonl" ${BASELINE:+--baseline "$BASELINE"} ;;
    zoo)  # the model zoo against PyTorch (and BASELINE's bench, when given)
      run "$s" "${py[@]}" tools/compare_pytorch.py --bench "$ex/bench" --torch-python "$torch_python" \
        --models resnet20 mobilenet unet mixer tinygpt --reps 3 --json "$out/zoo.jsonl" ${BASELINE:+--baseline "$BASELINE"} ;;
    profile)  # where each model's one-thread step goes
      for m in mlp cnn vit resnet20 mobilenet unet mixer tinygpt; do
        run "$s" "$ex/bench" --model "$m" --threads 1 --steps 5 --warmup 2 --profile
      done ;;
    scaling)  # data parallelism: the four layouts, PyTorch DDP, the all-reduce over Gloo and shm
      run "$s" "${py[@]}" tools/scaling.py --reps 3 --bench "$ex/bench" --torch-python "$torch_python" \
        --allreduce "$ex/bench_allreduce" ;;
    trainer)  # ./run.sh train's default (cnn, 2 processes x 1 thread) against 1 process x 2 threads, per epoch
      for rep in 1 2 3; do
        for n in 2 1; do
          run "$s" /usr/bin/time -f "wall %e s" "$ex/train" --model cnn --epochs 1 --nproc "$n" \
            --out "$out/runs/trainer_${n}p_$rep" --plot none
        done
      done ;;
    precision)  # bf16 against fp32, alternating, and the bf16 GEMM
      for rep in 1 2 3; do
        for m in mlp cnn vit; do
          case $m in mlp) steps=200 ;; cnn) steps=20 ;; vit) steps=10 ;; esac
          for t in 1 2; do
            for p in fp32 bf16; do
              run "$s" "$ex/bench" --model "$m" --batch-size 128 --threads "$t" --steps "$steps" --precision "$p"
            done
          done
        done
      done
      run "$s" "$ex/bench_gemm" bf16 1 3
      # both sides in bf16 and fp32: PyTorch under torch.autocast, its best of eager and compiled
      run "$s" "${py[@]}" tools/compare_pytorch.py --bench "$ex/bench" --torch-python "$torch_python" \
        --models mlp cnn vit --reps 3 --precision fp32 bf16 --json "$out/precision.jsonl" ;;
    zero)  # ZeRO-1 against plain Adam under DDP
      for rep in 1 2 3; do
        for n in 2 4; do
          for m in vit cnn mlp; do run "$s" "$ex/bench_zero" 20 "$n" "$m"; done
        done
      done ;;
    core)  # GEMM, convolution, element-wise and per-op overhead against PyTorch
      run "$s" "$ex/bench_core" --benchmark_min_time=0.5
      OMP_NUM_THREADS=1 run "$s" "$ex/bench_core" --benchmark_min_time=0.5
      run "$s" env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$torch_python" tools/bench_torch.py --threads 2
      run "$s" env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$torch_python" tools/bench_torch.py --threads 1 ;;
    kernels)  # each fast CPU kernel against its plain *_reference, one thread
      run "$s" "$ex/bench_gemm" 1 11
      run "$s" "$ex/bench_attention" 1 11
      run "$s" "$ex/bench_kernels" 1 11 ;;
    deterministic)  # what DeterministicDDP costs against ordinary DDP
      OMP_WAIT_POLICY=PASSIVE run "$s" "$ex/bench_deterministic" 7 4 ;;
    dataloader)
      run "$s" "$ex/bench_dataloader" ;;
    accuracy)  # recipes to test accuracy, fp32 and bf16, and the speedrun, with wall times
      for m in mlp cnn; do
        for p in fp32 bf16; do
          run "$s" /usr/bin/time -f "wall %e s" "$ex/train" --model "$m" --nproc 1 --precision "$p" \
            --out "$out/runs/${m}_$p" --plot none
        done
      done
      run "$s" /usr/bin/time -f "wall %e s" "$ex/train" --model mlp --nproc 2 --out "$out/runs/mlp_2p" --plot none
      run "$s" /usr/bin/time -f "wall %e s" "$ex/train" --config configs/cnn_speedrun.yaml \
        --out "$out/runs/speedrun" --plot none ;;
    restart)  # time lost when a worker is killed or hangs
      run "$s" "${py[@]}" tools/bench_restart.py --train "$ex/train" --repeats 3
      run "$s" "${py[@]}" tools/bench_restart.py --train "$ex/train" --repeats 2 --signal STOP --dist-timeout 5 ;;
    *)
      echo "bench_all: unknown section '$s'" >&2
      exit 2 ;;
  esac
  echo "wall $(($(date +%s) - start)) s" | tee -a "$out/$s.txt"
done
