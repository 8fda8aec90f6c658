#!/bin/bash
# usage: l2so.sh KIND REGIME SIZEKB KEYS ROUNDS ALTS : lmcache bench l2 p50s of ours(old .so), ours(new .so), resp, rotated
# Paths from the environment (bench/archive/README.md): REPO, LMC, SCRATCH.
REPO=${REPO:-$(cd "$(dirname "$0")/../../../../.." && pwd)}
LMC=${LMC:-$REPO/target/lmcache-0.5.6/venv/bin/python}
SCRATCH=${SCRATCH:?set SCRATCH to a folder for this probe\'s own files (bench/archive/README.md)}
set -u
KIND=$1 REGIME=$2 KB=$3 KEYS=$4 ROUNDS=$5 ALTS=$6
SO=$REPO/lmcache_resp/_native.abi3.so
cd /tmp
$REPO/.venv/bin/python $SCRATCH/serve.py $KIND $REGIME > $SCRATCH/serve2.port &
SP=$!; sleep 1.5; PORT=$(head -1 $SCRATCH/serve2.port)
run() { # label json
  redis-cli -p $PORT flushall async >/dev/null
  OPENBLAS_NUM_THREADS=1 PYTHONPATH=$REPO LMCACHE_TRACK_USAGE=false LMCACHE_DISABLE_BANNER=1 $LMC -m lmcache.cli.main bench l2 --l2-adapter "$2" --num-keys $KEYS --in-flight 1 --data-size-kb $KB --rounds $ROUNDS --warmup-rounds 1 --no-skip-verify --lookup-max-hit-rate 1.0 --format json --output $SCRATCH/l2so.json >/dev/null 2>&1
  LABEL="$1" python3 -c "
import json,sys,os; d=json.load(open('$SCRATCH/l2so.json'))['metrics']
r={v['operation']:v['duration_p50_ms'] for k,v in d.items() if isinstance(v,dict) and 'operation' in v}
print(f\"{os.environ['LABEL']}: store {r.get('Store')} load {r.get('Load')} lookup {r.get('Lookup')}\", flush=True)"
}
OURS='{"type":"native_plugin","module_path":"lmcache_resp.lmcache.mp","class_name":"RespConnector","adapter_params":{"host":"127.0.0.1","port":'$PORT',"num_workers":8}}'
RESP='{"type":"resp","host":"127.0.0.1","port":'$PORT',"num_workers":8}'
cp $SCRATCH/native-new.so $SO.tmp && mv -f $SO.tmp $SO; run warm "$OURS"
for i in $(seq $ALTS); do
  if [ $((i % 2)) = 1 ]; then order="old new resp"; else order="resp new old"; fi
  for w in $order; do
    if [ $w = resp ]; then run resp "$RESP"; else cp $SCRATCH/native-$w.so $SO.tmp && mv -f $SO.tmp $SO; run $w "$OURS"; fi
  done
done
cp $SCRATCH/native-new.so $SO.tmp && mv -f $SO.tmp $SO
kill $SP; sleep 0.5; redis-cli -p $PORT shutdown nosave >/dev/null 2>&1; wait 2>/dev/null
