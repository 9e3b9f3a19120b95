#!/usr/bin/env bash
# examples/ctest/deterministic_equivalence.sh — `train --deterministic` gives the same bits on any
# number of processes: the CNN with --sync-bn (ghost batch norm in this mode), a smoke test of 4
# steps, on 1 process x batch 64 and on 2 processes x batch 32 (the same global batch of 64).
# Both runs must exit 0 and their checkpoints must be byte-identical in every model, optimizer and
# scheduler tensor, with the same recorded validation result.
#   deterministic_equivalence.sh TRAIN_BINARY WORK_DIR
set -euo pipefail
train=$1 work=$2
here=$(dirname "$0")
rm -rf "$work" && mkdir -p "$work"
common=(--model cnn --sync-bn --deterministic --smoke-test --device cpu --threads 1 --workers 1)
"$train" "${common[@]}" --nproc 1 --batch-size 64 --out "$work/one"
"$train" "${common[@]}" --nproc 2 --batch-size 32 --out "$work/two"
/usr/bin/python3 "$here/same_weights.py" "$work/one/checkpoint_last.safetensors" "$work/two/checkpoint_last.safetensors"
