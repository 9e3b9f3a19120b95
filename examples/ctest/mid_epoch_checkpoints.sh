#!/usr/bin/env bash
# examples/ctest/mid_epoch_checkpoints.sh — time-based mid-epoch checkpoints, how many of them
# stay, and which checkpoint a restart picks:
#   minutes  2 processes, 2 epochs of 4 steps, --save-every-minutes 0.0001 (6 ms: every step is
#            longer): a mid-epoch checkpoint after each of global steps 1 2 3 5 6 7 (the epochs'
#            last steps get the epoch checkpoints), all logged, and only the newest three
#            (5, 6, 7) left on disk; a resume from step 6 ends byte-identical to the full run
#   newest   --deterministic on 2 processes with --save-every-steps 3 (checkpoints after steps 3
#            and 6, epochs 1 and 2); then epoch 2's checkpoint is removed and checkpoint_last
#            truncated, and a restart (MINIDL_RESTART_COUNT=1, one process) must skip the broken
#            file and resume from the mid-epoch step-6 checkpoint, which is further on than
#            epoch 1's, ending byte-identical to the uninterrupted run
#   mid_epoch_checkpoints.sh TRAIN WORK_DIR CASE
set -euo pipefail
train=$1 work=$2 case=$3
here=$(dirname "$0")
rm -rf "$work" && mkdir -p "$work"
common=(--model cnn --epochs 2 --device cpu --train-subset 512 --val-subset 128 --workers 1 --threads 1)
fail() { echo "FAILED: $*"; exit 1; }

case $case in
  minutes)
    "$train" "${common[@]}" --nproc 2 --save-every-minutes 0.0001 --dist-timeout 30 --out "$work/a" | tee "$work/a.log"
    saved=$(grep -o "saved .*checkpoint_step_[0-9]*" "$work/a.log" | grep -o "[0-9]*$" | tr '\n' ' ')
    [ "$saved" = "0000001 0000002 0000003 0000005 0000006 0000007 " ] || fail "mid-epoch saves after steps '$saved'"
    kept=$(cd "$work/a" && ls checkpoint_step_* | tr '\n' ' ')
    [ "$kept" = "checkpoint_step_0000005.safetensors checkpoint_step_0000006.safetensors checkpoint_step_0000007.safetensors " ] ||
      fail "kept '$kept', expected the newest three step checkpoints"
    "$train" "${common[@]}" --nproc 2 --save-every-minutes 0.0001 --resume "$work/a/checkpoint_step_0000006.safetensors" \
      --out "$work/b" | tee "$work/b.log"
    grep -q "after step 2 of epoch 2" "$work/b.log" || fail "b did not resume after step 2 of epoch 2"
    /usr/bin/python3 "$here/same_weights.py" "$work/a/checkpoint_epoch_002.safetensors" "$work/b/checkpoint_epoch_002.safetensors" ;;
  newest)
    "$train" "${common[@]}" --deterministic --nproc 2 --save-every-steps 3 --out "$work/a" >"$work/a.log"
    cp "$work/a/checkpoint_epoch_002.safetensors" "$work/reference.safetensors"
    rm "$work/a/checkpoint_epoch_002.safetensors"
    truncate -s 1000 "$work/a/checkpoint_last.safetensors"
    port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port MINIDL_RESTART_COUNT=1 \
      "$train" "${common[@]}" --deterministic --save-every-steps 3 --out "$work/a" >"$work/b.log" 2>&1 ||
      { cat "$work/b.log"; fail "the restarted run failed"; }
    cat "$work/b.log"
    grep -q "not resuming from $work/a/checkpoint_last.safetensors" "$work/b.log" || fail "the truncated file was not skipped"
    grep -q "restart 1: resumed from $work/a/checkpoint_step_0000006.safetensors after step 2 of epoch 2" "$work/b.log" ||
      fail "the restart did not resume from the newest checkpoint (step 6)"
    /usr/bin/python3 "$here/same_weights.py" "$work/reference.safetensors" "$work/a/checkpoint_epoch_002.safetensors" ;;
  *) echo "unknown case $case"; exit 2 ;;
esac
echo "mid_epoch_checkpoints $case: ok"
