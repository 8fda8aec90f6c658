#!/bin/bash
# usage: ab_so.sh ALTS CMD... : runs CMD with the old and the new _native .so, ABBA
ALTS=$1; shift
SO=/work/main/lmcache_resp/_native.abi3.so
for i in $(seq $ALTS); do
  order="old new"; [ $((i % 2)) = 0 ] && order="new old"
  for w in $order; do
    cp /work/scratch/native-$w.so $SO.tmp && mv -f $SO.tmp $SO
    echo -n "$w: "; "$@"
  done
done
cp /work/scratch/native-new.so $SO.tmp && mv -f $SO.tmp $SO
