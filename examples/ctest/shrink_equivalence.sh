#!/usr/bin/env bash
# examples/ctest/shrink_equivalence.sh — train --max-restarts with --min-procs goes on with fewer
# processes when workers die, and ends with the same bits as a run that never lost one:
#   reference: `train --deterministic` on 4 processes, global batch 192 (it splits over 4, 3 and 2
#   processes of 16-sample micro-shards), 3 epochs of 3 steps on a slice of the data
#   then the same run with --max-restarts 2 --min-procs 2 --save-every-steps 2, and this script
#   kills (-9) rank 3 once it is in step A: the run goes on with 3 processes; then rank 2 once it
#   is in step B: the run goes on with 2 and finishes.
# It must exit 0, log each shrink with its cause, train its last epochs on 2 processes, and leave
# a final checkpoint whose model, optimizer and scheduler tensors are byte-identical to the
# reference's (same_weights.py), and a metrics.jsonl with each epoch once.
#   shrink_equivalence.sh TRAIN WORK_DIR A:B...
set -euo pipefail
train=$1 work=$2
shift 2
here=$(dirname "$0")
rm -rf "$work" && mkdir -p "$work"
common=(--model mlp --epochs 3 --device cpu --train-subset 576 --val-subset 128 --workers 1 --threads 1
        --deterministic --global-batch-size 192 --save-every-steps 2)
"$train" "${common[@]}" --nproc 4 --out "$work/ref" >"$work/ref.log" 2>&1 || { cat "$work/ref.log"; exit 1; }
final=checkpoint_epoch_003.safetensors

source "$here/wait_for_step.sh"  # wait_for_step DIR RANK STEP

for kills in "$@"; do
  first=${kills%:*} second=${kills#*:}
  name=kill_at_${first}_${second} steps="$work/$name.steps" out="$work/$name"
  mkdir -p "$steps"
  MINIDL_STEP_DIR="$steps" "$train" "${common[@]}" --nproc 4 --max-restarts 2 --min-procs 2 --out "$out" \
    >"$out.log" 2>&1 &
  pid=$!
  victim=$(wait_for_step "$steps" 3 "$first")
  kill -KILL "$victim"
  # the restarted group: 3 processes, ranks 0-2; its step files are written afresh
  for _ in $(seq 1 6000); do grep -q "restart 1/2" "$out.log" && break; sleep 0.01; done
  victim=$(wait_for_step "$steps" 2 "$second")
  kill -KILL "$victim"
  status=0
  wait "$pid" || status=$?
  cat "$out.log"
  [ "$status" = 0 ] || { echo "FAILED: $name exited $status"; exit 1; }
  grep -q "restart 1/2 (cause: .*rank 3.*): rank 3 is not started again (--min-procs 2): continuing on 3 process(es)" \
    "$out.log" || { echo "FAILED: $name: no shrink to 3 naming rank 3"; exit 1; }
  grep -q "restart 2/2 (cause: .*rank 2.*): rank 2 is not started again (--min-procs 2): continuing on 2 process(es)" \
    "$out.log" || { echo "FAILED: $name: no shrink to 2 naming rank 2"; exit 1; }
  grep "train: model" "$out.log" | tail -1 | grep -q " 2 process(es)" ||
    { echo "FAILED: $name: the last group did not train on 2 processes"; exit 1; }
  /usr/bin/python3 "$here/same_weights.py" "$work/ref/$final" "$out/$final"
  [ "$(cut -d, -f1 "$out/metrics.jsonl" | tr '\n' ' ')" = '{"epoch":1 {"epoch":2 {"epoch":3 ' ] ||
    { echo "FAILED: $name: metrics.jsonl does not hold epochs 1, 2, 3 once each"; cat "$out/metrics.jsonl"; exit 1; }
done
echo "shrink_equivalence: every run that lost two workers matches the 4-process reference"
