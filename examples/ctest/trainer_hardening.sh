#!/usr/bin/env bash
# examples/ctest/trainer_hardening.sh — what `train` does with careless input and a hostile
# environment; each case checks the exit status and the message (expect_exit.sh):
#   nan              --lr 1e30: exit 1 naming the step and the first non-finite tensor, no checkpoint saved
#   nan_between_checks  --lr 1e30 over 40 steps (the loss is checked every 4): the error names step 2,
#                    where the loss went NaN, and its logits (as a check at every step does), not the
#                    check's step 4; with --save-every-steps 1 the checkpoint of step 1 stays and
#                    evaluates, and none of step 2 is written
#   nan_eval         --eval of a checkpoint with a NaN weight (made here from a good one): exit 1, refused
#   bad_epoch        --resume of checkpoints whose metadata epoch is -1 / "abc": exit 1 naming the field
#   log_full         OUT/train.log is /dev/full: exit 1 "cannot write the log file ...: No space left"
#   metrics_full     OUT/metrics.jsonl is /dev/full: exit 1 "cannot append to ...: No space left"
#   empty_train      a data dir whose training set holds 0 images: exit 2
#   stale_tmp        a *.safetensors.tmp.PID of a dead PID in OUT is removed at the start
#   existing_out     a second run into the same OUT: exit 2; --overwrite and --resume are accepted
#   trainer_hardening.sh TRAIN WORK_DIR CASE
set -euo pipefail
train=$1 work=$2 case=$3
here=$(dirname "$0")
expect() { "$here/expect_exit.sh" "$@"; }
data=${MINIDL_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
rm -rf "$work" && mkdir -p "$work"
quick=(--model mlp --epochs 1 --nproc 1 --device cpu --train-subset 256 --val-subset 128 --threads 1 --data "$data")

# Copies checkpoint $1 to $2 with a change made by the Python expression $3 on `header` (the
# JSON header, metadata under "__metadata__") and `blob` (the tensor bytes, a bytearray).
edit_checkpoint() {
  /usr/bin/python3 - "$1" "$2" "$3" <<'PY'
import json, struct, sys
src, dst, change = sys.argv[1:]
with open(src, "rb") as f:
    (n,) = struct.unpack("<Q", f.read(8))
    header = json.loads(f.read(n))
    blob = bytearray(f.read())
exec(change)
h = json.dumps(header).encode()
with open(dst, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + bytes(blob))
PY
}

case $case in
  nan)
    expect 1 "non-finite loss \(.*\) at step [0-9]+; first non-finite tensor: .*last good checkpoint" \
      "$train" "${quick[@]}" --lr 1e30 --out "$work/out"
    if ls "$work/out"/checkpoint_* >/dev/null 2>&1; then echo "FAILED: a checkpoint was saved"; exit 1; fi ;;
  nan_between_checks)
    forty=(--model mlp --epochs 1 --nproc 1 --device cpu --train-subset 5120 --val-subset 128 --threads 1 --data "$data")
    expect 1 "non-finite loss \((-?nan|-?inf)\) at step 2; first non-finite tensor: the logits \(1280 of 1280 values are not finite\); found at the check of step 4; the model now holds non-finite values \(model\.[^)]*\)\)\. Stopped without saving" \
      "$train" "${forty[@]}" --lr 1e30 --out "$work/between"
    if ls "$work/between"/checkpoint_* >/dev/null 2>&1; then echo "FAILED: a checkpoint was saved"; exit 1; fi
    expect 1 "non-finite loss \((-?nan|-?inf)\) at step 2; first non-finite tensor: the logits \(1280 of 1280 values are not finite\); the model now" \
      "$train" "${forty[@]}" --lr 1e30 --save-every-steps 1 --out "$work/saved"
    expect 0 "evaluated .* on 128 test images" \
      "$train" --eval --pretrained "$work/saved/checkpoint_last.safetensors" --nproc 1 --device cpu --val-subset 128 --data "$data"
    if ls "$work/saved"/checkpoint_step_0000002* >/dev/null 2>&1; then echo "FAILED: step 2 was saved"; exit 1; fi ;;
  nan_eval)
    "$train" "${quick[@]}" --out "$work/good" >/dev/null
    edit_checkpoint "$work/good/checkpoint_last.safetensors" "$work/nan.safetensors" \
      'k = sorted(x for x in header if x.startswith("model.") and header[x]["dtype"] == "F32")[0]; o = header[k]["data_offsets"][0]; blob[o:o+4] = struct.pack("<f", float("nan"))'
    expect 1 "holds non-finite values \(model\..*1 of [0-9]+ values are not finite\)\): refusing to evaluate it" \
      "$train" --eval --pretrained "$work/nan.safetensors" --nproc 1 --device cpu --val-subset 128 --data "$data" ;;
  bad_epoch)
    "$train" "${quick[@]}" --out "$work/good" >/dev/null
    for epoch in -1 abc; do
      edit_checkpoint "$work/good/checkpoint_last.safetensors" "$work/e$epoch.safetensors" \
        "header['__metadata__']['epoch'] = '$epoch'"
      expect 1 "metadata 'epoch' must be an integer >= 0, got '$epoch'" \
        "$train" --resume "$work/e$epoch.safetensors" --nproc 1 --device cpu --epochs 2 --data "$data" --out "$work/r$epoch"
    done ;;
  log_full)
    mkdir -p "$work/out" && ln -s /dev/full "$work/out/train.log"
    expect 1 "cannot write the log file .*/train.log: No space left on device" "$train" "${quick[@]}" --out "$work/out" ;;
  metrics_full)
    mkdir -p "$work/out" && ln -s /dev/full "$work/out/metrics.jsonl"
    expect 1 "cannot append to .*/metrics.jsonl: No space left on device" \
      "$train" "${quick[@]}" --overwrite --out "$work/out" ;;
  empty_train)
    mkdir -p "$work/data"
    /usr/bin/python3 -c "
import struct, sys
open(sys.argv[1] + '/train-images-idx3-ubyte', 'wb').write(struct.pack('>IIII', 0x803, 0, 28, 28))
open(sys.argv[1] + '/train-labels-idx1-ubyte', 'wb').write(struct.pack('>II', 0x801, 0))" "$work/data"
    ln -s "$data"/t10k-* "$work/data/"
    expect 2 "the training set in .*/data is empty \(0 images\): nothing to train on" \
      "$train" --model mlp --nproc 1 --device cpu --data "$work/data" --out "$work/out" ;;
  stale_tmp)
    mkdir -p "$work/out"
    sleep 0 & dead=$! && wait $dead  # a PID that has just ended
    echo partial >"$work/out/checkpoint_last.safetensors.tmp.$dead"
    expect 0 "removed .*checkpoint_last.safetensors.tmp.$dead, left by an interrupted save" \
      "$train" "${quick[@]}" --out "$work/out"
    if ls "$work/out"/*.tmp.* >/dev/null 2>&1; then echo "FAILED: the stale file is still there"; exit 1; fi ;;
  existing_out)
    "$train" "${quick[@]}" --out "$work/out" >/dev/null
    expect 2 "--out .*/out already holds a run \(checkpoint_.*\): continue it with --resume .*--overwrite" \
      "$train" "${quick[@]}" --out "$work/out"
    expect 0 "test accuracy" "$train" "${quick[@]}" --overwrite --out "$work/out"
    [ "$(wc -l <"$work/out/metrics.jsonl")" = 1 ] || { echo "FAILED: --overwrite kept the old metrics lines"; exit 1; }
    expect 0 "resumed from" "$train" --resume "$work/out/checkpoint_last.safetensors" --epochs 2 --nproc 1 \
      --device cpu --threads 1 --data "$data" --out "$work/out"
    [ "$(wc -l <"$work/out/metrics.jsonl")" = 2 ] || { echo "FAILED: the resumed run did not append epoch 2"; exit 1; } ;;
  *) echo "unknown case $case"; exit 2 ;;
esac
echo "trainer_hardening $case: ok"
