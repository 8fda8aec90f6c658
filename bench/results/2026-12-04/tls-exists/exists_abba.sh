#!/bin/bash
# usage: exists_abba.sh WORKERS A B [pairs]
#   BUILDS: a folder with a source tree per build (abba.sh); PY: the Python (default: this
#   checkout's .venv); TLSDIR: the DIR of the TLS server on port 16999
#   (`python -m lmcache_resp_testing server --tls DIR/certs DIR 16999`, README.md)
w=$1; a=$2; b=$3; pairs=${4:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
BUILDS=${BUILDS:?set BUILDS to the folder of the builds\' source trees (README.md)}
TLSDIR=${TLSDIR:?set TLSDIR to the TLS server\'s DIR (README.md)}
PY=${PY:-$HERE/../../../../.venv/bin/python}
for p in $(seq $pairs); do
  for n in $a $b $b $a; do
    cd "$BUILDS/$n"
    echo "$n w=$w $(PYTHONPATH=$BUILDS/$n "$PY" "$HERE/exists.py" 16999 $w 5 10 "$TLSDIR/certs/ca.crt" | cut -d' ' -f2-)"
  done
done
