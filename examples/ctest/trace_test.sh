#!/usr/bin/env bash
# examples/ctest/trace_test.sh — a short traced run, checked and drawn: runs PROGRAM with
# `--trace WORK/trace.json`, checks the file with check_trace.py (valid JSON, every category on
# every rank, spans that nest, bucket all-reduces launched during backward), then draws it with
# tools/draw_trace.py and checks that the PNG is one and that the summary has a line per rank.
# Exits 77 (skipped) without python3-matplotlib, except under CI=true, where that is a failure.
#   trace_test.sh REPO_ROOT WORK_DIR RANKS STEPS CATEGORIES PROGRAM [ARGS...]
set -euo pipefail
root=$1 work=$2 ranks=$3 steps=$4 categories=$5
shift 5
rm -rf "$work" && mkdir -p "$work"
"$@" --trace "$work/trace.json" >"$work/run.log" 2>&1 || { cat "$work/run.log"; echo "trace_test: the run failed"; exit 1; }
/usr/bin/python3 "$(dirname "$0")/check_trace.py" "$work/trace.json" --ranks "$ranks" --steps "$steps" --categories "$categories"
if ! /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  if [ "${CI:-}" = "true" ]; then echo "python3-matplotlib is not installed, and CI=true: failing instead of skipping" >&2; exit 1; fi
  echo "skipped: python3-matplotlib is not installed (apt-get install python3-matplotlib)"
  exit 77
fi
/usr/bin/python3 "$root/tools/draw_trace.py" "$work/trace.json" -o "$work/trace.png" | tee "$work/summary.txt"
[ "$(head -c 8 "$work/trace.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || { echo "trace_test: not a PNG"; exit 1; }
[ "$(stat -c %s "$work/trace.png")" -gt 10000 ] || { echo "trace_test: the PNG is almost empty"; exit 1; }
for ((r = 0; r < ranks; ++r)); do
  grep -Eq "^rank $r: $steps step\(s\), per step: step [0-9.]+ ms, .*backward [0-9.]+ ms, all-reduce [0-9.]+ ms \([0-9.]+ ms overlapped with backward\), exposed wait [0-9.]+ ms" "$work/summary.txt" ||
    { echo "trace_test: no summary line for rank $r"; exit 1; }
done
echo "trace_test: $(stat -c %s "$work/trace.json") bytes of trace, drawn into $(stat -c %s "$work/trace.png") bytes of PNG"
