#!/usr/bin/env bash
# examples/ctest/eval_reproduces.sh — `train --eval --pretrained FILE` prints the accuracy that
# was recorded in FILE when it was saved: train the MLP for one epoch on a slice of the data with
# 1 process, then evaluate its checkpoint with 2 processes (exact sharding: same numbers).
#   eval_reproduces.sh TRAIN_BINARY WORK_DIR
set -euo pipefail
train=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
"$train" --model mlp --epochs 1 --nproc 1 --device cpu --train-subset 1024 --val-subset 500 --out "$work"
output=$("$train" --eval --pretrained "$work/checkpoint_last.safetensors" --nproc 2 --device cpu)
echo "$output"
grep -q "matches the accuracy recorded at save time" <<<"$output"
