#!/bin/bash
# usage: abba.sh OUTDIR A B [pairs]
out=$1; a=$2; b=$3; pairs=${4:-2}
mkdir -p $out
i=0
for p in $(seq $pairs); do
  for n in $a $b $b $a; do
    i=$((i+1))
    cd /tmp/h36tls/builds/$n
    extra=""; { [ $n = head ] || [ $n = fix ]; } && extra="--regime fresh"
    /work/wt/h36-tls/.venv/bin/python -m lmcache_resp.bench --tls --chunk-mb ${CHUNK_MB:-0.0625} --num-keys 20000 --rounds ${ROUNDS:-5} --ops set,exists $extra > $out/$i-$n.txt 2>&1
    echo "$i $n $(grep 'Batch EXISTS' $out/$i-$n.txt) $(grep 'Batch SET' $out/$i-$n.txt)"
  done
done
