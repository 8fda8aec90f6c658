#!/bin/bash
# usage: lat3.sh KIND OP N SIZE REPS ALTS : ours (floor off), ours (floor on), cpp; rotating order
#   REPO: the checkout (default this one); PY: its Python (default its .venv);
#   CPP: a Python that imports LMCache's C++ connector, lmcache.lmcache_redis (no default:
#   ../shared/peers/lmcache-native/setup.sh DIR makes one, DIR/bin/python)
set -u
KIND=$1 OP=$2 N=$3 SIZE=$4 REPS=$5 ALTS=$6
M=$(cd "$(dirname "$0")/.." && pwd)
REPO=${REPO:-$(cd "$M/../../.." && pwd)}
PY=${PY:-$REPO/.venv/bin/python}
CPP=${CPP:?set CPP to a Python that imports LMCache\'s C++ connector (lmcache.lmcache_redis)}
PORTFILE=$(mktemp)
cd /tmp
$PY $M/low-water/serve.py $KIND steady > "$PORTFILE" &
SP=$!; sleep 1.5; PORT=$(head -1 "$PORTFILE")
for i in $(seq $ALTS); do
  case $((i % 3)) in 0) order="off on cpp";; 1) order="on cpp off";; 2) order="cpp off on";; esac
  for w in $order; do
    case $w in
      off) PYTHONPATH=$REPO $PY $M/matrix/batch_latency2.py ours $PORT $OP $N $SIZE $REPS 2>/dev/null | sed 's/^ours /off  /';;
      on) env "${ONVAR:-LMR_FLOOR}=1" PYTHONPATH=$REPO $PY $M/matrix/batch_latency2.py ours $PORT $OP $N $SIZE $REPS 2>/dev/null | sed 's/^ours /on   /';;
      cpp) $CPP $M/matrix/batch_latency2.py cpp $PORT $OP $N $SIZE $REPS 2>/dev/null;;
    esac
    redis-cli -p $PORT flushall >/dev/null
  done
done
kill $SP; sleep 0.5; redis-cli -p $PORT shutdown nosave >/dev/null 2>&1; wait 2>/dev/null; rm -f "$PORTFILE"
