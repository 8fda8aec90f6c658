#!/bin/bash
# Lookup (and store/load) p50 of `lmcache bench l2` for the harness floor (harness_floor.py, no
# I/O), ours and LMCache's `resp`, rotated, on one steady throwaway Redis.
# usage: floor.sh KEYS ALTERNATIONS [SERVER]
# Paths from the environment (bench/archive/README.md): REPO, LMC, SCRATCH.
REPO=${REPO:-$(cd "$(dirname "$0")/../../../../.." && pwd)}
LMC=${LMC:-$REPO/target/lmcache-0.5.6/venv/bin/python}
SCRATCH=${SCRATCH:?set SCRATCH to a folder for this probe\'s own files (bench/archive/README.md)}
set -u
KEYS=$1 ALTS=$2 KIND=${3:-redis}
here=$(cd "$(dirname "$0")" && pwd)
cd /tmp
$REPO/.venv/bin/python "$here/../low-water/serve.py" "$KIND" steady > $SCRATCH/floor.port &
SP=$!; sleep 1.5; PORT=$(head -1 $SCRATCH/floor.port)
run() { # label json
  redis-cli -p $PORT flushall async >/dev/null
  PYTHONPATH=$REPO:$here LMCACHE_TRACK_USAGE=false LMCACHE_DISABLE_BANNER=1 $LMC -m lmcache.cli.main bench l2 --l2-adapter "$2" --num-keys $KEYS --in-flight 1 --data-size-kb 256 --rounds 20 --warmup-rounds 1 --no-skip-verify --lookup-max-hit-rate 1.0 --format json --output $SCRATCH/floor.json >/dev/null 2>&1
  LABEL="$1" python3 -c "
import json,os; d=json.load(open('$SCRATCH/floor.json'))['metrics']
r={v['operation']:v['duration_p50_ms'] for k,v in d.items() if isinstance(v,dict) and 'operation' in v}
print(f\"{os.environ['LABEL']:5s} {$KEYS} keys: store {r.get('Store')} load {r.get('Load')} lookup {r.get('Lookup')}\")"
}
NULL='{"type":"native_plugin","module_path":"harness_floor","class_name":"NullConnector","adapter_params":{}}'
OURS='{"type":"native_plugin","module_path":"lmcache_resp.lmcache.mp","class_name":"RespConnector","adapter_params":{"host":"127.0.0.1","port":'$PORT',"num_workers":8}}'
RESP='{"type":"resp","host":"127.0.0.1","port":'$PORT',"num_workers":8}'
run warm "$OURS" > /dev/null
for i in $(seq $ALTS); do
  if [ $((i % 2)) = 1 ]; then run null "$NULL"; run ours "$OURS"; run resp "$RESP"
  else run resp "$RESP"; run ours "$OURS"; run null "$NULL"; fi
done
kill $SP; sleep 0.5; redis-cli -p $PORT shutdown nosave >/dev/null 2>&1; wait 2>/dev/null
