#!/bin/bash
# usage: l2clv.sh SIZEKB KEYS ROUNDS ALTS : ours vs LMCache's valkey adapter on the running cluster, ABBA
# Paths from the environment (bench/archive/README.md): REPO, LMC, SCRATCH.
REPO=${REPO:-$(cd "$(dirname "$0")/../../../../.." && pwd)}
LMC=${LMC:-$REPO/target/lmcache-0.5.6/venv/bin/python}
SCRATCH=${SCRATCH:?set SCRATCH to a folder for this probe\'s own files (bench/archive/README.md)}
set -u
KB=$1 KEYS=$2 ROUNDS=$3 ALTS=$4
EPS=$(head -1 $SCRATCH/cluster.eps)
run() {
  for ep in ${EPS//,/ }; do redis-cli -p ${ep##*:} flushall async >/dev/null; done
  OPENBLAS_NUM_THREADS=1 PYTHONPATH=$REPO LMCACHE_TRACK_USAGE=false LMCACHE_DISABLE_BANNER=1 $LMC -m lmcache.cli.main bench l2 --l2-adapter "$2" --num-keys $KEYS --in-flight 1 --data-size-kb $KB --rounds $ROUNDS --warmup-rounds 1 --no-skip-verify --lookup-max-hit-rate 1.0 --format json --output $SCRATCH/l2cl.json >/dev/null 2>$SCRATCH/l2cl.err
  LABEL="$1" python3 -c "
import json,sys,os; d=json.load(open('$SCRATCH/l2cl.json'))['metrics']
r={v['operation']:v['duration_p50_ms'] for k,v in d.items() if isinstance(v,dict) and 'operation' in v}
print(f\"{os.environ['LABEL']}: store {r.get('Store')} load {r.get('Load')} lookup {r.get('Lookup')}\", flush=True)"
}
OURS='{"type":"native_plugin","module_path":"lmcache_resp.lmcache.mp","class_name":"RespConnector","adapter_params":{"url":"redis://'$EPS'","cluster":true,"num_workers":8}}'
VK='{"type":"valkey","startup_nodes":"'$EPS'","num_workers":8,"cluster_mode":true}'
for i in $(seq $ALTS); do
  if [ $((i % 2)) = 1 ]; then run ours "$OURS"; run valkey "$VK"; else run valkey "$VK"; run ours "$OURS"; fi
done
