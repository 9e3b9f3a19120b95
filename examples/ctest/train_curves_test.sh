#!/usr/bin/env bash
# examples/ctest/train_curves_test.sh — a run ends by drawing OUT/curves.png and printing its path;
# `--plot none` draws nothing; `--plot` with another value is a usage error (exit 2). Run through
# with_data.sh (needs Fashion-MNIST); python3-matplotlib as in plot_metrics_test.sh.
#   train_curves_test.sh TRAIN WORK_DIR
set -uo pipefail
train=$1 work=$2
fail() { echo "train_curves_test: $*" >&2; exit 1; }
if ! /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  if [ "${CI:-}" = "true" ]; then fail "python3-matplotlib is not installed, and CI=true: failing instead of skipping"; fi
  echo "skipped: python3-matplotlib is not installed (apt-get install python3-matplotlib)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
run=(--model mlp --smoke-test --nproc 1 --threads 1 --epochs 2)

"$train" "${run[@]}" --out "$work/png" >"$work/png.log" 2>&1 || fail "train exited $? (log: $work/png.log)"
[ "$(head -c 8 "$work/png/curves.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "no PNG in $work/png/curves.png"
grep -q "wrote $work/png/curves.png" "$work/png.log" || fail "the path of curves.png was not printed"

"$train" "${run[@]}" --out "$work/none" --plot none >"$work/none.log" 2>&1 || fail "--plot none: train exited $?"
[ -f "$work/none/metrics.jsonl" ] || fail "--plot none: no metrics.jsonl"
[ ! -e "$work/none/curves.png" ] || fail "--plot none drew curves.png"

"$train" "${run[@]}" --out "$work/bad" --plot svg >"$work/bad.log" 2>&1
rc=$?
[ "$rc" = 2 ] || fail "--plot svg: exit $rc, expected 2"
grep -q -- "--plot" "$work/bad.log" || fail "--plot svg: the error does not name --plot"
echo "train_curves_test: curves.png drawn ($(stat -c %s "$work/png/curves.png") bytes), none with --plot none, --plot svg refused"
