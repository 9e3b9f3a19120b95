#!/usr/bin/env bash
# examples/ctest/deterministic_equivalence.sh — `train --deterministic` gives the same bits on any
# number of processes: the CNN with --sync-bn (ghost batch norm in this mode), a smoke test of 4
# steps, on 1 process x batch 64, 2 processes x batch 32 and 4 x 16 (the same global batch of 64).
# Every run must exit 0 and their checkpoints must be byte-identical in every model, optimizer and
# scheduler tensor, with the same recorded validation result. Further arguments go to every run
# (--precision bf16: the bfloat16 GEMMs are thread-count independent too).
#   deterministic_equivalence.sh TRAIN_BINARY WORK_DIR [TRAIN_ARGS...]
set -euo pipefail
train=$1 work=$2
shift 2
here=$(dirname "$0")
rm -rf "$work" && mkdir -p "$work"
common=(--model cnn --sync-bn --deterministic --smoke-test --device cpu --threads 1 --workers 1 "$@")
"$train" "${common[@]}" --nproc 1 --batch-size 64 --out "$work/one"
"$train" "${common[@]}" --nproc 2 --batch-size 32 --out "$work/two"
"$train" "${common[@]}" --nproc 4 --batch-size 16 --out "$work/four"
/usr/bin/python3 "$here/same_weights.py" "$work/one/checkpoint_last.safetensors" "$work/two/checkpoint_last.safetensors"
/usr/bin/python3 "$here/same_weights.py" "$work/one/checkpoint_last.safetensors" "$work/four/checkpoint_last.safetensors"
