#!/usr/bin/env bash
# examples/ctest/plot_metrics_test.sh — tools/plot_metrics.py turns a metrics.jsonl (three epochs
# in train's format, written here) into a PNG. Exits 77 (skipped) without python3-matplotlib, except
# under CI=true, where that is a failure.
#   plot_metrics_test.sh REPO_ROOT WORK_DIR
set -euo pipefail
root=$1 work=$2
if ! /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  # CI installs it (run.sh's PACKAGES): there a missing matplotlib is a failure, not a skip
  if [ "${CI:-}" = "true" ]; then echo "python3-matplotlib is not installed, and CI=true: failing instead of skipping" >&2; exit 1; fi
  echo "skipped: python3-matplotlib is not installed (apt-get install python3-matplotlib)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
for e in 1 2 3; do
  echo "{\"epoch\":$e,\"lr\":0.05,\"train_loss\":0.$((6 - e)),\"train_acc1\":8$e.0,\"val_loss\":0.$((5 - e)),\"val_acc1\":8$((e + 1)).5,\"val_acc5\":99.$e,\"images_per_s\":1200.0,\"seconds\":50.0,\"world_size\":2}"
done >"$work/metrics.jsonl"
/usr/bin/python3 "$root/tools/plot_metrics.py" "$work/metrics.jsonl" -o "$work/curves.png"
[ "$(head -c 8 "$work/curves.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || { echo "not a PNG"; exit 1; }
echo "plot_metrics_test: wrote a PNG of $(stat -c %s "$work/curves.png") bytes"
