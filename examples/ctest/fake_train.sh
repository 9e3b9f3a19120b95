#!/usr/bin/env bash
# examples/ctest/fake_train.sh — stands in for `train` to test check_train_run.cmake itself: prints
# the final accuracy line and writes OUT/metrics.jsonl and a checkpoint, good or broken by MODE.
#   fake_train.sh MODE --out DIR     MODE: good | exit3 | nan | low | misprint
set -eu
mode=$1 out=$3
mkdir -p "$out"
loss=1.5 acc1=55.5 printed=55.50
case "$mode" in
  nan) loss=null ;;
  low) acc1=12.25 printed=12.25 ;;
  misprint) printed=56.50 ;;
esac
echo "{\"epoch\":1,\"lr\":0.05,\"train_loss\":$loss,\"train_acc1\":40.0,\"val_loss\":1.25,\"val_acc1\":$acc1,\"val_acc5\":90.0,\"images_per_s\":100.0,\"seconds\":2.0,\"world_size\":1}" >"$out/metrics.jsonl"
touch "$out/checkpoint_last.safetensors"
echo "test accuracy: top-1 $printed%  top-5 90.00%  (256 images)"
[ "$mode" = exit3 ] && exit 3
exit 0
