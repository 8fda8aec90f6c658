#!/bin/bash
# usage: exists_abba.sh WORKERS A B [pairs]
w=$1; a=$2; b=$3; pairs=${4:-2}
for p in $(seq $pairs); do
  for n in $a $b $b $a; do
    cd /tmp/h36tls/builds/$n
    echo "$n w=$w $(PYTHONPATH=/tmp/h36tls/builds/$n /work/wt/h36-tls/.venv/bin/python /tmp/h36tls/exists.py 16999 $w 5 10 | cut -d' ' -f2-)"
  done
done
