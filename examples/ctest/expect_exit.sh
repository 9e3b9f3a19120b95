#!/usr/bin/env bash
# examples/ctest/expect_exit.sh — passes when a command exits with the expected status and its
# output (stdout and stderr together) matches an extended regular expression.
#   expect_exit.sh STATUS REGEX COMMAND [ARGS...]
# e.g. expect_exit.sh 2 'unknown|extra' build/examples/train --bogus
set -u
want=$1 pattern=$2
shift 2
output=$("$@" 2>&1)
got=$?
echo "$output"
if [ "$got" != "$want" ]; then
  echo "expect_exit: '$*' exited $got, expected $want" >&2
  exit 1
fi
if ! grep -Ezq -- "$pattern" <<<"$output"; then  # -z: the pattern may span lines
  echo "expect_exit: the output of '$*' does not match /$pattern/" >&2
  exit 1
fi
