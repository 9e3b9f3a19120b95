#!/usr/bin/env bash
# examples/ctest/resume_equivalence.sh — `train --resume` continues bit for bit:
#   A: 2 epochs in one go (checkpoints after each epoch)
#   B: resume from A's epoch-1 checkpoint, train epoch 2
#   C: A again, from scratch (same seed, same process count)
# A's and B's final checkpoints, and A's and C's, must be byte-identical in every model,
# optimizer and scheduler tensor. The CNN (BatchNorm buffers, SGD momentum) over 2 processes on
# 512 training images keeps it to seconds. Further arguments go to every run (--precision fp16:
# the loss scaler's state must resume too).
#   resume_equivalence.sh TRAIN_BINARY WORK_DIR [TRAIN_ARGS...]
set -euo pipefail
train=$1 work=$2
shift 2
here=$(dirname "$0")
rm -rf "$work" && mkdir -p "$work"
common=(--model cnn --epochs 2 --nproc 2 --device cpu --train-subset 512 --val-subset 256 --workers 1 --threads 1 "$@")
"$train" "${common[@]}" --out "$work/a"
"$train" "${common[@]}" --resume "$work/a/checkpoint_epoch_001.safetensors" --out "$work/b"
"$train" "${common[@]}" --out "$work/c"
/usr/bin/python3 "$here/same_weights.py" "$work/a/checkpoint_epoch_002.safetensors" "$work/b/checkpoint_epoch_002.safetensors"
/usr/bin/python3 "$here/same_weights.py" "$work/a/checkpoint_epoch_002.safetensors" "$work/c/checkpoint_epoch_002.safetensors"
