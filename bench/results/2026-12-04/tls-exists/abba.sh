#!/bin/bash
# usage: abba.sh OUTDIR A B [pairs]
#   BUILDS: a folder with a source tree per build, BUILDS/A and BUILDS/B, each with its
#           lmcache_resp/_native.abi3.so (README.md); each run starts in its build's tree
#   PY:     the Python (default: this checkout's .venv)
out=$(mkdir -p "$1" && cd "$1" && pwd); a=$2; b=$3; pairs=${4:-2}
BUILDS=${BUILDS:?set BUILDS to the folder of the builds\' source trees (README.md)}
PY=${PY:-$(cd "$(dirname "$0")/../../../.." && pwd)/.venv/bin/python}
mkdir -p $out
i=0
for p in $(seq $pairs); do
  for n in $a $b $b $a; do
    i=$((i+1))
    cd "$BUILDS/$n"
    extra=""; { [ $n = head ] || [ $n = fix ]; } && extra="--regime fresh"
    "$PY" -m lmcache_resp.bench --tls --chunk-mb ${CHUNK_MB:-0.0625} --num-keys 20000 --rounds ${ROUNDS:-5} --ops set,exists $extra > $out/$i-$n.txt 2>&1
    echo "$i $n $(grep 'Batch EXISTS' $out/$i-$n.txt) $(grep 'Batch SET' $out/$i-$n.txt)"
  done
done
