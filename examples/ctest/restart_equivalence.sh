#!/usr/bin/env bash
# examples/ctest/restart_equivalence.sh — a run that loses a worker and restarts ends with the
# same bits as a run that never failed:
#   reference: `train --deterministic` on 2 processes, 3 epochs on a slice of the data, no failure
#   then, for several (rank, step) pairs — the first epoch (no checkpoint yet: from the start),
#   the second and the third (resumed from the last epoch's checkpoint) — the same run with
#   --max-restarts 2 while this script hurts a worker once it has reached that step:
#     kill   kill -9 it (train --max-restarts: the spawning train restarts the group)
#     stop   kill -STOP it; --dist-timeout 3 makes the other rank's collective fail, and the
#            restart log names the stopped rank
#     nodes  two minidl-run --nnodes 2 launchers (one process each) on this machine; kill -9 the
#            worker of node 1: both launchers restart their part and finish
#     midepoch  kill -9 rank 0, every run with --save-every-steps 2: the restart resumes from the
#            newest mid-epoch (or epoch) checkpoint. Rank 0 in step N (the restart's cause names
#            it) has written the checkpoints of the N - 1 steps done, and no rank can finish step
#            N without it; so the log must show a resume after global step g = the last
#            checkpoint point <= N - 1 (a multiple of K = 2 or of the epoch's steps): fewer than
#            K steps lost
# Each must exit 0, log its restart with the cause, leave a final checkpoint whose model,
# optimizer and scheduler tensors are byte-identical to the reference's (same_weights.py), and a
# metrics.jsonl with each epoch once.
#   restart_equivalence.sh TRAIN LAUNCHER WORK_DIR MODEL MODE
set -euo pipefail
train=$1 launcher=$2 work=$3 model=$4 mode=$5
here=$(dirname "$0")
rm -rf "$work" && mkdir -p "$work"
common=(--model "$model" --epochs 3 --device cpu --train-subset 384 --val-subset 128 --workers 1 --threads 1
        --deterministic)
S=3  # steps per epoch: 384 images, global batch 128 (both recipes)
K=2  # midepoch: --save-every-steps
[ "$mode" = midepoch ] && common+=(--save-every-steps $K)
"$train" "${common[@]}" --nproc 2 --out "$work/ref" >"$work/ref.log" 2>&1 || { cat "$work/ref.log"; exit 1; }
final=checkpoint_epoch_003.safetensors

source "$(dirname "$0")/wait_for_step.sh"  # wait_for_step DIR RANK STEP

# One interrupted run: hurt rank $1 at step $2 with signal $3; the run's output goes to $4.log.
interrupted() {
  local rank=$1 step=$2 sig=$3 name=$4
  local steps="$work/$name.steps" out="$work/$name"
  mkdir -p "$steps"
  local extra=()
  [ "$sig" = STOP ] && extra=(--dist-timeout 3)
  local pids=()
  if [ "$mode" = nodes ]; then
    local port
    port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    for node in 0 1; do
      MINIDL_STEP_DIR="$steps" "$launcher" --nnodes 2 --node-rank $node --nproc-per-node 1 --master-port "$port" \
        --max-restarts 2 "$train" "${common[@]}" --out "$out" >"$out.node$node.log" 2>&1 &
      pids+=($!)
    done
  else
    MINIDL_STEP_DIR="$steps" "$train" "${common[@]}" "${extra[@]}" --nproc 2 --max-restarts 2 --out "$out" \
      >"$out.log" 2>&1 &
    pids+=($!)
  fi
  local victim
  victim=$(wait_for_step "$steps" "$rank" "$step")
  kill -"$sig" "$victim"
  local status=0
  for p in "${pids[@]}"; do wait "$p" || status=$?; done
  local logs=("$out".*log)
  cat "${logs[@]}"
  [ "$status" = 0 ] || { echo "FAILED: $name exited $status"; exit 1; }
  grep -q "restart 1/2 (cause: .*rank $rank" "${logs[@]}" || { echo "FAILED: $name: no restart naming rank $rank"; exit 1; }
  if [ "$sig" = STOP ]; then
    grep -q "rank $rank (pid $victim) was stopped" "${logs[@]}" || { echo "FAILED: $name: the stopped rank is not named"; exit 1; }
  fi
  if [ "$mode" = midepoch ]; then
    # the global step g the restart resumed after, from "resumed from F after step X of epoch E"
    # or "resumed from F after epoch E"
    local resumed g
    resumed=$(grep -ho "restart 1: resumed from .* after [a-z0-9 ]*" "${logs[@]}" | head -1 || true)
    if [[ $resumed =~ after\ step\ ([0-9]+)\ of\ epoch\ ([0-9]+) ]]; then
      g=$(( (BASH_REMATCH[2] - 1) * S + BASH_REMATCH[1] ))
    elif [[ $resumed =~ after\ epoch\ ([0-9]+) ]]; then
      g=$(( BASH_REMATCH[1] * S ))
    else
      echo "FAILED: $name: no 'restart 1: resumed from' line (no checkpoint to resume from?)"; exit 1
    fi
    local failed done expected
    failed=$(grep -ho "restart 1/2 (cause: .*(at step [0-9]*)" "${logs[@]}" | grep -o "at step [0-9]*" | tail -1 || true)
    [ -n "$failed" ] || { echo "FAILED: $name: the restart's cause names no step"; exit 1; }
    done=$(( ${failed#at step } - 1 ))
    expected=$(( done - done % K > done - done % S ? done - done % K : done - done % S ))
    [ "$g" = "$expected" ] && [ $(( done - g )) -lt $K ] ||
      { echo "FAILED: $name: killed with $done steps done, resumed after step $g, not $expected ($resumed)"; exit 1; }
    echo "$name: killed with $done steps done, resumed after step $g: $(( done - g )) step(s) lost"
  fi
  if [ "$mode" = nodes ]; then
    for node in 0 1; do
      grep -q "restart 1/2" "$out.node$node.log" || { echo "FAILED: $name: node $node did not restart"; exit 1; }
    done
  fi
  /usr/bin/python3 "$here/same_weights.py" "$work/ref/$final" "$out/$final"
  [ "$(cut -d, -f1 "$out/metrics.jsonl" | tr '\n' ' ')" = '{"epoch":1 {"epoch":2 {"epoch":3 ' ] ||
    { echo "FAILED: $name: metrics.jsonl does not hold epochs 1, 2, 3 once each"; cat "$out/metrics.jsonl"; exit 1; }
}

case $mode in
  kill) interrupted 1 2 KILL k1; interrupted 0 $((S + 2)) KILL k2; interrupted 1 $((2 * S + 2)) KILL k3 ;;
  stop) interrupted 1 2 STOP s1; interrupted 0 $((2 * S + 1)) STOP s2 ;;
  nodes) interrupted 1 $((S + 2)) KILL n1 ;;
  midepoch) interrupted 0 3 KILL m1; interrupted 0 5 KILL m2; interrupted 0 $((3 * S)) KILL m3 ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
echo "restart_equivalence: every interrupted run matches the reference"
