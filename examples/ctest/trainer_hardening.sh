#!/usr/bin/env bash
# examples/ctest/trainer_hardening.sh — what `train` does with careless input and a hostile
# environment; each case checks the exit status and the message (expect_exit.sh):
#   nan              --lr 1e30: exit 1 naming the step and the first non-finite tensor, no checkpoint
#                    saved, and saying that there is none (not "the last good checkpoint is kept")
#   nan_between_checks  --lr 1e30 over 40 steps (the loss is checked every 4): the error names step 2,
#                    where the loss went NaN, and its logits (as a check at every step does), not the
#                    check's step 4; with --save-every-steps 1 the checkpoint of step 1 stays (the
#                    message says so) and evaluates, and none of step 2 is written
#   nan_eval         --eval of a checkpoint with a NaN weight (made here from a good one): exit 1, refused
#   bad_epoch        --resume of checkpoints whose metadata epoch is -1 / "abc": exit 1 naming the field
#   log_full         OUT/train.log is /dev/full: exit 1 "cannot write the log file ...: No space left"
#   metrics_full     OUT/metrics.jsonl is /dev/full: exit 1 "cannot append to ...: No space left"
#   empty_train      a data dir whose training set holds 0 images: exit 2
#   stale_tmp        a *.safetensors.tmp.PID of a dead PID in OUT is removed at the start
#   existing_out     a second run into the same OUT: exit 2; --overwrite and --resume are accepted
#   corrupt          400,000 bytes of 0x7f written into a checkpoint's tensor data: --resume and --eval
#                    refuse it by name (its tensor_crc32 no longer matches, exit 1); the checksum of
#                    a good file is Python's zlib.crc32 of its data section
#   corrupt_restart  the restart a user gets from `train --max-restarts` (no test-only variables): rank 0
#                    of a --deterministic run is killed after epoch N >= 2 was saved, with a temporary
#                    file of its pid left as a killed save leaves it, and checkpoint_last and
#                    checkpoint_epoch_N corrupted. The restart removes the temporary file, says why it
#                    skips the two corrupt files, resumes from epoch N - 1 and ends bit-identical to
#                    an uninterrupted run, with each epoch once in metrics.jsonl
#   same_step        `train --nproc 2 --max-restarts 3 --lr 1e30`: the NaN repeats at the same step, so
#                    the run stops after one restart naming that step (exit 1)
#   past_end         --resume of a checkpoint claiming epoch 1,000,000: exit 2 "nothing left to train";
#                    --resume of a finished run's last checkpoint says so and only evaluates (exit 0)
#   tiny_deterministic  --deterministic --train-subset 1 (less than one global batch): exit 2
#   launcher_restart  the same through `minidl-run --max-restarts` as a user runs it (no test-only
#                    variables), with --save-every-steps 4: a rank killed after epoch 2 was saved; the
#                    run restarts from the newest checkpoint (mid-epoch ones included) and ends
#                    bit-identical to an uninterrupted run
#   trainer_hardening.sh TRAIN WORK_DIR CASE [LAUNCHER]
set -euo pipefail
train=$1 work=$2 case=$3 launcher=${4:-}
here=$(dirname "$0")
expect() { "$here/expect_exit.sh" "$@"; }
data=${MINIDL_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
rm -rf "$work" && mkdir -p "$work"
quick=(--model mlp --epochs 1 --nproc 1 --device cpu --train-subset 256 --val-subset 128 --threads 1 --data "$data")

# Copies checkpoint $1 to $2 with a change made by the Python statements $3 on `header` (the
# JSON header, metadata under "__metadata__") and `blob` (the tensor bytes, a bytearray). The
# copy's tensor_crc32 is updated to its bytes (a checkpoint saved that way), unless $4 is
# "corrupt" (bytes changed after the save).
edit_checkpoint() {
  /usr/bin/python3 - "$1" "$2" "$3" "${4:-}" <<'PY'
import json, struct, sys, zlib
src, dst, change, mode = sys.argv[1:]
with open(src, "rb") as f:
    (n,) = struct.unpack("<Q", f.read(8))
    header = json.loads(f.read(n))
    blob = bytearray(f.read())
exec(change)
if mode != "corrupt":
    header["__metadata__"]["tensor_crc32"] = "%08x" % zlib.crc32(blob)
h = json.dumps(header).encode()
with open(dst, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + bytes(blob))
PY
}

# The PIDs of the children of process $1 (the ranks a train or minidl-run started), ascending.
children() {
  local stat pid ppid
  for stat in /proc/[0-9]*/stat; do
    read -r pid _ _ ppid _ <"$stat" 2>/dev/null || continue
    [ "$ppid" = "$1" ] && echo "$pid"
  done | sort -n | paste -sd ' '
}

# Waits until OUT ($1)'s train.log says that epoch 2 was saved, then stops the ranks (the
# children of $2) where they are; prints their PIDs.
stop_after_epoch_2() {
  for _ in $(seq 1 6000); do
    grep -q "saved .*checkpoint_epoch_002" "$1/train.log" 2>/dev/null && break
    sleep 0.01
  done
  local ranks
  ranks=$(children "$2")
  [ -n "$ranks" ] || { echo "FAILED: no ranks to stop (the run ended before epoch 2 was saved?)" >&2; return 1; }
  kill -STOP $ranks
  echo "$ranks"
}

case $case in
  nan)
    expect 1 "non-finite loss \(.*\) at step [0-9]+; first non-finite tensor: .*Stopped without saving: no checkpoint was saved in .*/out yet" \
      "$train" "${quick[@]}" --lr 1e30 --out "$work/out"
    if ls "$work/out"/checkpoint_* >/dev/null 2>&1; then echo "FAILED: a checkpoint was saved"; exit 1; fi ;;
  nan_between_checks)
    forty=(--model mlp --epochs 1 --nproc 1 --device cpu --train-subset 5120 --val-subset 128 --threads 1 --data "$data")
    expect 1 "non-finite loss \((-?nan|-?inf)\) at step 2; first non-finite tensor: the logits \(1280 of 1280 values are not finite\); found at the check of step 4; the model now holds non-finite values \(model\.[^)]*\)\)\. Stopped without saving" \
      "$train" "${forty[@]}" --lr 1e30 --out "$work/between"
    if ls "$work/between"/checkpoint_* >/dev/null 2>&1; then echo "FAILED: a checkpoint was saved"; exit 1; fi
    expect 1 "non-finite loss \((-?nan|-?inf)\) at step 2; first non-finite tensor: the logits \(1280 of 1280 values are not finite\); the model now.*Stopped without saving: the last good checkpoint in .*/saved is kept" \
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
  corrupt)
    "$train" --model mlp --epochs 2 --nproc 1 --device cpu --train-subset 256 --val-subset 128 --threads 1 \
      --data "$data" --out "$work/good" >/dev/null
    good=$work/good/checkpoint_last.safetensors
    /usr/bin/python3 - "$good" <<'PY'
import json, struct, sys, zlib
with open(sys.argv[1], "rb") as f:
    (n,) = struct.unpack("<Q", f.read(8))
    header = json.loads(f.read(n))
    blob = f.read()
recorded, actual = header["__metadata__"]["tensor_crc32"], "%08x" % zlib.crc32(blob)
assert recorded == actual, f"tensor_crc32 {recorded} is not zlib.crc32 of the data section ({actual})"
PY
    edit_checkpoint "$good" "$work/bad.safetensors" 'blob[0:400000] = b"\x7f" * len(blob[0:400000])' corrupt
    expect 1 "bad.safetensors is corrupt: its tensor bytes have CRC-32 [0-9a-f]{8}, but its metadata 'tensor_crc32' records [0-9a-f]{8}" \
      "$train" --resume "$work/bad.safetensors" --epochs 3 --nproc 1 --device cpu --data "$data" --out "$work/r"
    expect 1 "bad.safetensors is corrupt" \
      "$train" --eval --pretrained "$work/bad.safetensors" --nproc 1 --device cpu --val-subset 128 --data "$data"
    expect 0 "resumed from .*/good/checkpoint_last.safetensors after epoch 2" \
      "$train" --resume "$good" --epochs 3 --nproc 1 --device cpu --threads 1 --data "$data" --out "$work/good" ;;
  corrupt_restart)
    run=(--model cnn --epochs 6 --nproc 2 --device cpu --threads 1 --deterministic --train-subset 2048 --val-subset 256
         --data "$data")
    "$train" "${run[@]}" --out "$work/ref" >"$work/ref.log" 2>&1 || { cat "$work/ref.log"; exit 1; }
    out=$work/out
    "$train" "${run[@]}" --max-restarts 1 --out "$out" >"$work/run.log" 2>&1 &
    pid=$!
    ranks=$(stop_after_epoch_2 "$out" "$pid")
    n=$(cd "$out" && ls checkpoint_epoch_*.safetensors | sort | tail -1 | tr -dc 0-9 | sed 's/^0*//')
    [ "${n:-0}" -ge 2 ] && [ "$n" -lt 6 ] || { kill -KILL $ranks; echo "FAILED: stopped after epoch '${n:-}'"; exit 1; }
    rank0=${ranks%% *}
    echo partial >"$out/checkpoint_last.safetensors.tmp.$rank0"  # as rank 0 killed in a save leaves it
    for f in checkpoint_last "checkpoint_epoch_$(printf %03d "$n")"; do
      edit_checkpoint "$out/$f.safetensors" "$out/$f.safetensors" 'blob[0:400000] = b"\x7f" * len(blob[0:400000])' corrupt
    done
    kill -KILL "$rank0"
    kill -CONT $ranks 2>/dev/null || true
    status=0
    wait "$pid" || status=$?
    cat "$work/run.log"
    [ "$status" = 0 ] || { echo "FAILED: the restarted run exited $status"; exit 1; }
    for line in "removed $out/checkpoint_last.safetensors.tmp.$rank0, left by an interrupted save" \
                "not resuming from $out/checkpoint_last.safetensors: .* is corrupt" \
                "not resuming from $out/checkpoint_epoch_$(printf %03d "$n").safetensors: .* is corrupt" \
                "restart 1: resumed from $out/checkpoint_epoch_$(printf %03d $((n - 1))).safetensors after epoch $((n - 1))"; do
      grep -Eq -- "$line" "$work/run.log" "$out/train.log" || { echo "FAILED: no line /$line/"; exit 1; }
    done
    if ls "$out"/*.tmp.* >/dev/null 2>&1; then echo "FAILED: the killed save's file is still there"; exit 1; fi
    /usr/bin/python3 "$here/same_weights.py" "$work/ref/checkpoint_epoch_006.safetensors" "$out/checkpoint_epoch_006.safetensors"
    [ "$(cut -d, -f1 "$out/metrics.jsonl" | tr '\n' ' ')" = \
      '{"epoch":1 {"epoch":2 {"epoch":3 {"epoch":4 {"epoch":5 {"epoch":6 ' ] ||
      { echo "FAILED: metrics.jsonl does not hold epochs 1-6 once each"; cat "$out/metrics.jsonl"; exit 1; } ;;
  launcher_restart)
    run=(--model cnn --epochs 4 --device cpu --threads 1 --deterministic --train-subset 2048 --val-subset 256
         --save-every-steps 4 --data "$data")
    "$train" "${run[@]}" --nproc 2 --out "$work/ref" >"$work/ref.log" 2>&1 || { cat "$work/ref.log"; exit 1; }
    out=$work/out
    port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$launcher" --nproc-per-node 2 --master-port "$port" --max-restarts 2 "$train" "${run[@]}" --out "$out" \
      >"$work/run.log" 2>&1 &
    pid=$!
    ranks=$(stop_after_epoch_2 "$out" "$pid")
    # the newest checkpoint there now, by global step (16 steps an epoch): the restart's start
    newest=$(cd "$out" && for f in checkpoint_step_*.safetensors checkpoint_epoch_*.safetensors; do
      n=$(tr -dc 0-9 <<<"$f" | sed 's/^0*//'); [[ $f == checkpoint_epoch_* ]] && n=$((n * 16)); echo "$n"
    done | sort -n | tail -1)
    victim=${ranks##* }
    kill -KILL $victim
    kill -CONT $ranks 2>/dev/null || true
    status=0
    wait "$pid" || status=$?
    cat "$work/run.log"
    [ "$status" = 0 ] || { echo "FAILED: the restarted run exited $status"; exit 1; }
    grep -q "restart 1/2" "$work/run.log" || { echo "FAILED: no restart logged"; exit 1; }
    if (( newest % 16 == 0 )); then after="after epoch $((newest / 16))"; else
      after="after step $((newest % 16)) of epoch $((newest / 16 + 1))"; fi
    grep -q "restart 1: resumed from .* $after" "$out/train.log" ||
      { echo "FAILED: the restart did not resume $after (global step $newest, the newest checkpoint)"; exit 1; }
    /usr/bin/python3 "$here/same_weights.py" "$work/ref/checkpoint_epoch_004.safetensors" \
      "$out/checkpoint_epoch_004.safetensors" ;;
  same_step)
    expect 1 "restart 1/3 .*the previous failure was at the same step [0-9]+: a deterministic crash" \
      "$train" --model mlp --nproc 2 --max-restarts 3 --lr 1e30 --train-subset 8192 --val-subset 128 --device cpu \
      --threads 1 --data "$data" --out "$work/out" >"$work/log" || { cat "$work/log"; exit 1; }
    cat "$work/log"
    if grep -q "restart 2/3" "$work/log"; then echo "FAILED: restarted twice at the same step"; exit 1; fi ;;
  past_end)
    "$train" "${quick[@]}" --out "$work/good" >/dev/null
    edit_checkpoint "$work/good/checkpoint_last.safetensors" "$work/far.safetensors" \
      "header['__metadata__']['epoch'] = '1000000'; header['__metadata__']['step'] = '16'"
    expect 2 "nothing left to train: .*far.safetensors was saved after step 16 of epoch 1000001, past the last epoch of this run \(1 epochs\)" \
      "$train" --resume "$work/far.safetensors" --nproc 1 --device cpu --data "$data" --out "$work/far"
    expect 0 "nothing left to train: the checkpoint ends epoch 1, the last of 1 .*test accuracy" \
      "$train" --resume "$work/good/checkpoint_last.safetensors" --nproc 1 --device cpu --val-subset 128 \
      --data "$data" --out "$work/good" ;;
  tiny_deterministic)
    expect 2 "--deterministic trains on whole global batches only, and the training set \(1 images\) is smaller than one \(128\)" \
      "$train" --model mlp --deterministic --train-subset 1 --nproc 1 --device cpu --data "$data" --out "$work/out" ;;
  *) echo "unknown case $case"; exit 2 ;;
esac
echo "trainer_hardening $case: ok"
