#!/usr/bin/env bash
# examples/ctest/elastic_equivalence.sh — an elastic run (minidl-run --nnodes 1:2) that loses a
# node goes on with the others and ends with the same bits as a run that never lost one:
#   reference: `train --deterministic` on 4 processes, 3 epochs of 3 steps on a slice of the data
#   then two launchers on this machine as nodes 0 and 1 (2 workers each, world size 4), every
#   run with --save-every-steps 2; once node 1's rank 2 is in step N this script kills node 1:
#   its launcher and its workers, with SIGKILL, and keeps it down. Node 0's launcher finds its
#   heartbeat gone, goes on alone (world size 2), its workers resume from the newest checkpoint
#   and finish. With MODE rejoin node 1's launcher is started again once node 0 goes on alone:
#   it is admitted at once (a restart that does not count) and the run ends on 4 processes.
# Node 0 must exit 0 and log the change with its cause, the final checkpoint's model, optimizer
# and scheduler tensors must be byte-identical to the reference's (same_weights.py), and
# metrics.jsonl must hold each epoch once.
#   elastic_equivalence.sh TRAIN LAUNCHER WORK_DIR MODE STEP...     (MODE: shrink or rejoin)
set -euo pipefail
train=$1 launcher=$2 work=$3 mode=$4
shift 4
here=$(dirname "$0")
rm -rf "$work" && mkdir -p "$work"
common=(--model mlp --epochs 3 --device cpu --train-subset 384 --val-subset 128 --workers 1 --threads 1
        --deterministic --save-every-steps 2)
"$train" "${common[@]}" --nproc 4 --out "$work/ref" >"$work/ref.log" 2>&1 || { cat "$work/ref.log"; exit 1; }
final=checkpoint_epoch_003.safetensors
export MINIDL_STORE_TOKEN=elastic-equivalence-test

source "$(dirname "$0")/wait_for_step.sh"  # wait_for_step DIR RANK STEP

# Waits until file $1 holds a line matching $2.
wait_for_line() {
  for _ in $(seq 1 6000); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.01
  done
  echo "no line '$2' in $1" >&2
  return 1
}

# Node $1's launcher, in the background, its output in $2; sets $launcher_pid.
start_node() {
  MINIDL_STEP_DIR="$steps" "$launcher" --nnodes 1:2 --nproc-per-node 2 --node-rank "$1" --master-port "$port" \
    --max-restarts 2 --rdzv-conf last_call_timeout=1 "$train" "${common[@]}" --out "$out" >"$2" 2>&1 &
  launcher_pid=$!
}

# One run: node 1 is killed once its rank 2 is in step $1.
elastic_run() {
  local step=$1 name=kill_at_$1
  steps="$work/$name.steps" out="$work/$name"
  mkdir -p "$steps"
  port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  start_node 0 "$out.node0.log"
  local node0=$launcher_pid
  start_node 1 "$out.node1.log"
  local node1=$launcher_pid
  local rank2 rank3
  rank2=$(wait_for_step "$steps" 2 "$step")
  rank3=$(wait_for_step "$steps" 3 1)
  # node 1 dies: its launcher and both its workers (each in its own process group)
  kill -KILL -- "$node1" "-$rank2" "-$rank3" 2>/dev/null || true
  wait "$node1" 2>/dev/null || true
  if [ "$mode" = rejoin ]; then
    wait_for_line "$out.node0.log" "continuing with 1 node, world size 2"
    start_node 1 "$out.node1.rejoin.log"
    node1=$launcher_pid
  fi
  local status=0
  wait "$node0" || status=$?
  [ "$mode" = rejoin ] && { wait "$node1" || status=$?; }
  local logs=("$out".*log)
  cat "${logs[@]}"
  [ "$status" = 0 ] || { echo "FAILED: $name exited $status"; exit 1; }
  grep -q "minidl-run: node 1 lost (heartbeat stopped [0-9.]* s ago): continuing with 1 node, world size 2 (restart 1/2)" \
    "$out.node0.log" || { echo "FAILED: $name: node 0 did not log going on alone"; exit 1; }
  grep -q "restart [12]: resumed from" "$out.node0.log" || { echo "FAILED: $name: no resume from a checkpoint"; exit 1; }
  if [ "$mode" = rejoin ]; then
    for log in "$out.node0.log" "$out.node1.rejoin.log"; do
      grep -q "node 1 joined: continuing with 2 nodes, world size 4 (a membership change" "$log" ||
        { echo "FAILED: $name: $log does not log node 1's return"; exit 1; }
    done
    grep "train: model" "$out.node0.log" | tail -1 | grep -q " 4 process(es)" ||
      { echo "FAILED: $name: the last group did not train on 4 processes"; exit 1; }
  fi
  /usr/bin/python3 "$here/same_weights.py" "$work/ref/$final" "$out/$final"
  [ "$(cut -d, -f1 "$out/metrics.jsonl" | tr '\n' ' ')" = '{"epoch":1 {"epoch":2 {"epoch":3 ' ] ||
    { echo "FAILED: $name: metrics.jsonl does not hold epochs 1, 2, 3 once each"; cat "$out/metrics.jsonl"; exit 1; }
}

for step in "$@"; do elastic_run "$step"; done
echo "elastic_equivalence ($mode): every run that lost node 1 matches the reference"
