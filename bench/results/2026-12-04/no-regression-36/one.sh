#!/usr/bin/env bash
# one.sh MODE WHICH SEQ: one bench run of the build WHICH (before|after) in mode plain|tls.
set -u
mode=$1 which=$2 seq=$3
py=/tmp/bench36-venv-$which/bin/python
case $mode in
  plain) args=(--compare lmcache --lmcache-python /tmp/lmcache-peer/bin/python) ;;
  tls)   args=(--tls --compare redis-py) ;;
esac
args+=(${BENCH36_EXTRA:-})
out=/tmp/bench36-runs/out/$mode-$seq-$which.txt
cd /tmp/bench36-runs
{
  echo "# build: $which ($(cat /tmp/bench36-venv-$which/COMMIT)), $(date -u +%FT%TZ)"
  echo "# command: $py -m lmcache_resp.bench ${args[*]}"
  start=$(date +%s.%N)
  timeout 600 "$py" -m lmcache_resp.bench "${args[@]}" 2>&1
  echo "# exit status: $?; wall: $(echo "$(date +%s.%N) - $start" | bc) s"
} > "$out"
tail -n 1 "$out"
