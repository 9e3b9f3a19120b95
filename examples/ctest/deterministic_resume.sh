#!/usr/bin/env bash
# examples/ctest/deterministic_resume.sh — with --deterministic a run resumed from any checkpoint,
# on any number of processes, ends with the uninterrupted run's bits and prints its numbers:
#   A: the CNN, 2 epochs of 4 steps of 64 on 256 images, 2 processes, --save-every-steps 3
#   B: resume from A's mid-epoch checkpoint after global step 3, on 1 process
#   C: resume from A's end-of-epoch-1 checkpoint, on 4 processes
# B's and C's final checkpoints must be byte-identical to A's (model, optimizer, scheduler), and
# the metrics.jsonl lines (train loss and accuracy, folded in shard order; validation) the same
# to the last digit: epoch 2 in all three, and epoch 1 — resumed mid-way — in A and B.
#   deterministic_resume.sh TRAIN_BINARY WORK_DIR
set -euo pipefail
train=$1 work=$2
here=$(dirname "$0")
rm -rf "$work" && mkdir -p "$work"
common=(--model cnn --deterministic --epochs 2 --device cpu --train-subset 256 --val-subset 128 --global-batch-size 64
        --workers 1 --threads 1)
"$train" "${common[@]}" --nproc 2 --save-every-steps 3 --out "$work/a"
"$train" "${common[@]}" --nproc 1 --resume "$work/a/checkpoint_step_0000003.safetensors" --out "$work/b"
"$train" "${common[@]}" --nproc 4 --resume "$work/a/checkpoint_epoch_001.safetensors" --out "$work/c"
for run in b c; do
  /usr/bin/python3 "$here/same_weights.py" "$work/a/checkpoint_epoch_002.safetensors" "$work/$run/checkpoint_epoch_002.safetensors"
done
metrics() { grep "\"epoch\":$2," "$1/metrics.jsonl" | sed -E 's/,"(images_per_s|seconds|world_size)":[^,}]*//g'; }
for check in "b 1" "b 2" "c 2"; do
  read -r run epoch <<<"$check"
  if [ -z "$(metrics "$work/a" "$epoch")" ] || [ "$(metrics "$work/a" "$epoch")" != "$(metrics "$work/$run" "$epoch")" ]; then
    echo "deterministic_resume: the epoch-$epoch metrics of $run differ from the uninterrupted run's:"
    metrics "$work/a" "$epoch"; metrics "$work/$run" "$epoch"
    exit 1
  fi
done
echo "deterministic_resume: metrics identical: $(metrics "$work/a" 1) $(metrics "$work/a" 2)"
