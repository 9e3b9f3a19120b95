# examples/ctest/wait_for_step.sh — sourced by the restart and elastic equivalence scripts.
# wait_for_step DIR RANK STEP: waits (up to 60 s) until rank RANK's step file in DIR (written by
# train's dist::StepFile: "STEP PID") says it has reached step STEP, and prints that rank's pid.
wait_for_step() {
  local dir=$1 rank=$2 step=$3
  for _ in $(seq 1 6000); do
    if [ -f "$dir/step.$rank" ]; then
      read -r now pid <"$dir/step.$rank" || true
      if [ -n "${pid:-}" ] && [ "${now:-0}" -ge "$step" ]; then echo "$pid"; return 0; fi
    fi
    sleep 0.01
  done
  echo "rank $rank never reached step $step" >&2
  return 1
}
