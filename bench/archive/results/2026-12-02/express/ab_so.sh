#!/bin/bash
# usage: ab_so.sh ALTS CMD... : runs CMD with the old and the new _native .so, ABBA
# Paths from the environment (bench/archive/README.md): REPO, SCRATCH.
REPO=${REPO:-$(cd "$(dirname "$0")/../../../../.." && pwd)}
SCRATCH=${SCRATCH:?set SCRATCH to a folder for this probe\'s own files (bench/archive/README.md)}
ALTS=$1; shift
SO=$REPO/lmcache_resp/_native.abi3.so
for i in $(seq $ALTS); do
  order="old new"; [ $((i % 2)) = 0 ] && order="new old"
  for w in $order; do
    cp $SCRATCH/native-$w.so $SO.tmp && mv -f $SO.tmp $SO
    echo -n "$w: "; "$@"
  done
done
cp $SCRATCH/native-new.so $SO.tmp && mv -f $SO.tmp $SO
