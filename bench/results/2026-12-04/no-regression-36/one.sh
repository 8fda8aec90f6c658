#!/usr/bin/env bash
# one.sh MODE WHICH SEQ: one bench run of the build WHICH (before|after) in mode plain|tls.
#   BENCH36: a folder with a venv per build, bench36-venv-WHICH (its COMMIT file names the
#            build, README.md says how each was made); the runs start in BENCH36/bench36-runs and
#            write BENCH36/bench36-runs/out/MODE-SEQ-WHICH.txt
#   CPP:     mode plain: a Python that imports LMCache's C++ connector
#            (../shared/peers/lmcache-native/setup.sh DIR makes one, DIR/bin/python)
set -u
mode=$1 which=$2 seq=$3
BENCH36=${BENCH36:?set BENCH36 to the folder of the builds\' venvs (README.md)}
py=$BENCH36/bench36-venv-$which/bin/python
case $mode in
  plain) args=(--compare lmcache --lmcache-python "${CPP:?set CPP to a Python that imports LMCache\'s C++ connector}") ;;
  tls)   args=(--tls --compare redis-py) ;;
esac
args+=(${BENCH36_EXTRA:-})
mkdir -p "$BENCH36/bench36-runs/out"
out=$BENCH36/bench36-runs/out/$mode-$seq-$which.txt
cd "$BENCH36/bench36-runs"
{
  echo "# build: $which ($(cat "$BENCH36/bench36-venv-$which/COMMIT")), $(date -u +%FT%TZ)"
  echo "# command: $py -m lmcache_resp.bench ${args[*]}"
  start=$(date +%s.%N)
  timeout 600 "$py" -m lmcache_resp.bench "${args[@]}" 2>&1
  echo "# exit status: $?; wall: $(echo "$(date +%s.%N) - $start" | bc) s"
} > "$out"
tail -n 1 "$out"
