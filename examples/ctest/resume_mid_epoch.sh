#!/usr/bin/env bash
# examples/ctest/resume_mid_epoch.sh — `train --save-every-steps K` writes mid-epoch checkpoints
# holding the data position, and `--resume` from one continues the same sample order bit for bit:
#   A: 2 epochs of 4 steps with --save-every-steps 3 (checkpoints after global steps 3 and 6,
#      i.e. mid-epoch 1 and mid-epoch 2, plus the two end-of-epoch ones)
#   B: resume from A's step-3 checkpoint      C: resume from A's step-6 checkpoint
#   D: the same 2 epochs without --save-every-steps (saving must not change the run)
# B's, C's and D's final checkpoints must be byte-identical to A's in every model, optimizer and
# scheduler tensor. The CNN (BatchNorm buffers, SGD momentum) over 2 processes on 512 training
# images keeps it to seconds.
#   resume_mid_epoch.sh TRAIN_BINARY WORK_DIR
set -euo pipefail
train=$1 work=$2
here=$(dirname "$0")
rm -rf "$work" && mkdir -p "$work"
common=(--model cnn --epochs 2 --nproc 2 --device cpu --train-subset 512 --val-subset 256 --workers 1 --threads 1)
"$train" "${common[@]}" --save-every-steps 3 --out "$work/a"
for f in checkpoint_step_0000003 checkpoint_step_0000006 checkpoint_epoch_002; do
  [ -f "$work/a/$f.safetensors" ] || { echo "resume_mid_epoch: $work/a/$f.safetensors was not written"; exit 1; }
done
out=$("$train" "${common[@]}" --resume "$work/a/checkpoint_step_0000003.safetensors" --out "$work/b")
echo "$out"
grep -q "after step 3 of epoch 1 (384 samples of it done)" <<<"$out" || { echo "resume_mid_epoch: B did not resume at step 3"; exit 1; }
"$train" "${common[@]}" --resume "$work/a/checkpoint_step_0000006.safetensors" --out "$work/c"
"$train" "${common[@]}" --out "$work/d"
for run in b c; do
  /usr/bin/python3 "$here/same_weights.py" "$work/a/checkpoint_epoch_002.safetensors" "$work/$run/checkpoint_epoch_002.safetensors"
done
/usr/bin/python3 "$here/same_weights.py" "$work/a/checkpoint_epoch_002.safetensors" "$work/d/checkpoint_epoch_002.safetensors" \
  --ignore-config-key SAVE_FREQ_STEPS
