#!/usr/bin/env bash
# abba.sh MODE CYCLE: before, after, after, before of MODE (run numbers CYCLE*4+1..+4); one.sh
# says what it needs from the environment.
mode=$1 cycle=$2
n=$((cycle * 4))
for which in before after after before; do
  n=$((n + 1))
  echo "$mode run $n $which: $("$(dirname "$0")/one.sh" "$mode" "$which" "$n")"
done
